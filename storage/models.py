"""Models as plain arrays + JSON attributes under ``models/<run>`` (the ``to_state`` / ``from_state`` protocol).

Never pickle: every array must have a bool / integer / float dtype and every attribute must be JSON-able.
``write_model`` replaces an older model of the same run and sets a completion flag last, so a model whose
write was interrupted is refused by ``read_model``. A model too large for one process is written in pieces:
``create_model`` (its row arrays, empty), ``write_model_rows`` per row chunk (e.g. from Dask workers), then
``finish_model`` (the small arrays, the attributes, the flag).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import layout
from ._jsonable import check_attrs
from .errors import StoreFormatError, StorageError, writing
from .store import StoreRef, as_group, decoding, delete_node, get_node, has_node, location


def _check_arrays(arrays: Any) -> dict[str, np.ndarray]:
    if not isinstance(arrays, dict):
        raise StorageError(f"arrays must be a dict of name -> numpy array; got {type(arrays).__name__}")
    out = {}
    for name, value in arrays.items():
        layout.check_name("model array name", name)
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise StorageError(
                f"model array {name!r} has dtype {arr.dtype}; only bool, integer and float arrays are stored "
                "(no object, string or complex arrays, never pickle)"
            )
        out[name] = arr  # (np.ascontiguousarray would turn 0-d arrays into 1-d)
    return out


def write_model(store: StoreRef, run: str, arrays: dict, attrs: dict | None = None) -> str:
    """Write a model: ``arrays`` as zarr arrays and ``attrs`` as JSON under ``models/<run>``.

    Parameters
    ----------
    store : str, os.PathLike or zarr.Group
    run : str
        Run id (``[A-Za-z0-9._-]``).
    arrays : dict of str -> ndarray
        E.g. ``{"eigenvalues": (k,), "eigenvectors": (n, k), "landmarks": (m, d)}``; any shape, numeric dtype.
    attrs : dict
        JSON-able parameters (estimator class, hyper-parameters, ...).

    Returns
    -------
    str
        The group path ``models/<run>``.
    """
    arrays = _check_arrays(arrays)
    create_model(store, run, {})
    return finish_model(store, run, arrays, attrs)


def create_model(store: StoreRef, run: str, row_arrays: dict, chunk_rows: int | None = None) -> str:
    """Start a model written in pieces (replacing an older model of ``run``): the empty arrays ``row_arrays``
    (name -> ``(shape, dtype)``, first axis the rows) chunked by ``chunk_rows`` rows, so that writers of
    different row chunks (:func:`write_model_rows`, e.g. Dask workers) never share a zarr chunk. The model is
    incomplete (refused by :func:`read_model`) until :func:`finish_model`."""
    path = layout.model_path(run)
    specs = {}
    for name, (shape, dtype) in row_arrays.items():
        layout.check_name("model array name", name)
        dtype = np.dtype(dtype)
        if dtype.kind not in "biuf" or not len(shape):
            raise StorageError(f"model row array {name!r} must have rows and a bool / integer / float dtype; got "
                               f"shape {shape}, dtype {dtype}")
        specs[name] = (tuple(shape), dtype, (max(1, min(int(chunk_rows or shape[0]), shape[0])),) + tuple(shape[1:]))
    group = as_group(store, "r+")
    with writing(location(group, path)):
        delete_node(group, path)
        model = group.require_group(path)
        for name, (shape, dtype, chunks) in specs.items():
            model.create_array(name, shape=shape, dtype=dtype, chunks=chunks, fill_value=0,
                               compressors=layout.compressors())
    return path


def write_model_rows(store: StoreRef, run: str, start: int, blocks: dict) -> None:
    """Rows ``start:start + m`` of the row arrays of an unfinished model (:func:`create_model`): ``blocks`` name ->
    ``(m, ...)``; ``start`` and ``m`` on the arrays' chunk boundaries (the last chunk may be short)."""
    model = get_node(as_group(store, "r+"), layout.model_path(run), kind="group")
    for name, block in blocks.items():
        node = model[name]
        block = np.asarray(block)
        chunk = node.chunks[0]
        if start % chunk or (block.shape[0] % chunk and start + block.shape[0] != node.shape[0]):
            raise StorageError(f"rows {start}:{start + block.shape[0]} of model array {name!r} are not whole chunks "
                               f"of {chunk} rows (of {node.shape[0]})")
        with writing(location(model, name)):
            node[start:start + block.shape[0]] = block


def finish_model(store: StoreRef, run: str, arrays: dict | None = None, attrs: dict | None = None) -> str:
    """Complete the model of ``run`` started by :func:`create_model`: write the remaining ``arrays`` whole, then
    ``attrs`` with the completion flag (last)."""
    path = layout.model_path(run)
    arrays = _check_arrays(arrays or {})
    attrs = check_attrs(attrs or {})
    if layout.ATTR_MODEL_COMPLETE in attrs:
        raise StorageError(f"attrs key {layout.ATTR_MODEL_COMPLETE!r} is reserved")
    model = get_node(as_group(store, "r+"), path, kind="group")
    with writing(location(model)):
        for name, arr in arrays.items():
            node = model.create_array(name, shape=arr.shape, dtype=arr.dtype, chunks="auto" if arr.ndim else (),
                                      fill_value=0, compressors=layout.compressors())
            node[...] = arr
        model.attrs.update({**attrs, layout.ATTR_MODEL_COMPLETE: True})  # written last
    return path


def model_complete(store: StoreRef, run: str) -> bool:
    """Whether ``models/<run>`` exists and its write finished (a resumed run redoes a model that did not)."""
    group = as_group(store, "r")
    path = layout.model_path(run)
    return has_node(group, path) and bool(get_node(group, path, kind="group").attrs.get(layout.ATTR_MODEL_COMPLETE))


def read_model(store: StoreRef, run: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read ``models/<run>`` back as ``(arrays, attrs)``; refuses a model whose write did not finish."""
    group = as_group(store, "r")
    path = layout.model_path(run)
    model = get_node(group, path, kind="group")
    attrs = dict(model.attrs)
    if not attrs.pop(layout.ATTR_MODEL_COMPLETE, False):
        raise StoreFormatError(f"model {path!r} is incomplete (its write did not finish); run the flow again")
    with decoding(path, store):
        arrays = {name: arr[...] for name, arr in model.arrays()}
    return arrays, attrs


#: Model attribute of a clustered eigenmap: its fitted cluster rule, with the clusterer's parameters and fit figures
#: (``tasks.bodies.clustering``).
ATTR_CLUSTERING = "clustering"
#: Model attribute of an aligned refit: ``{"scale": s, "rotation": R (k, k) as nested lists}``; its per-point outputs
#: are ``s * Y @ R`` of the model's own coordinates ``Y`` (:mod:`spectral.embedding.alignment`).
ATTR_ALIGNMENT = "alignment"


def record_alignment(store: StoreRef, run: str, scale: float, rotation: np.ndarray) -> None:
    """Keep the alignment of a finished model's coordinates to its predecessor's (see :data:`ATTR_ALIGNMENT`)."""
    record_model_attrs(store, run, {ATTR_ALIGNMENT: {"scale": float(scale), "rotation": np.asarray(rotation).tolist()}})


def record_model_attrs(store: StoreRef, run: str, attrs: dict) -> None:
    """Add JSON-able ``attrs`` to the finished model of ``run`` (what a later stage learns of it)."""
    attrs = check_attrs(attrs)
    if not model_complete(store, run):
        raise StoreFormatError(f"model {layout.model_path(run)!r} is incomplete (its write did not finish); run the "
                               "flow again")
    model = get_node(as_group(store, "r+"), layout.model_path(run), kind="group")
    with writing(location(model)):
        model.attrs.update(attrs)


def read_model_attrs(store: StoreRef, run: str) -> dict:
    """The attributes of ``models/<run>`` alone (no array read)."""
    return dict(get_node(as_group(store, "r"), layout.model_path(run), kind="group").attrs)


def model_alignment(attrs: dict) -> tuple[float, np.ndarray] | None:
    """``(scale, rotation)`` from a model's attributes (:func:`read_model`), None when it is not aligned."""
    aligned = attrs.get(ATTR_ALIGNMENT)
    if not aligned:
        return None
    return float(aligned["scale"]), np.asarray(aligned["rotation"], dtype=np.float64)


def list_models(store: StoreRef) -> list[str]:
    """Run ids that have a model in the store (sorted)."""
    group = as_group(store, "r")
    if not has_node(group, layout.MODELS):
        return []
    return sorted(name for name, _ in group[layout.MODELS].groups())
