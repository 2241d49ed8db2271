"""kNN graphs and CSR matrices in a store.

kNN graph (``graph/knn``): ``indices`` int64 ``(n, k)`` and ``distances`` float32 ``(n, k)``, row chunks aligned
with X so that Dask workers can write the rows of their chunk (``create_knn`` + ``write_knn_block``).

CSR matrix (any group path, default ``graph/weights``; anndata's layout of a sparse matrix):
``indptr`` int64 ``(n_rows + 1,)``, ``indices`` int32 (int64 if ``n_cols >= 2**31``) ``(nnz,)``, ``data`` float32
or float64 ``(nnz,)``, attrs ``{"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [n_rows,
n_cols]}`` plus the caller's attrs. A row block ``i0:i1`` reads ``indptr[i0:i1 + 1]`` then one slice of
``indices`` / ``data``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from . import layout
from ._jsonable import check_attrs
from .embedding_io import create_point_array, write_all_rows, write_point_block
from .arrays import read_rows, read_rows_at
from .errors import StoreFormatError, StorageError, writing
from .store import StoreRef, as_group, decoding, delete_node, get_node, has_node, location

_RESERVED_CSR_ATTRS = (layout.ATTR_ENCODING, layout.ATTR_ENCODING_VERSION, layout.ATTR_SHAPE)


# ---- kNN graph ----------------------------------------------------------------------------------------------
def _check_knn(indices: np.ndarray, distances: np.ndarray, n_index: int) -> None:
    if indices.ndim != 2 or indices.shape != distances.shape:
        raise StorageError(
            f"indices and distances must both have shape (rows, k); got {indices.shape} and {distances.shape}"
        )
    if indices.dtype.kind not in "iu":
        raise StorageError(f"indices must be integers; got dtype {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= n_index):
        raise StorageError(
            f"indices must be in [0, {n_index - 1}] (rows of the indexed data, n_index={n_index}); "
            f"got range [{indices.min()}, {indices.max()}]"
        )


def _n_index(group: Any, n_index: Any) -> int:
    if n_index is None:
        return int(get_node(group, layout.X).shape[0])
    if isinstance(n_index, bool) or not isinstance(n_index, (int, np.integer)) or n_index < 1:
        raise StorageError(f"n_index must be None or an integer >= 1; got {n_index!r}")
    return int(n_index)


def create_knn(store: StoreRef, k: int, attrs: dict | None = None, *, n_index: int | None = None,
               overwrite: bool = True) -> None:
    """Create empty ``graph/knn/indices`` (n, k) int64 and ``distances`` (n, k) float32 for block writes.

    ``attrs`` (e.g. ``{"metric": "euclidean", "method": "nndescent", "recall": 0.97}``) go on the
    ``graph/knn`` group, with ``k`` and ``n_index``: the number of rows the indices point into (default n,
    the store's own X; the training set's n for the neighbours of new points in an ``extend`` store).
    """
    group = as_group(store, "r+")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise StorageError(f"k must be an integer >= 1; got {k!r}")
    attrs = check_attrs({**(attrs or {}), "k": int(k), "n_index": _n_index(group, n_index)})
    create_point_array(group, layout.KNN_INDICES, int(k), dtype=layout.KNN_INDICES_DTYPE, fill_value=-1,
                       overwrite=overwrite)
    create_point_array(group, layout.KNN_DISTANCES, int(k), dtype=layout.KNN_DISTANCES_DTYPE, overwrite=overwrite)
    with writing(location(group, layout.KNN)):
        group[layout.KNN].attrs.update(attrs)


def write_knn_block(store: StoreRef, start: int, indices: Any, distances: Any) -> None:
    """Write the kNN rows of one aligned chunk of X (``start`` a multiple of the chunk rows)."""
    group = as_group(store, "r+")
    indices, distances = np.asarray(indices), np.asarray(distances)
    knn = get_node(group, layout.KNN, kind="group")
    _check_knn(indices, distances, int(knn.attrs.get("n_index", get_node(group, layout.X).shape[0])))
    write_point_block(group, layout.KNN_INDICES, start, indices)
    write_point_block(group, layout.KNN_DISTANCES, start, distances)


def write_knn(store: StoreRef, indices: Any, distances: Any, attrs: dict | None = None, *,
              n_index: int | None = None) -> None:
    """Write a whole kNN graph ``indices (n, k)`` int64, ``distances (n, k)`` float32 (replacing an old one).

    ``n_index``: see :func:`create_knn` (default: n of the store's X).
    """
    group = as_group(store, "r+")
    indices, distances = np.asarray(indices), np.asarray(distances)
    n = int(get_node(group, layout.X).shape[0])
    _check_knn(indices, distances, _n_index(group, n_index))
    if indices.shape[0] != n:
        raise StorageError(f"indices must have n={n} rows (one per point of X); got {indices.shape[0]}")
    create_knn(group, indices.shape[1], attrs, n_index=n_index, overwrite=True)
    write_all_rows(group, layout.KNN_INDICES, indices)
    write_all_rows(group, layout.KNN_DISTANCES, distances)


def read_knn(store: StoreRef, start: int | None = None, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the kNN graph: ``(indices int64 (b, k), distances float32 (b, k))``."""
    group = as_group(store, "r")
    return read_rows(group, layout.KNN_INDICES, start, stop), read_rows(group, layout.KNN_DISTANCES, start, stop)


def read_knn_rows(store: StoreRef, rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """The kNN lists of the rows ``rows`` (r,) (ascending, distinct, in ``[0, n)``): ``(indices int64 (r, k),
    distances float32 (r, k))``, read row chunk by row chunk (:func:`storage.arrays.read_rows_at`)."""
    group = as_group(store, "r")
    return read_rows_at(group, layout.KNN_INDICES, rows), read_rows_at(group, layout.KNN_DISTANCES, rows)


def read_knn_attrs(store: StoreRef) -> dict:
    """Attributes of ``graph/knn`` (k, metric, method, recall estimate, ...)."""
    return dict(get_node(as_group(store, "r"), layout.KNN, kind="group").attrs)


# ---- CSR matrices ---------------------------------------------------------------------------------------------
def _as_csr(csr: Any) -> sp.csr_matrix:
    if not sp.issparse(csr):
        raise StorageError(f"csr must be a scipy.sparse matrix or array; got {type(csr).__name__}")
    csr = sp.csr_matrix(csr)
    if csr.dtype.kind not in "biuf":
        raise StorageError(f"csr data must be real numbers; got dtype {csr.dtype}")
    return csr


def write_csr(store: StoreRef, name: str, csr: Any, attrs: dict | None = None) -> None:
    """Write a sparse matrix as a CSR group at ``name`` (e.g. ``layout.WEIGHTS``), replacing an old one.

    ``data`` keeps float32 / float64 (other real dtypes become float64).
    """
    layout.check_path("name", name)
    csr = _as_csr(csr)
    attrs = check_attrs(attrs or {})
    clash = [key for key in _RESERVED_CSR_ATTRS if key in attrs]
    if clash:
        raise StorageError(f"attrs keys {clash} are reserved for the CSR encoding")
    n_rows, n_cols = csr.shape
    index_dtype = np.int32 if n_cols < 2**31 else np.int64
    data_dtype = csr.dtype if csr.dtype in (np.float32, np.float64) else np.float64
    parts = {layout.CSR_INDPTR: csr.indptr.astype(np.int64, copy=False),
             layout.CSR_INDICES: csr.indices.astype(index_dtype, copy=False),
             layout.CSR_DATA: csr.data.astype(data_dtype, copy=False)}
    group = as_group(store, "r+")
    with writing(location(group, name)):
        _write_csr_parts(group, name, parts)
        group[name].attrs.update({**attrs, layout.ATTR_ENCODING: layout.CSR_ENCODING,
                                  layout.ATTR_ENCODING_VERSION: layout.CSR_ENCODING_VERSION,
                                  layout.ATTR_SHAPE: [int(n_rows), int(n_cols)]})  # written last


def _write_csr_parts(group: Any, name: str, parts: dict[str, np.ndarray]) -> None:
    """Replace the group ``name`` by one holding the 1-D arrays ``parts`` (``indptr``, ``indices``, ``data``)."""
    delete_node(group, name)
    node = group.require_group(name)
    for key, arr in parts.items():
        chunk = max(1, min(layout.CSR_CHUNK_ENTRIES, arr.shape[0]))
        out = node.create_array(key, shape=arr.shape, chunks=(chunk,), dtype=arr.dtype, fill_value=0,
                                compressors=layout.compressors())
        out[:] = arr


def _csr_group(store: StoreRef, name: str) -> Any:
    node = get_node(as_group(store, "r"), layout.check_path("name", name), kind="group")
    if node.attrs.get(layout.ATTR_ENCODING) != layout.CSR_ENCODING:
        raise StoreFormatError(f"{name!r} is not a CSR matrix (encoding-type {node.attrs.get(layout.ATTR_ENCODING)!r})")
    return node


def read_csr(store: StoreRef, name: str, rows: tuple[int, int] | None = None) -> sp.csr_matrix:
    """Read the CSR matrix at ``name``; ``rows=(i0, i1)`` reads only that row block, shape ``(i1 - i0, n_cols)``."""
    node = _csr_group(store, name)
    n_rows, n_cols = (int(v) for v in node.attrs[layout.ATTR_SHAPE])
    i0, i1 = (0, n_rows) if rows is None else (int(rows[0]), int(rows[1]))
    if not 0 <= i0 <= i1 <= n_rows:
        raise StorageError(f"rows must satisfy 0 <= i0 <= i1 <= n_rows={n_rows}; got {rows!r}")
    with decoding(name, store):
        indptr = node[layout.CSR_INDPTR][i0:i1 + 1]
        lo, hi = int(indptr[0]), int(indptr[-1])
        indices = node[layout.CSR_INDICES][lo:hi]
        data = node[layout.CSR_DATA][lo:hi]
    return sp.csr_matrix((data, indices, indptr - lo), shape=(i1 - i0, n_cols))


def read_csr_attrs(store: StoreRef, name: str) -> dict:
    """Attributes of the CSR group ``name`` (the caller's attrs plus encoding-type, encoding-version, shape)."""
    return dict(_csr_group(store, name).attrs)


# ---- pairwise constraints (STG18, semi-supervised) -----------------------------------------------------------
def _check_pairs(name: str, pairs: Any, n: int) -> np.ndarray:
    pairs = np.asarray(pairs)
    if pairs.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise StorageError(f"{name} must be an integer array of shape (p, 2); got shape {pairs.shape}, dtype {pairs.dtype}")
    if pairs.min() < 0 or pairs.max() >= n:
        raise StorageError(f"{name} must hold row indices in [0, {n - 1}]; got range [{pairs.min()}, {pairs.max()}]")
    same = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
    if same.size:
        raise StorageError(f"{name} pairs must join two different points; pair {int(same[0])} is {pairs[same[0]].tolist()}")
    return pairs.astype(np.int64)


def write_constraints(store: StoreRef, must_link: Any = None, cannot_link: Any = None) -> None:
    """Write must-link ``(p, 2)`` and cannot-link ``(q, 2)`` pairs of row indices (int64), replacing old ones."""
    group = as_group(store, "r+")
    n = int(get_node(group, layout.X).shape[0])
    pairs = {layout.MUST_LINK: _check_pairs("must_link", [] if must_link is None else must_link, n),
             layout.CANNOT_LINK: _check_pairs("cannot_link", [] if cannot_link is None else cannot_link, n)}
    for path, arr in pairs.items():
        with writing(location(group, path)):
            delete_node(group, path)
            out = group.create_array(path, shape=arr.shape, chunks=(max(1, min(arr.shape[0], 2**20)), 2),
                                     dtype="int64", fill_value=0, compressors=layout.compressors())
            out[...] = arr


def read_constraints(store: StoreRef) -> tuple[np.ndarray, np.ndarray]:
    """``(must_link (p, 2), cannot_link (q, 2))`` int64; empty ``(0, 2)`` arrays if the store has none."""
    group = as_group(store, "r")
    out = []
    for path in (layout.MUST_LINK, layout.CANNOT_LINK):
        out.append(group[path][...] if has_node(group, path) else np.zeros((0, 2), dtype=np.int64))
    return out[0], out[1]
