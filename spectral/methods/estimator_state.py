"""Generic model state: a fitted estimator as plain arrays + JSON attributes, and back (no pickle).

:func:`estimator_state` encodes the constructor parameters (``get_params``) and every other attribute of a
fitted estimator; :func:`restore_estimator` rebuilds an equal estimator (its ``transform`` gives the same
bits). Values are encoded by type, each into a JSON descriptor plus named arrays:

- numpy arrays -> ``{"$array": key}``; scipy sparse matrices -> ``{"$sparse": format, "keys": [...],
  "shape": [...]}``;
- JSON scalars as they are; numpy scalars as Python scalars; lists, tuples and string-keyed dicts
  recursively (``{"$list": [...]}``, ``{"$tuple": [...]}``, ``{"$dict": {...}}``);
- objects of eigenflow with their own ``to_state`` / ``from_state`` -> ``{"$state": "module:Class", ...}``;
- a :class:`spectral.neighbours.index.KNNIndex` -> its build parameters and points, rebuilt once on restore (never
  rebuilt per transform).

Anything else is an error naming the attribute and its type: nothing is silently dropped.
"""

from __future__ import annotations

import importlib
import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral.errors import InputDataError

#: Separator of nested array names (array names in a model store may not contain "/").
SEP = "__"
#: Only classes of these packages are restored from a state (a state never names arbitrary code).
TRUSTED_PREFIX = "spectral."
#: The package a stored name's module lives in: stored names stay ``spectral.*`` (as stores written by every
#: version name them), the installed package is ``eigenflow.spectral``.
PACKAGE_PREFIX = "eigenflow."
#: The module path a state names a class by, for classes whose defining module has another path: the names written
#: into stores stay fixed, so that a stored model loads whichever module defines its class.
STORED_MODULES = {
    "eigenflow.spectral.operators.nystrom_features": "spectral.nystrom",
    "eigenflow.spectral.embedding.eigenmaps": "spectral.embedding",
    "eigenflow.spectral.embedding.out_of_sample": "spectral.embedding_model",
    "eigenflow.spectral.embedding.nystrom_eigenmaps": "spectral.embedding_nystrom",
    **{f"eigenflow.spectral.methods.{m}": f"spectral.{m}" for m in (
        "discriminant.estimators", "nsse.nsse", "spectral_kernels.estimators", "graph_kpca.gkpca",
        "graph_kpca.extension", "graph_kpca.lneg", "graph_kpca.multi")},
}
#: The inverse of :data:`STORED_MODULES`: the defining module of a stored name.
DEFINING_MODULES = {stored: module for module, stored in STORED_MODULES.items()}


class StateMixin:
    """``to_state`` / ``from_state`` by :func:`estimator_state` for estimators whose attributes encode as they are."""

    def to_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, attrs)`` of the fitted model (no pickle); :meth:`from_state` restores it."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        return estimator_state(self)

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict):
        """Inverse of :meth:`to_state`: ``transform`` gives the same values as the original model."""
        return restore_estimator(cls, arrays, attrs)


def estimator_state(est: Any, *, skip: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, attrs)`` of a fitted estimator: its parameters and every attribute not in ``skip``."""
    arrays: dict[str, np.ndarray] = {}
    params = {k: (None if k == "random_state" and not _is_json_seed(v) else v) for k, v in est.get_params().items()}
    fitted = {k: v for k, v in vars(est).items() if k not in params and k not in skip}
    attrs = {"class": stored_name(type(est)),
             "params": _encode(params, "p", arrays, "params"),
             "fitted": _encode(fitted, "f", arrays, "attributes")}
    return arrays, attrs


def restore_estimator(cls: type, arrays: dict, attrs: dict) -> Any:
    """The estimator ``cls`` rebuilt from :func:`estimator_state` output."""
    expected = stored_name(cls)
    if attrs.get("class") != expected:
        raise InputDataError(f"this state holds a {attrs.get('class')!r}, not a {expected!r}")
    est = cls(**_decode(attrs["params"], arrays))
    for name, value in _decode(attrs["fitted"], arrays).items():
        setattr(est, name, value)
    return est


def stored_name(cls: type) -> str:
    """``"module:Class"``, the name a state gives ``cls`` (:data:`STORED_MODULES`)."""
    module = STORED_MODULES.get(cls.__module__, cls.__module__.removeprefix(PACKAGE_PREFIX))
    return f"{module}:{cls.__name__}"


def _is_json_seed(value: Any) -> bool:
    return value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def _encode(value: Any, key: str, arrays: dict, where: str) -> Any:
    from eigenflow.spectral.neighbours.index import KNNIndex

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise InputDataError(f"{where}: array of dtype {value.dtype} cannot be stored")
        arrays[key] = value
        return {"$array": key}
    if sp.issparse(value):
        csr = sp.csr_matrix(value)
        keys = [f"{key}{SEP}{part}" for part in ("data", "indices", "indptr")]
        for k, part in zip(keys, (csr.data, csr.indices, csr.indptr)):
            arrays[k] = np.asarray(part)
        return {"$sparse": "csr_array" if isinstance(value, sp.sparray) else "csr_matrix", "keys": keys,
                "shape": list(csr.shape)}
    if isinstance(value, KNNIndex):
        arrays[f"{key}{SEP}points"] = np.asarray(value.training_points)
        return {"$knn_index": value.params, "points": f"{key}{SEP}points"}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, f"{key}{SEP}{i}", arrays, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"$tuple" if isinstance(value, tuple) else "$list": items}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise InputDataError(f"{where}: dict keys must be strings; got {sorted(map(repr, value))}")
        return {"$dict": {k: _encode(v, f"{key}{SEP}{k}", arrays, f"{where}.{k}") for k, v in value.items()}}
    if hasattr(value, "to_state") and type(value).__module__.startswith(PACKAGE_PREFIX + TRUSTED_PREFIX):
        sub_arrays, sub_attrs = value.to_state()
        for k, v in sub_arrays.items():
            arrays[f"{key}{SEP}{k}"] = v
        return {"$state": stored_name(type(value)), "prefix": f"{key}{SEP}",
                "attrs": sub_attrs}
    raise InputDataError(f"{where}: a {type(value).__module__}.{type(value).__name__} cannot be stored as plain "
                         "arrays + JSON; give its class to_state / from_state")


def _decode(desc: Any, arrays: dict) -> Any:
    if not isinstance(desc, dict):
        return desc
    if "$array" in desc:
        return np.asarray(arrays[desc["$array"]])
    if "$sparse" in desc:
        data, indices, indptr = (np.asarray(arrays[k]) for k in desc["keys"])
        kind = sp.csr_array if desc["$sparse"] == "csr_array" else sp.csr_matrix
        return kind((data, indices, indptr), shape=tuple(desc["shape"]))
    if "$knn_index" in desc:
        from eigenflow.spectral.neighbours.index import KNNIndex

        return KNNIndex.rebuild(np.asarray(arrays[desc["points"]]), desc["$knn_index"])
    if "$list" in desc:
        return [_decode(v, arrays) for v in desc["$list"]]
    if "$tuple" in desc:
        return tuple(_decode(v, arrays) for v in desc["$tuple"])
    if "$dict" in desc:
        return {k: _decode(v, arrays) for k, v in desc["$dict"].items()}
    if "$state" in desc:
        module, _, name = desc["$state"].partition(":")
        if not module.startswith(TRUSTED_PREFIX):
            raise InputDataError(f"a state may only name eigenflow classes; got {desc['$state']!r}")
        cls = getattr(importlib.import_module(DEFINING_MODULES.get(module, PACKAGE_PREFIX + module)), name)
        prefix = desc["prefix"]
        sub = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        return cls.from_state(sub, desc["attrs"])
    raise InputDataError(f"unknown state descriptor {sorted(desc)}")
