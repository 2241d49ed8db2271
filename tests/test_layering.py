"""The layering of ARCHITECTURE.md, checked on the source: ``flows -> tasks -> (spectral, storage)``, and no
import cycle between the modules of a package.

Every ``import`` / ``from ... import`` statement (at any depth, including inside functions) of every module
under ``spectral/``, ``storage/`` and ``tasks/`` is parsed with :mod:`ast` and compared with the packages
that layer must not reach.

Cycles: the import graph of the modules of ``spectral``, ``storage``, ``tasks`` and ``flows`` is built from the
same statements, at any depth (an import inside a function closes a cycle as well as one at the top): relative
imports are resolved, ``from pkg import name`` imports the submodule ``pkg.name`` when there is one and the
package's ``__init__`` otherwise, ``import a.b.c`` imports ``a.b.c`` (importing a submodule is not counted as
importing its package's ``__init__``, which Python runs first but which must not need the submodule). A package
``__init__`` that re-exports names depends on the modules it takes them from: its imports, and for a lazy table
(``spectral/__init__.py``, PEP 562) every string in it that names a module of the repository. So a submodule that
imports its own package's ``__init__`` to get a name re-exported from it (``from spectral import knn_graph``
inside ``spectral``) closes a cycle through that ``__init__`` and fails here: submodules import the defining
module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The one top-level import name of the installed project: the repository's folders are its subpackages.
PACKAGE = "eigenflow"
#: The repository's package folders (installed as ``eigenflow.<folder>``).
FOLDERS = ("spectral", "storage", "tasks", "flows")

#: layer -> top-level packages it must never import
FORBIDDEN = {
    "spectral": {"prefect", "zarr", "storage", "tasks", "flows"},
    "storage": {"spectral", "prefect", "tasks", "flows"},
    "tasks": {"flows"},
    "tasks/bodies": {"prefect", "flows"},  # the stage bodies run on the workers, which import no Prefect
}


def _layer_of(module: str) -> str:
    """The package an import reaches: ``eigenflow.spectral.x`` -> ``spectral``; another project's top level."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else parts[0]


def imported_top_levels(path: Path) -> list[tuple[int, str]]:
    """``(line, package)`` of each absolute import in the module at ``path`` (for ``eigenflow.<folder>...``, the
    folder)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, _layer_of(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, _layer_of(node.module)))
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            found.append((node.lineno, _layer_of(node.args[0].value)))
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


def test_the_bodies_import_no_prefect_module_of_tasks():
    """A stage body imports no module of :mod:`tasks` that imports Prefect (its worker would import Prefect)."""
    with_prefect = {f"eigenflow.tasks.{p.stem}" for p in (REPO_ROOT / "tasks").glob("*.py")
                    if "prefect" in {top for _, top in imported_top_levels(p)}}
    assert with_prefect >= {"eigenflow.tasks.fitting", "eigenflow.tasks.points"}
    graph = import_graph(REPO_ROOT, ["tasks"], prefix=f"{PACKAGE}.")
    bad = {m: sorted(graph[m] & with_prefect) for m in graph if m.startswith("eigenflow.tasks.bodies")}
    assert {m: b for m, b in bad.items() if b} == {}


def bare_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import a package folder by its bare name (``import spectral``), which resolves only
    from the repository's root, never in an installed eigenflow."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else \
            [node.args[0].value] if isinstance(node, ast.Call) and _is_dynamic_import(node) else []
        lines += [node.lineno for name in names if name.split(".")[0] in FOLDERS]
    return lines


def test_every_import_names_the_installed_package():
    """Code, tests and benchmarks import ``eigenflow.<folder>``: one top-level name in site-packages."""
    bad = [f"{path.relative_to(REPO_ROOT)}:{line}"
           for top in (*FOLDERS, "tests", "benchmarks") for path in sorted((REPO_ROOT / top).rglob("*.py"))
           for line in bare_imports(path)]
    assert bad == []


def test_checker_catches_forbidden_imports(tmp_path):
    """The checker itself can fail: plain, dotted, nested and dynamic imports are all seen."""
    src = (
        "import os\n"
        "import zarr.storage\n"
        "from prefect import task\n"
        "def f():\n"
        "    from eigenflow.storage.arrays import read_X\n"
        "    import importlib\n"
        "    importlib.import_module('eigenflow.flows.cli')\n"
        "from . import sibling\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(src)
    tops = {top for _, top in imported_top_levels(path)}
    assert tops == {"os", "zarr", "prefect", "storage", "importlib", "flows"}
    assert tops & FORBIDDEN["spectral"] == {"zarr", "prefect", "storage", "flows"}


#: packages whose module import graph must have no cycle
CYCLE_FREE = ("spectral", "storage", "tasks", "flows")


def module_name(path: Path, root: Path) -> str:
    """Dotted name of the module at ``path`` under ``root`` (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` at ``path`` imports, at any depth (see the module
    docstring); a package ``__init__`` also depends on each module its string literals name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in modules else source)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            found.add(node.args[0].value)
        elif is_package and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
            found.add(node.value)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path, packages: Iterable[str], prefix: str = "") -> dict[str, set[str]]:
    """``{module: modules it imports}`` over every module of ``packages`` under ``root`` (installed under the
    package ``prefix``, e.g. ``"eigenflow."``)."""
    paths = {prefix + module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    modules = set(paths)
    return {name: module_imports(path, name, modules) for name, path in paths.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (or a module importing itself),
    each as a sorted list: the modules that import each other in a circle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        cycles.append(sorted(component))
    return cycles


def test_no_import_cycle_between_modules():
    graph = import_graph(REPO_ROOT, CYCLE_FREE, prefix=f"{PACKAGE}.")
    assert len(graph) > 100 and "eigenflow.spectral.placement" in graph
    cycles = find_cycles(graph)
    assert cycles == [], "modules that import each other in a circle:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_cycle_finder_catches_cycles(tmp_path):
    """The cycle finder itself can fail: a circle through a function-level import, a relative import, a
    ``from pkg import submodule`` and a package ``__init__`` that re-exports lazily."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('_EXPORTS = {"thing": "pkg.sub.c"}\n')
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import thing\n")
    (pkg / "sub" / "e.py").write_text("from pkg import thing\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg"] == {"pkg.sub.c"}
    assert graph["pkg.d"] == {"pkg"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    (pkg / "sub" / "c.py").write_text("import pkg.a\nfrom pkg import thing\n")  # through the lazy __init__
    assert find_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg", "pkg.a", "pkg.b", "pkg.sub.c"]]
    (pkg / "a.py").write_text("")
    assert find_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg", "pkg.sub.c"]]
