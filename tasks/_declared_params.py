"""An estimator's ``__init__`` parameters and defaults read from its source text, without importing it.

``eigenflow methods`` lists every method's parameters with their defaults. Importing the estimator classes to
read their signatures would import scikit-learn and, through :mod:`spectral.neighbours.knn`, numba before the
first line is printed; this module reads the same facts from the estimators' ``.py`` files with :mod:`ast`.

What it follows (enough for eigenflow's estimators; anything else raises :class:`UnreadableSignature`, and the
registry then reads the live signature instead):

- the class, through ``from .x import Name`` re-exports of package ``__init__`` modules;
- ``__init__`` of the class, or of its first base classes that are eigenflow classes (depth first; a base from
  another package before an ``__init__`` is found is refused, since it may define one);
- defaults that are literals, names bound at module level to such defaults (``DEFAULT_MU1 = 0.01``), imported
  names (``from ._rbf import RIDGE``) and module attributes (``from . import solve`` ... ``solve.RIDGE``), and
  tuples / lists / dicts / unary minus of those.

Only modules of the packages in :data:`SOURCE_PACKAGES` are read, from the directory that holds this package.
``tests/pipeline/test_cli_light.py`` checks that every registered method's defaults read here equal its live signature.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Packages whose modules are read (the estimators and the modules their defaults come from).
SOURCE_PACKAGES = ("eigenflow.spectral",)
_ROOT = Path(__file__).resolve().parents[1]  # the directory holding spectral/, storage/, tasks/


class UnreadableSignature(LookupError):
    """The source holds something this reader does not follow (see the module docstring)."""


def declared_init_defaults(target: str) -> dict[str, Any]:
    """``{name: default}`` of the ``__init__`` of ``target`` (``"package.module:Class"``), in signature order,
    without ``self`` and ``**kwargs``.

    Raises
    ------
    UnreadableSignature
        The class, its ``__init__`` or a default cannot be read from the source (e.g. a parameter without a
        default, a default computed by a call).
    """
    module, _, name = target.partition(":")
    found = _resolve(module, name)
    if found[0] != "class":
        raise UnreadableSignature(f"{target} is not a class defined in {SOURCE_PACKAGES}")
    init_module, init = _find_init(found[1], found[2])
    return _defaults(init_module, init)


def _module_file(module: str) -> Path:
    if not any(module == p or module.startswith(p + ".") for p in SOURCE_PACKAGES):
        raise UnreadableSignature(f"module {module} is outside {SOURCE_PACKAGES}")
    base = _ROOT.joinpath(*module.split(".")[1:])  # eigenflow.spectral.x -> <root>/spectral/x
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    raise UnreadableSignature(f"no source file for module {module} under {_ROOT}")


@lru_cache(maxsize=None)
def _symbols(module: str) -> dict[str, tuple]:
    """Top-level bindings of ``module``: name -> ("class", module, ClassDef) | ("value", module, expr) |
    ("import", module_name, attribute or None) (the last binding of a name wins)."""
    path = _module_file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    table: dict[str, tuple] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.ClassDef):
            table[node.name] = ("class", module, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            table.pop(node.name, None)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            table[node.targets[0].id] = ("value", module, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            table[node.target.id] = ("value", module, node.value)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(package, node.module, node.level)
            for alias in node.names:
                table[alias.asname or alias.name] = ("import", source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.partition(".")[0]
                table[bound] = ("import", alias.name if alias.asname else bound, None)
    return table


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    if level - 1 >= len(parts):
        raise UnreadableSignature(f"relative import beyond the top of {package}")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _resolve(module: str, name: str) -> tuple:
    """What ``name`` is in ``module``: ("class", module, ClassDef), ("value", module, expr) or ("module", name)."""
    binding = _symbols(module).get(name)
    if binding is None:
        if _is_module(f"{module}.{name}"):
            return ("module", f"{module}.{name}")
        raise UnreadableSignature(f"{name} is not bound at the top level of {module}")
    if binding[0] != "import":
        return binding
    _, source, attribute = binding
    if attribute is None:
        return ("module", source)
    if _is_module(f"{source}.{attribute}"):
        return ("module", f"{source}.{attribute}")
    return _resolve(source, attribute)


def _is_module(module: str) -> bool:
    try:
        _module_file(module)
    except UnreadableSignature:
        return False
    return True


def _find_init(module: str, cls: ast.ClassDef) -> tuple[str, ast.FunctionDef]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return module, node
    for base in cls.bases:
        found = _reference(module, base)
        if found[0] != "class":
            raise UnreadableSignature(f"base {ast.unparse(base)} of {cls.name} is not a class of {SOURCE_PACKAGES}")
        try:
            return _find_init(found[1], found[2])
        except _NoInit:
            continue
    raise _NoInit(cls.name)


class _NoInit(UnreadableSignature):
    """A class and its eigenflow bases define no ``__init__``."""


def _reference(module: str, node: ast.expr) -> tuple:
    """Resolve a ``Name`` or dotted ``Attribute`` expression of ``module`` (see :func:`_resolve`)."""
    if isinstance(node, ast.Name):
        return _resolve(module, node.id)
    if isinstance(node, ast.Attribute):
        owner = _reference(module, node.value)
        if owner[0] != "module":
            raise UnreadableSignature(f"{ast.unparse(node)}: attribute of a non-module in {module}")
        return _resolve(owner[1], node.attr)
    raise UnreadableSignature(f"{ast.unparse(node)} in {module} is not a name")


def _value(module: str, node: ast.expr) -> Any:
    """The value of a default expression of ``module`` (see the module docstring)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_value(module, item) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(module, k): _value(module, v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(module, node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, (ast.Name, ast.Attribute)):
        try:
            found = _reference(module, node)
        except UnreadableSignature as exc:
            raise UnreadableSignature(f"default {ast.unparse(node)} in {module}: {exc}") from None
        if found[0] == "value":
            return _value(found[1], found[2])
    raise UnreadableSignature(f"default {ast.unparse(node)} in {module} is not a literal or a name bound to one")


def _defaults(module: str, init: ast.FunctionDef) -> dict[str, Any]:
    args = init.args
    if args.vararg is not None:
        raise UnreadableSignature(f"{module}: __init__ takes *{args.vararg.arg}")
    positional = args.posonlyargs + args.args
    padded = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, padded))[1:] + list(zip(args.kwonlyargs, args.kw_defaults))
    out: dict[str, Any] = {}
    for arg, default in pairs:
        if default is None:
            raise UnreadableSignature(f"{module}: parameter {arg.arg} of __init__ has no default")
        out[arg.arg] = _value(module, default)
    return out
