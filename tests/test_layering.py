"""The layering of ARCHITECTURE.md, checked on the source: ``flows -> tasks -> (spectral, storage)``.

Every ``import`` / ``from ... import`` statement (at any depth, including inside functions) of every module
under ``spectral/``, ``storage/`` and ``tasks/`` is parsed with :mod:`ast` and compared with the packages
that layer must not reach.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

#: layer -> top-level packages it must never import
FORBIDDEN = {
    "spectral": {"prefect", "prefect_dask", "zarr", "storage", "tasks", "flows"},
    "storage": {"spectral", "prefect", "prefect_dask", "tasks", "flows"},
    "tasks": {"flows"},
}


def imported_top_levels(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level package)`` of each absolute import in the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            found.append((node.lineno, node.args[0].value.split(".")[0]))
    return found


def _is_dynamic_import(node: ast.Call) -> bool:
    """``importlib.import_module("pkg...")`` / ``__import__("pkg")`` with a literal name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (
        name in {"import_module", "__import__"}
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def violations(layer: str) -> list[str]:
    """Forbidden imports found in the package ``layer`` as ``"path:line imports pkg"`` strings."""
    root = REPO_ROOT / layer
    bad = []
    for path in sorted(root.rglob("*.py")):
        for line, top in imported_top_levels(path):
            if top in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {top}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downward(layer):
    assert (REPO_ROOT / layer / "__init__.py").exists()
    assert violations(layer) == []


def test_checker_catches_forbidden_imports(tmp_path):
    """The checker itself can fail: plain, dotted, nested and dynamic imports are all seen."""
    src = (
        "import os\n"
        "import zarr.storage\n"
        "from prefect import task\n"
        "def f():\n"
        "    from storage.arrays import read_X\n"
        "    import importlib\n"
        "    importlib.import_module('flows.cli')\n"
        "from . import sibling\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(src)
    tops = {top for _, top in imported_top_levels(path)}
    assert tops == {"os", "zarr", "prefect", "storage", "importlib", "flows"}
    assert tops & FORBIDDEN["spectral"] == {"zarr", "prefect", "storage", "flows"}
