"""Streaming readers: every source yields ``(X block (b, d), labels block (b,) or None)`` of at most ``rows`` rows.

No reader loads a whole file: ``.npy`` is read with ``readinto`` row block by row block (memory-mapped only for
its header, and for a Fortran-ordered file), ``.npz`` members are decompressed row block by row
block from the zip stream (np.lib.format header + a file-like reader; only a Fortran-ordered member is read
whole, because its rows are not contiguous), ``.csv`` goes through ``pandas.read_csv(chunksize=...)``,
``.parquet`` through ``pyarrow.parquet.ParquetFile.iter_batches`` (pyarrow decodes one row group at a time, so
memory is bounded by the largest row group: write big files with ``row_group_size`` ~ 10**5 rows), zarr and
dask arrays are sliced by rows, so an ingest's memory does not grow with the file.
Validation of values (NaN/inf, dtypes of the converted blocks, labels) happens in :mod:`storage.ingest`.
"""

from __future__ import annotations

import os
import zipfile
from typing import Any, Callable, Iterator

import numpy as np
import zarr

from .errors import IngestError
from .source import Block, Source, check_label_count, check_shape_2d
from .store import validate_store

#: Suffixes recognized by :func:`open_source`.
SUFFIXES = {".npy": "npy", ".npz": "npz", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".zarr": "zarr"}


def _check_labels_shape(shape: tuple, what: str) -> None:
    if len(shape) != 1:
        raise IngestError(f"{what} must be a 1-D array (n_samples,); got shape {tuple(shape)}")


# ---- array-like sources (numpy, npy memmap, zarr, dask) -------------------------------------------------
def _sliced_blocks(x: Any, y: Any) -> Callable[[int], Iterator[Block]]:
    def blocks(rows: int) -> Iterator[Block]:
        for start in range(0, x.shape[0], rows):
            stop = min(start + rows, x.shape[0])
            xb = np.asarray(x[start:stop])
            yb = None if y is None else np.asarray(y[start:stop])
            yield xb, yb

    return blocks


def _as_computable(block: Any) -> Any:
    return block.compute() if hasattr(block, "compute") else block


def array_source(x: Any, y: Any = None, *, kind: str = "array", description: str | None = None) -> Source:
    """Source over an array-like with ``.shape`` and row slicing (numpy, memmap, zarr.Array, dask.array)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise IngestError(f"source must be a file path, a zarr store or an array with shape/dtype; got {type(x).__name__}")
    check_shape_2d(tuple(x.shape), "X")
    if y is not None:
        _check_labels_shape(tuple(y.shape), "labels")
        check_label_count(int(y.shape[0]), int(x.shape[0]))
    desc = description or f"{type(x).__name__} shape={tuple(x.shape)} dtype={x.dtype}"
    if hasattr(x, "compute"):  # dask: compute each slice
        x = _Computing(x)
        y = None if y is None else _Computing(y)
    return Source(kind, desc, int(x.shape[0]), int(x.shape[1]), y is not None, _sliced_blocks(x, y))


class _Computing:
    """Row-slicing wrapper that computes dask slices."""

    def __init__(self, arr: Any) -> None:
        self.arr, self.shape, self.dtype = arr, arr.shape, arr.dtype

    def __getitem__(self, key: Any) -> np.ndarray:
        return np.asarray(_as_computable(self.arr[key]))


def npy_source(path: str) -> Source:
    """``.npy`` file: opened with ``np.load(mmap_mode="r")`` for its header (object dtypes are refused without
    unpickling), its rows read from the file (a Fortran-ordered file's through the memory map)."""
    try:
        x = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise IngestError(f"cannot memory-map {path}: {exc} (object arrays are refused)") from exc
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc}") from exc
    src = array_source(x, kind="npy", description=path)
    src.spec = ("npy", os.path.abspath(path))
    if x.flags.c_contiguous:  # rows read from the file: no page of the file stays mapped into the process
        src.blocks = _npy_file_blocks(path, int(x.offset), tuple(x.shape), x.dtype)
    return src


def _npy_file_blocks(path: str, offset: int, shape: tuple, dtype: np.dtype) -> Callable[[int], Iterator[Block]]:
    """Row blocks of a C-ordered ``.npy`` file read with ``readinto`` (a fresh array of at most ``rows`` rows each)."""
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize

    def blocks(rows: int) -> Iterator[Block]:
        with open(path, "rb", buffering=0) as fh:
            fh.seek(offset)
            for start in range(0, shape[0], rows):
                block = np.empty((min(rows, shape[0] - start), *shape[1:]), dtype=dtype)
                view, got = memoryview(block.reshape(-1).view(np.uint8)), 0
                while got < view.nbytes:
                    read = fh.readinto(view[got:])
                    if not read:
                        raise IngestError(f"{path} ended early: expected {shape[0]} rows of {row_bytes} bytes")
                    got += read
                yield block, None

    return blocks


# ---- npz: stream a zip member ------------------------------------------------------------------------------
def _read_exact(fp: Any, nbytes: int) -> bytes:
    buf = bytearray()
    while len(buf) < nbytes:
        chunk = fp.read(nbytes - len(buf))
        if not chunk:
            raise IngestError(f"npz member ended early: expected {nbytes} more bytes, got {len(buf)}")
        buf += chunk
    return bytes(buf)


def _npy_header(fp: Any, where: str) -> tuple[tuple, bool, np.dtype]:
    version = np.lib.format.read_magic(fp)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(fp)
    if dtype.hasobject:
        raise IngestError(f"{where} has object dtype {dtype}; object arrays (pickle) are refused")
    return tuple(shape), bool(fortran), dtype


def _member_rows(zf: zipfile.ZipFile, member: str, rows: int) -> Iterator[np.ndarray]:
    """Yield row blocks of one ``.npy`` member of an open zip file, reading ``rows`` rows at a time."""
    with zf.open(member) as fp:
        shape, fortran, dtype = _npy_header(fp, member)
        n = shape[0] if shape else 0
        if fortran and len(shape) > 1:
            # rows of a Fortran-ordered array are not contiguous in the stream: the member is read whole
            data = np.frombuffer(_read_exact(fp, int(np.prod(shape)) * dtype.itemsize), dtype=dtype)
            full = data.reshape(shape, order="F")
            for start in range(0, n, rows):
                yield np.ascontiguousarray(full[start:start + rows])
            return
        row_shape = shape[1:]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        for start in range(0, n, rows):
            b = min(rows, n - start)
            yield np.frombuffer(_read_exact(fp, b * row_bytes), dtype=dtype).reshape((b, *row_shape))


def _npz_member_shape(zf: zipfile.ZipFile, member: str) -> tuple:
    with zf.open(member) as fp:
        return _npy_header(fp, member)[0]


def resolve_keys(x_key: str, labels_key: str | None, keys: list[str], where: str) -> str | None:
    """Check that ``x_key`` (and ``labels_key``) name members of a container; ``"auto"`` labels: ``"y"`` if present.

    ``where`` completes the error message (``"x_key='X' is not " + where``). Returns the labels key or None.
    """
    if x_key not in keys:
        raise IngestError(f"x_key={x_key!r} is not {where}")
    if labels_key == "auto":
        return "y" if "y" in keys else None
    if labels_key is not None and labels_key not in keys:
        raise IngestError(f"labels_key={labels_key!r} is not {where}")
    return labels_key


def npz_source(path: str, x_key: str = "X", labels_key: str | None = "auto") -> Source:
    """``.npz`` archive: ``X`` under ``x_key``; labels under ``labels_key`` (``"auto"``: ``"y"`` if present).

    Members are read from the zip stream ``rows`` rows at a time (memory ~ one block), except a
    Fortran-ordered member, which is read whole.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise IngestError(f"cannot read {path} as .npz: {exc}") from exc
    with zf:
        keys = [name[:-4] for name in zf.namelist() if name.endswith(".npy")]
        labels_key = resolve_keys(x_key, labels_key, keys, f"in {path}; keys are {keys}")
        x_shape = _npz_member_shape(zf, x_key + ".npy")
        check_shape_2d(x_shape, f"X ({path}:{x_key})")
        if labels_key is not None:
            y_shape = _npz_member_shape(zf, labels_key + ".npy")
            _check_labels_shape(y_shape, f"labels ({path}:{labels_key})")
            check_label_count(int(y_shape[0]), int(x_shape[0]))

    def blocks(rows: int) -> Iterator[Block]:
        with zipfile.ZipFile(path) as z:
            xs = _member_rows(z, x_key + ".npy", rows)
            ys = _member_rows(z, labels_key + ".npy", rows) if labels_key is not None else None
            for xb in xs:
                yield xb, (next(ys, None) if ys is not None else None)
            if ys is not None:
                next(ys, None)  # exhaust to close the member

    return Source("npz", path, int(x_shape[0]), int(x_shape[1]), labels_key is not None, blocks)


# ---- csv ------------------------------------------------------------------------------------------------
def _column_name(columns: Any, label_column: Any, path: str) -> Any:
    if label_column is None:
        return None
    if label_column in columns:
        return label_column
    if isinstance(label_column, int) and not isinstance(label_column, bool) and -len(columns) <= label_column < len(columns):
        return columns[label_column]
    raise IngestError(f"label_column={label_column!r} is not a column of {path}; columns are {list(columns)}")


def _numeric_frame(frame: Any, start: int, path: str) -> np.ndarray:
    """Columns of a pandas chunk as one numeric array; names the first non-numeric column and row."""
    import pandas as pd

    for name in frame.columns:
        col = frame[name]
        if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
            coerced = pd.to_numeric(col, errors="coerce")
            bad = np.flatnonzero(coerced.isna().to_numpy() & col.notna().to_numpy())
            where = f" (value {col.iloc[bad[0]]!r} at row {start + int(bad[0])})" if bad.size else ""
            raise IngestError(f"column {name!r} of {path} is not numeric (dtype {col.dtype}){where}")
        if pd.api.types.is_complex_dtype(col):
            raise IngestError(f"column {name!r} of {path} is complex; expected real numbers")
    return frame.to_numpy()


def csv_source(path: str, label_column: Any = None, read_options: dict | None = None) -> Source:
    """CSV file read in chunks by ``pandas.read_csv(chunksize=rows, **read_options)``.

    All columns but ``label_column`` (a name, or an integer position) are features. Row numbers in error
    messages count data rows from 0 over the whole file.
    """
    import pandas as pd

    options = dict(read_options or {})
    for reserved in ("chunksize", "iterator"):
        options.pop(reserved, None)
    try:
        head = pd.read_csv(path, nrows=0, **options)
    except (OSError, ValueError) as exc:
        raise IngestError(f"cannot read {path} as CSV: {exc}") from exc
    label = _column_name(list(head.columns), label_column, path)
    n_columns = len(head.columns) - (label is not None)

    def blocks(rows: int) -> Iterator[Block]:
        start = 0
        with pd.read_csv(path, chunksize=rows, **options) as reader:
            for frame in reader:
                y = None if label is None else frame.pop(label).to_numpy()
                yield _numeric_frame(frame, start, path), y
                start += len(frame)

    return Source("csv", path, None, n_columns, label is not None, blocks)


# ---- parquet ----------------------------------------------------------------------------------------------
def parquet_source(path: str, label_column: Any = None) -> Source:
    """Parquet file read batch by batch (``ParquetFile.iter_batches(batch_size=rows)``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise IngestError(f"cannot read {path} as parquet: {exc}") from exc
    names = list(pf.schema_arrow.names)
    label = _column_name(names, label_column, path)
    features = [c for c in names if c != label]
    for name in features:
        typ = pf.schema_arrow.field(name).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
            raise IngestError(f"column {name!r} of {path} is not numeric (arrow type {typ})")

    def column(batch: Any, name: str) -> np.ndarray:
        return batch.column(name).to_numpy(zero_copy_only=False)

    def blocks(rows: int) -> Iterator[Block]:
        for batch in pf.iter_batches(batch_size=rows, columns=names):
            x = np.column_stack([column(batch, c) for c in features]) if features else np.empty((batch.num_rows, 0))
            yield x, (column(batch, label) if label is not None else None)

    return Source("parquet", path, int(pf.metadata.num_rows), len(features), label is not None, blocks)


# ---- zarr ---------------------------------------------------------------------------------------------------
def zarr_source(src: Any, x_key: str = "X", labels_key: str | None = "auto",
                storage_options: dict | None = None) -> Source:
    """A zarr array, or a zarr group holding ``x_key`` (and labels under ``labels_key``)."""
    node = src
    if not isinstance(src, (zarr.Array, zarr.Group)):
        opts = {"storage_options": storage_options} if storage_options and "://" in str(src) else {}
        try:
            node = zarr.open(str(src), mode="r", **opts)
        except Exception as exc:  # zarr raises many types for unreadable stores
            raise IngestError(f"cannot open {src} as a zarr array or group: {exc}") from exc
    from_path = not isinstance(src, (zarr.Array, zarr.Group))
    desc = str(src) if from_path else f"zarr:{node.store}/{node.path}"
    location = (str(src) if "://" in str(src) else os.path.abspath(str(src))) if from_path else None
    if isinstance(node, zarr.Array):
        out = array_source(node, kind="zarr", description=desc)
        out.spec = ("zarr", location, None, None, storage_options) if from_path else None
        return out
    if "schema_version" in node.attrs:  # an eigenflow store: refuse it if incomplete or unsafe
        validate_store(node if isinstance(src, zarr.Group) else str(src),
                       storage_options if "://" in str(src) else None)
    members = sorted(name for name, _ in node.arrays())
    labels_key = resolve_keys(x_key, labels_key, members, f"an array of zarr group {desc}; arrays are {members}")
    y = node[labels_key] if labels_key is not None else None
    out = array_source(node[x_key], y, kind="zarr", description=desc)
    out.spec = ("zarr", location, x_key, labels_key, storage_options) if from_path else None
    return out


def read_rows_from_spec(spec: tuple, start: int, stop: int) -> Block:
    """Rows ``start:stop`` of the source described by ``Source.spec`` (re-opened here: runs on any worker)."""
    if spec[0] == "npy":
        x = np.load(spec[1], mmap_mode="r", allow_pickle=False)
        return np.asarray(x[start:stop]), None
    _, location, x_key, labels_key, storage_options = spec
    opts = {"storage_options": storage_options} if storage_options and "://" in location else {}
    node = zarr.open(location, mode="r", **opts)
    if x_key is None:
        return node[start:stop], None
    y = node[labels_key][start:stop] if labels_key is not None else None
    return node[x_key][start:stop], y


# ---- dispatch -------------------------------------------------------------------------------------------------
def source_kind(source: Any) -> str:
    """Kind of a path-like source from its suffix (or a directory holding ``zarr.json``; an AnnData zarr directory
    by its root attributes; an HDF5 path may end in ``:/group/dataset``)."""
    from .anndata_io import H5AD_SUFFIX, is_anndata_zarr, split_hdf5_path

    path = os.fspath(source)
    lower = path.rstrip("/").lower()
    if lower.endswith(H5AD_SUFFIX) or is_anndata_zarr(path):
        return "anndata"
    if split_hdf5_path(path) is not None:
        return "hdf5"
    for suffix, kind in SUFFIXES.items():
        if lower.endswith(suffix):
            return kind
    if "://" in path or os.path.isfile(os.path.join(path, "zarr.json")):
        return "zarr"
    raise IngestError(
        f"source {path!r} has an unknown format; expected one of {sorted(SUFFIXES)}, .h5ad, an AnnData zarr "
        "directory, file.h5:/group/dataset, a zarr store or an array"
    )


def open_source(source: Any, *, x_key: str = "X", labels_key: str | None = "auto", label_column: Any = None,
                read_options: dict | None = None, storage_options: dict | None = None) -> Source:
    """Open any supported source as a :class:`Source` (see the module docstring)."""
    if isinstance(source, (zarr.Array, zarr.Group)):
        return zarr_source(source, x_key, labels_key)
    if not isinstance(source, (str, os.PathLike)):
        return array_source(source)
    from .partitions import chained_source, is_partitioned, partition_paths

    if is_partitioned(source):  # a folder or glob of partitions: one source, rows in partition order
        paths = partition_paths(source)
        parts = []
        for path in paths:
            try:
                source_kind(path)
            except IngestError:
                raise IngestError(f"partition {path} of source {os.fspath(source)} has an unknown format; expected "
                                  ".npy / .npz / .csv / .parquet / .h5ad files or zarr stores") from None
            parts.append(open_source(path, x_key=x_key, labels_key=labels_key, label_column=label_column,
                                     read_options=read_options))
        return chained_source(source, paths, parts)
    kind = source_kind(source)
    path = os.fspath(source)
    if kind in ("anndata", "hdf5"):
        from .anndata_io import anndata_source, hdf5_source

        return anndata_source(path, x_key, labels_key) if kind == "anndata" else hdf5_source(path, labels_key)
    if kind == "zarr":
        return zarr_source(path, x_key, labels_key, storage_options)
    if not os.path.exists(path):
        raise IngestError(f"source file {path} does not exist")
    if kind == "npy":
        return npy_source(path)
    if kind == "npz":
        return npz_source(path, x_key, labels_key)
    if kind == "csv":
        return csv_source(path, label_column, read_options)
    return parquet_source(path, label_column)


def source_n_columns(source: Any, **options: Any) -> int | None:
    """Number of columns of ``source`` read from its header only (None when unknown before reading: CSV)."""
    return open_source(source, **options).n_columns


def open_labels(labels: Any) -> Any:
    """External labels: an array-like (n,) or a path to a ``.npy`` file (memory-mapped)."""
    if isinstance(labels, (str, os.PathLike)):
        path = os.fspath(labels)
        if not path.endswith(".npy"):
            raise IngestError(f"labels must be an array or a path to a .npy file; got {path!r}")
        labels = np.load(path, mmap_mode="r", allow_pickle=False)
    elif not hasattr(labels, "shape"):
        labels = np.asarray(labels)
    _check_labels_shape(tuple(labels.shape), "labels")
    return _Computing(labels) if hasattr(labels, "compute") else labels
