"""Per-point arrays aligned with X: embeddings and other per-point outputs (predicted labels, scores).

One generic pair does the work: :func:`create_point_array` makes an ``(n,)`` or ``(n, c)`` array whose row
chunks are X's, and :func:`write_point_block` writes one whole chunk. A block must start on a chunk boundary
and cover exactly one chunk (the last chunk may be shorter), so blocks written concurrently by Dask workers
never share a chunk (zarr rewrites a whole chunk for a partial write, so unaligned concurrent writes lose
updates). Writes are idempotent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from . import layout
from .arrays import read_rows
from .checksums import forget_chunk_records
from .errors import StoreFormatError, StorageError, writing
from ._jsonable import check_attrs
from .store import StoreRef, as_group, delete_node, get_node, has_node, location


def _default_fill(dtype: np.dtype) -> Any:
    return float("nan") if dtype.kind == "f" else 0


def create_point_array(
    store: StoreRef,
    path: str,
    n_columns: int | None = None,
    *,
    dtype: str = layout.EMBEDDING_DTYPE,
    attrs: dict | None = None,
    fill_value: Any = None,
    overwrite: bool = False,
) -> zarr.Array:
    """Create (or reuse) a per-point array of shape ``(n,)`` (``n_columns=None``) or ``(n, n_columns)``.

    Row chunks equal X's. Unwritten rows hold ``fill_value`` (NaN for floats, 0 for integers by default).
    An existing array of the same shape, dtype and chunks is reused (its attrs updated); a different one is
    replaced if ``overwrite`` else :class:`StoreFormatError` is raised.
    """
    group = as_group(store, "r+")
    layout.check_path("path", path)
    dt = np.dtype(dtype)
    if dt.kind not in "biuf":
        raise StorageError(f"dtype must be a bool, integer or float dtype; got {dtype!r}")
    x = get_node(group, layout.X)
    n, rows = int(x.shape[0]), int(x.chunks[0])
    if n_columns is None:
        shape, chunks = (n,), (rows,)
    else:
        if isinstance(n_columns, bool) or not isinstance(n_columns, (int, np.integer)) or n_columns < 1:
            raise StorageError(f"n_columns must be None or an integer >= 1; got {n_columns!r}")
        shape, chunks = (n, int(n_columns)), (rows, int(n_columns))
    attrs = check_attrs(attrs or {})
    if has_node(group, path):
        old = group[path]
        same = isinstance(old, zarr.Array) and old.shape == shape and old.chunks == chunks and old.dtype == dt
        if same:
            with writing(location(group, path)):
                old.attrs.update(attrs)
            return old
        if not overwrite:
            raise StoreFormatError(
                f"{path!r} already exists with shape {getattr(old, 'shape', None)}, dtype {getattr(old, 'dtype', None)}; "
                f"requested shape {shape}, dtype {dt}: pass overwrite=True to replace it"
            )
        with writing(location(group, path)):
            delete_node(group, path)
            forget_chunk_records(group, path)
    fill = _default_fill(dt) if fill_value is None else fill_value
    with writing(location(group, path)):
        arr = group.create_array(path, shape=shape, chunks=chunks, dtype=dt, fill_value=fill,
                                 compressors=layout.compressors())
        arr.attrs.update(attrs)
    return arr


def write_point_block(store: StoreRef, path: str, start: int, block: Any) -> None:
    """Write rows ``start:start + len(block)`` of the per-point array ``path``: exactly one aligned chunk.

    Raises
    ------
    StorageError
        ``start`` not a multiple of the chunk rows, a block that is not the full chunk (except the last),
        wrong number of columns, non-numeric or non-finite values.
    """
    arr = get_node(as_group(store, "r+"), path)
    n, rows = int(arr.shape[0]), int(arr.chunks[0])
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start < n or start % rows:
        raise StorageError(
            f"start must be a multiple of the chunk rows ({rows}) in [0, {n}); got {start!r}: blocks must be "
            "aligned with the chunks of X"
        )
    expected = min(rows, n - int(start))
    rows_block = _checked_rows(arr, path, int(start), expected, block, "block")
    with writing(location(store, path)):
        arr[int(start):int(start) + expected] = rows_block


def write_all_rows(store: StoreRef, path: str, values: Any) -> None:
    """Write every row of the per-point array ``path`` at once (zarr encodes and writes the chunks concurrently).

    Same checks as :func:`write_point_block` on the whole array (shape, dtype kind, NaN/inf with its row).
    """
    arr = get_node(as_group(store, "r+"), path)
    values = _checked_rows(arr, path, 0, int(arr.shape[0]), values, "values")
    with writing(location(store, path)):
        arr[:] = values


def _checked_rows(arr: Any, path: str, start: int, expected: int, block: Any, what: str) -> np.ndarray:
    """``block`` as the array's dtype after the checks of :func:`write_point_block` (rows start..start+expected)."""
    block = np.asarray(block)
    if block.shape[:1] != (expected,) or block.shape[1:] != arr.shape[1:]:
        raise StorageError(
            f"{what} for {path!r} at start={start} must have shape {(expected, *arr.shape[1:])}"
            f"{' (one whole chunk)' if what == 'block' else ''}; got {block.shape}"
        )
    if block.dtype.kind not in "biuf" or not np.can_cast(block.dtype, arr.dtype, casting="same_kind"):
        raise StorageError(
            f"{what} for {path!r} must be numeric and castable to the array's dtype {arr.dtype} without changing "
            f"kind (e.g. no float -> int); got dtype {block.dtype}"
        )
    out = block.astype(arr.dtype, copy=False)
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        row = int(np.argwhere(~np.isfinite(out))[0][0])
        raise StorageError(f"{what} for {path!r} has a NaN/inf value at row {start + row}")
    return out


def write_point_array(store: StoreRef, path: str, values: Any, *, dtype: str | None = None,
                      attrs: dict | None = None, overwrite: bool = False) -> zarr.Array:
    """Create the per-point array ``path`` and write all of ``values`` ``(n,)`` / ``(n, c)`` chunk by chunk."""
    values = np.asarray(values)
    if values.ndim not in (1, 2):
        raise StorageError(f"values must be 1-D (n,) or 2-D (n, c); got shape {values.shape}")
    group = as_group(store, "r+")
    arr = create_point_array(group, path, None if values.ndim == 1 else values.shape[1],
                             dtype=dtype or str(values.dtype), attrs=attrs, overwrite=overwrite)
    if values.shape[0] != arr.shape[0]:
        raise StorageError(f"values must have n={arr.shape[0]} rows (one per point of X); got {values.shape[0]}")
    write_all_rows(group, path, values)
    return arr


# ---- embeddings: embeddings/<run> -----------------------------------------------------------------------
def create_embedding(store: StoreRef, run: str, n_components: int, *, dtype: str = layout.EMBEDDING_DTYPE,
                     attrs: dict | None = None, overwrite: bool = False) -> zarr.Array:
    """Create ``embeddings/<run>`` of shape ``(n, n_components)`` with X's row chunks (float32 default)."""
    return create_point_array(store, layout.embedding_path(run), n_components, dtype=dtype, attrs=attrs,
                              overwrite=overwrite)


def write_embedding_block(store: StoreRef, run: str, start: int, block: Any) -> None:
    """Write one aligned chunk ``(rows, n_components)`` of ``embeddings/<run>`` (see :func:`write_point_block`)."""
    write_point_block(store, layout.embedding_path(run), start, block)


def write_embedding(store: StoreRef, run: str, Z: Any, *, attrs: dict | None = None,
                    overwrite: bool = False) -> zarr.Array:
    """Write a whole in-memory embedding ``Z (n, n_components)`` as ``embeddings/<run>`` (float32)."""
    Z = np.asarray(Z)
    if Z.ndim != 2:
        raise StorageError(f"Z must be 2-D (n, n_components); got shape {Z.shape}")
    return write_point_array(store, layout.embedding_path(run), Z, dtype=layout.EMBEDDING_DTYPE, attrs=attrs,
                             overwrite=overwrite)


def read_embedding(store: StoreRef, run: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of ``embeddings/<run>``, shape ``(stop - start, n_components)``."""
    return read_rows(store, layout.embedding_path(run), start, stop)


# ---- other per-point outputs: outputs/<run>/<name> ----------------------------------------------------------
def create_output(store: StoreRef, run: str, name: str, n_columns: int | None = None, *, dtype: str = "float32",
                  attrs: dict | None = None, fill_value: Any = None, overwrite: bool = False) -> zarr.Array:
    """Create ``outputs/<run>/<name>`` (e.g. predicted labels ``(n,)`` int32, scores ``(n, c)`` float32)."""
    return create_point_array(store, layout.output_path(run, name), n_columns, dtype=dtype, attrs=attrs,
                              fill_value=fill_value, overwrite=overwrite)


def write_output_block(store: StoreRef, run: str, name: str, start: int, block: Any) -> None:
    """Write one aligned chunk of ``outputs/<run>/<name>``."""
    write_point_block(store, layout.output_path(run, name), start, block)


def has_output(store: StoreRef, run: str, name: str) -> bool:
    """Whether ``outputs/<run>/<name>`` exists."""
    return has_node(as_group(store, "r"), layout.output_path(run, name))


def read_output(store: StoreRef, run: str, name: str, start: int | None = None, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of ``outputs/<run>/<name>``."""
    return read_rows(store, layout.output_path(run, name), start, stop)
