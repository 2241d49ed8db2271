"""Read X and labels from a store: row ranges, chunk iteration and a Dask view aligned with the store chunks."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from . import layout
from .errors import StorageError
from .store import StoreRef, as_group, decoding, get_node, has_node


def _bounds(n: int, start: int | None, stop: int | None, name: str) -> tuple[int, int]:
    start = 0 if start is None else start
    stop = n if stop is None else stop
    for label, value in (("start", start), ("stop", stop)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise StorageError(f"{label} must be an integer in [0, {n}]; got {value!r}")
    if not 0 <= start <= stop <= n:
        raise StorageError(f"rows of {name} must satisfy 0 <= start <= stop <= n={n}; got start={start}, stop={stop}")
    return int(start), int(stop)


def check_fits_in_memory(nbytes: int, what: str) -> None:
    """Raise :class:`StorageError` before allocating ``nbytes`` for ``what`` when the machine has not that
    much memory available (psutil), instead of dying in the allocation."""
    import psutil

    available = psutil.virtual_memory().available
    if nbytes > available:
        raise StorageError(f"reading {what} needs {nbytes / 2**30:.3g} GiB of memory; {available / 2**30:.3g} GiB "
                           "are available on this machine")


def read_rows(store: StoreRef, path: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of the array at ``path`` (any per-point array), as numpy (memory checked first)."""
    arr = get_node(as_group(store, "r"), path)
    start, stop = _bounds(arr.shape[0], start, stop, path)
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    check_fits_in_memory((stop - start) * row_bytes, f"{path}[{start}:{stop}] {tuple(arr.shape)} {arr.dtype}")
    with decoding(path, store):
        return arr[start:stop]


def read_rows_at(store: StoreRef, path: str, rows: Any) -> np.ndarray:
    """The rows ``rows`` (r,) (ascending, distinct, in ``[0, n)``) of the per-point array at ``path``, ``(r, ...)``,
    read row chunk by row chunk (one chunk's run of wanted rows in memory besides the result)."""
    group = as_group(store, "r")
    node = get_node(group, path)
    n, step = int(node.shape[0]), int(node.chunks[0])
    rows = np.asarray(rows)
    if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer):
        raise StorageError(f"rows must be a 1-D integer array; got {rows.dtype} {rows.shape}")
    if rows.size and (rows[0] < 0 or rows[-1] >= n or np.any(np.diff(rows) <= 0)):
        raise StorageError(f"rows must be ascending, distinct and in [0, {n - 1}]; got range "
                           f"[{rows.min()}, {rows.max()}]")
    out = np.empty((rows.size,) + tuple(node.shape[1:]), dtype=node.dtype)
    with decoding(path, store):
        for start, stop in layout.row_chunk_bounds(n, step):
            lo, hi = (int(i) for i in np.searchsorted(rows, [start, stop]))
            if hi > lo:
                a, b = int(rows[lo]), int(rows[hi - 1]) + 1  # the run of the chunk that holds the wanted rows
                out[lo:hi] = node[a:b][rows[lo:hi] - a]
    return out


def read_X(store: StoreRef, start: int | None = None, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of X, shape ``(stop - start, d)``, in the stored dtype (float32 by default)."""
    return read_rows(store, layout.X, start, stop)


def has_labels(store: StoreRef) -> bool:
    """True if the store holds labels ``y``."""
    return has_node(as_group(store, "r"), layout.Y)


def read_labels(store: StoreRef, start: int | None = None, stop: int | None = None) -> np.ndarray | None:
    """Labels ``y[start:stop]`` (int32, -1 = unlabeled), or None if the store has no labels."""
    group = as_group(store, "r")
    if not has_node(group, layout.Y):
        return None
    return read_rows(group, layout.Y, start, stop)


def x_shape(store: StoreRef) -> tuple[int, int]:
    """``(n, d)`` of X."""
    n, d = get_node(as_group(store, "r"), layout.X).shape
    return int(n), int(d)


def chunk_rows(store: StoreRef) -> int:
    """Rows per chunk of X (every per-point array of the store uses the same row chunks)."""
    return int(get_node(as_group(store, "r"), layout.X).chunks[0])


def row_chunks(store: StoreRef) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the row chunks of X: the unit of per-chunk (Dask) work and of writes."""
    arr = get_node(as_group(store, "r"), layout.X)
    return layout.row_chunk_bounds(int(arr.shape[0]), int(arr.chunks[0]))


def iter_row_chunks(store: StoreRef, path: str = layout.X) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(start, stop, rows)`` chunk by chunk for the array at ``path`` (default X)."""
    arr = get_node(as_group(store, "r"), path)
    for start, stop in layout.row_chunk_bounds(int(arr.shape[0]), int(arr.chunks[0])):
        with decoding(path, store):
            block = arr[start:stop]
        yield start, stop, block


def X_as_dask(store: StoreRef, path: str = layout.X) -> Any:
    """X as a ``dask.array`` whose row chunks are the store's chunks (one task per chunk).

    The zarr array is embedded in the graph (it pickles to workers with its absolute store location).
    """
    import dask.array as da

    arr = get_node(as_group(store, "r"), path)
    return da.from_zarr(arr)
