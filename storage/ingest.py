"""Ingest a source (npy, npz, csv, parquet, zarr, numpy or dask array) into an eigenflow store, chunk by chunk.

Guarantees
----------
- Streaming: the source is read in blocks of :data:`READ_BLOCK_BYTES` (see :mod:`storage.readers`), copied into
  one reusable chunk buffer, hashed there and written as the chunk's file one Blosc block at a time
  (:mod:`storage.chunk_files`): memory is one chunk of rows plus a constant, whatever the size of the file
  (measured in ``benchmarks/results/anndata.md``).
- Validation before anything is marked complete: NaN / inf (the error gives the first bad row, 0-based over
  the whole source), wrong dimensionality, zero rows, object / complex / non-numeric dtypes, label count
  mismatch, labels that are not integers >= -1.
- Atomicity: the store is written at a temporary sibling path ``<store>.tmp-<hex>`` with
  ``status="incomplete"``; the root attributes (with ``status="complete"`` and the fingerprint) are written
  last, then the temporary store is renamed to the target (an atomic ``rename`` on local disks, fsspec
  ``mv`` elsewhere). A failed ingest removes the temporary store and leaves an existing target untouched.
- X is stored as float32 by default (half the memory and I/O of float64, and what the kNN and eigensolver
  stages use); ``dtype="float64"`` keeps double precision. Labels are stored as int32 (``-1`` = unlabeled).
- Fingerprint: ``blake2b`` (128 bit) over n, d, dtype and the blake2b digests of the stored X chunks and label
  chunks in order; the same data ingested with the same ``chunk_rows`` and dtype gives the same fingerprint.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import layout
from .checksums import record_checksums
from .lock import carry_lock, claimed_here
from .errors import IngestError, StoreFormatError, StorageError
from .readers import open_labels, open_source, read_rows_from_spec, source_kind
from .source import check_label_count
from .local_files import is_local
from .store import Store, _read_json, filesystem, is_url, open_store, read_attrs

_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class IngestInfo:
    """Summary of a finished ingest (small: safe to return from a Prefect task)."""

    store: str
    n: int
    d: int
    chunk_rows: int
    dtype: str
    has_labels: bool
    fingerprint: str
    source: str
    seconds: float
    parallel: bool = False

    def to_dict(self) -> dict:
        """Plain dict (JSON-able)."""
        return asdict(self)


# ---- block validation ---------------------------------------------------------------------------------------
def _check_numeric(block: np.ndarray, what: str) -> None:
    kind = block.dtype.kind
    if kind == "c":
        raise IngestError(f"{what} has complex dtype {block.dtype}; expected real numbers (bool, int, uint, float)")
    if kind not in "biuf":
        raise IngestError(f"{what} has non-numeric dtype {block.dtype}; expected bool, int, uint or float")


def validate_x_block(block: np.ndarray, start: int, dtype: str, d: int | None) -> np.ndarray:
    """Convert one X block ``(b, d)`` to ``dtype``; raise on bad shape, dtype, NaN/inf or overflow.

    ``start`` is the global row index of the block's first row (for the error message).
    """
    if block.ndim != 2:
        raise IngestError(f"X must be 2-D (n_samples, n_features); got a block of shape {block.shape}")
    if d is not None and block.shape[1] != d:
        raise IngestError(f"X must have the same number of columns in every row; got {block.shape[1]} at row {start}, expected {d}")
    _check_numeric(block, "X")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is detected just below
        out = np.ascontiguousarray(block, dtype=dtype)
    row, col = _first_non_finite(out)
    if row >= 0:
        raise IngestError(
            f"X has a non-finite value at row {start + row}, column {col} (value {block[row, col].item()!r} is NaN/inf "
            f"or overflows {dtype}); X must be finite"
        )
    return out


#: Rows checked at once for NaN / inf (the check's mask stays small beside the block).
FINITE_CHECK_ROWS = 4096


def _first_non_finite(X: np.ndarray) -> tuple[int, int]:
    """``(row, col)`` of the first NaN / inf of ``X (b, d)`` in row-major order, ``(-1, -1)`` if all are finite;
    checked :data:`FINITE_CHECK_ROWS` rows at a time (a mask of that many rows, not of the whole block)."""
    for start in range(0, X.shape[0], FINITE_CHECK_ROWS):
        finite = np.isfinite(X[start:start + FINITE_CHECK_ROWS])
        if not finite.all():
            row, col = (int(i) for i in np.argwhere(~finite)[0])
            return start + row, col
    return -1, -1


def block_digest(block: np.ndarray) -> bytes:
    """BLAKE2b-128 of a block's bytes in C order, hashed from its buffer (no copy of a contiguous block); equal to
    the digest of ``block.tobytes()``."""
    return hashlib.blake2b(np.ascontiguousarray(block), digest_size=16).digest()


def validate_label_block(block: np.ndarray, start: int) -> np.ndarray:
    """Labels block ``(b,)`` as int32; integers >= -1 (floats allowed only with integral values)."""
    block = np.asarray(block)
    if block.ndim != 1:
        raise IngestError(f"labels must be 1-D (n_samples,); got a block of shape {block.shape}")
    if block.dtype.kind == "b" or block.dtype.kind not in "iuf":
        raise IngestError(f"labels must be integers >= -1 (-1 = unlabeled); got dtype {block.dtype}")
    if block.dtype.kind == "f":
        bad = ~np.isfinite(block) | (block != np.round(block))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise IngestError(f"labels must be integers >= -1 (-1 = unlabeled); got {block[i].item()!r} at row {start + i}")
    out_of_range = (block < -1) | (block > _INT32_MAX)
    if out_of_range.any():
        i = int(np.flatnonzero(out_of_range)[0])
        raise IngestError(
            f"labels must be integers in [-1, {_INT32_MAX}] (-1 = unlabeled); got {block[i].item()!r} at row {start + i}"
        )
    return block.astype(layout.Y_DTYPE)


# ---- writing --------------------------------------------------------------------------------------------------
#: Bytes of stored rows read from the source at once: the blocks a reader makes and their validated copies stay
#: this small whatever the chunk; the chunk is assembled in one buffer (:class:`storage.chunk_files.ChunkAppender`).
READ_BLOCK_BYTES = 2**21


def read_block_rows(chunk_rows: int, d: int | None, dtype: str) -> int:
    """Rows read from a source at once: :data:`READ_BLOCK_BYTES` of stored rows, at most a chunk."""
    row_bytes = max(1, d or 1) * np.dtype(dtype).itemsize
    return max(1, min(chunk_rows, READ_BLOCK_BYTES // row_bytes))


def _create_arrays(group: Any, n0: int, d: int, chunk_rows: int, dtype: str, labels: bool) -> tuple:
    x = group.create_array(layout.X, shape=(n0, d), chunks=(chunk_rows, d), dtype=dtype, fill_value=0,
                           compressors=layout.compressors())
    y = None
    if labels:
        y = group.create_array(layout.Y, shape=(n0,), chunks=(chunk_rows,), dtype=layout.Y_DTYPE, fill_value=-1,
                               compressors=layout.compressors())
    return x, y


def _write_chunks(group: Any, src: Any, ext_labels: Any, chunk_rows: int, dtype: str) -> dict:
    """Stream, validate and write all chunks; return the root attributes (without status).

    The source is read :func:`read_block_rows` rows at a time, each block validated (and converted to ``dtype``)
    and copied into the chunk buffer of X (and of y), which is hashed from its memory and written as the chunk's
    file block by block (:class:`storage.chunk_files.ChunkAppender`): beside that one chunk of rows, memory is a few
    such blocks and the chunk writer's few Blosc blocks, however large the chunk or the source.
    """
    from .chunk_files import ChunkAppender

    has_labels = src.has_labels or ext_labels is not None
    known_n = src.n_rows
    xs = ys = None
    n, d = 0, src.n_columns
    for xb, yb in src.blocks(read_block_rows(chunk_rows, d, dtype)):
        xb = validate_x_block(xb, n, dtype, d)
        d = xb.shape[1]
        if ext_labels is not None:
            yb = np.asarray(ext_labels[n:n + xb.shape[0]])
            if yb.shape[0] != xb.shape[0]:
                raise IngestError(f"labels must have one entry per row of X: got {ext_labels.shape[0]} labels "
                                  f"but X has at least {n + xb.shape[0]} rows")
        yb = validate_label_block(yb, n) if has_labels else None
        if known_n is not None and n + xb.shape[0] > known_n:
            raise IngestError(f"source announced {known_n} rows but more were read")
        if xs is None:
            x_arr, y_arr = _create_arrays(group, known_n or 0, d, chunk_rows, dtype, has_labels)
            xs = ChunkAppender(x_arr, grow=known_n is None)
            ys = None if y_arr is None else ChunkAppender(y_arr, grow=known_n is None)
        xs.append(xb)
        if ys is not None:
            ys.append(yb)
        n += xb.shape[0]
    if n == 0:
        raise IngestError("X has zero rows; at least 1 row is required")
    if known_n is not None and n != known_n:
        raise IngestError(f"source announced {known_n} rows but {n} were read")
    if ext_labels is not None:
        check_label_count(int(ext_labels.shape[0]), n)
    for appender in (xs, ys):
        if appender is not None:
            appender.flush()
    y_digest = ys.digest.digest() if ys is not None else hashlib.blake2b(digest_size=16).digest()
    return _root_attrs(n, d, dtype, chunk_rows, has_labels, xs.digest.digest(), y_digest)


def _root_attrs(n: int, d: int, dtype: str, chunk_rows: int, has_labels: bool, x_digest: bytes,
                y_digest: bytes) -> dict:
    total = hashlib.blake2b(f"{n},{d},{dtype}".encode(), digest_size=16)
    total.update(x_digest)
    if has_labels:
        total.update(y_digest)
    return {layout.ATTR_N: n, layout.ATTR_D: d, layout.ATTR_DTYPE: dtype, layout.ATTR_CHUNK_ROWS: chunk_rows,
            layout.ATTR_HAS_LABELS: has_labels, layout.ATTR_FINGERPRINT: "blake2b:" + total.hexdigest()}


def ingest_chunk(spec: tuple, store_url: str, start: int, stop: int, dtype: str, labels: Any,
                 storage_options: dict | None = None) -> tuple[bytes, bytes | None]:
    """Read, validate and write rows ``start:stop`` (one chunk) of a random-access source; return digests.

    Runs on any worker of a parallel ingest: the source is re-opened from ``spec`` and the (incomplete)
    target store from its URL. ``labels`` is the chunk's slice of external labels, or None.
    """
    import zarr

    xb, yb = read_rows_from_spec(spec, start, stop)
    xb = validate_x_block(np.asarray(xb), start, dtype, None)
    yb = labels if labels is not None else yb
    opts = {"storage_options": storage_options} if storage_options and is_url(store_url) else {}
    group = zarr.open_group(store_url, mode="r+", zarr_format=3, **opts)
    group[layout.X][start:stop] = xb
    y_digest = None
    if yb is not None:
        yb = validate_label_block(np.asarray(yb), start)
        group[layout.Y][start:stop] = yb
        y_digest = block_digest(yb)
    return block_digest(xb), y_digest


def _guarded_ingest_chunk(*args: Any) -> Any:
    """:func:`ingest_chunk`, returning its exception instead of raising it (so the caller can wait for all)."""
    try:
        return ingest_chunk(*args)
    except Exception as exc:  # noqa: BLE001 - re-raised by _write_parallel once every chunk has finished
        return exc


def _write_parallel(group: Any, tmp_url: str, src: Any, ext_labels: Any, chunk_rows: int, dtype: str,
                    executor: Any, storage_options: dict | None) -> dict:
    """Per-chunk ingest through ``executor.map`` (one task per chunk of the store)."""
    n, d = int(src.n_rows), int(src.n_columns)
    if n == 0:
        raise IngestError("X has zero rows; at least 1 row is required")
    has_labels = src.has_labels or ext_labels is not None
    _create_arrays(group, n, d, chunk_rows, dtype, has_labels)
    bounds = layout.row_chunk_bounds(n, chunk_rows)
    label_slices = [None if ext_labels is None else np.asarray(ext_labels[a:b]) for a, b in bounds]
    results = executor.map(_guarded_ingest_chunk, [src.spec] * len(bounds), [tmp_url] * len(bounds),
                           [a for a, _ in bounds], [b for _, b in bounds], [dtype] * len(bounds), label_slices,
                           [storage_options] * len(bounds))
    # Wait for EVERY chunk before raising: a chunk still being written after the caller removed the temporary
    # store would re-create part of it (seen with a thread pool). The first failing chunk, in order, is raised.
    outcomes = list(results)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    x_digest, y_digest = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    for xd, yd in outcomes:
        x_digest.update(xd)
        if yd is not None:
            y_digest.update(yd)
    return _root_attrs(n, d, dtype, chunk_rows, has_labels, x_digest.digest(), y_digest.digest())


def _swap_into_place(fs: Any, tmp: str, root: str, url: str, replace: bool, claimed: bool = False) -> None:
    """Move the finished store ``tmp`` to ``root``, replacing an existing store only now and only when ``replace``:
    a store another run created at ``root`` while this one ingested is refused, never replaced (on a local disk
    the rename itself refuses a non-empty target). ``claimed``: ``root`` holds only this process's lock, which
    ``tmp`` carries (:func:`storage.lock.carry_lock`): on a local disk it is removed just before the rename, on an
    object store the copy writes over it."""
    old = None
    if claimed:
        if is_local(fs):
            fs.rm(root, recursive=True)
    elif fs.exists(root):
        if not replace:
            raise StoreFormatError(f"store {url} was created by another run during this ingest; nothing was replaced")
        old = f"{root}.old-{secrets.token_hex(4)}"
        _move(fs, root, old)
    try:
        _move(fs, tmp, root)
    except OSError as exc:
        if not fs.exists(root):
            raise
        raise StoreFormatError(f"store {url} was created by another run during this ingest; nothing was "
                               "replaced") from exc
    if old is not None:
        fs.rm(old, recursive=True)


def _move(fs: Any, src: str, dst: str) -> None:
    if is_local(fs):
        os.rename(src, dst)  # atomic on one filesystem
    else:  # object stores: no rename; copy every key, the root metadata (status "complete") last, then delete
        fs.invalidate_cache()  # listings cached before the chunks were written (by zarr's own fs) are stale
        root_meta = posixpath.join(src, "zarr.json")
        keys = [k for k in fs.find(src) if k != root_meta]
        fs.copy(keys, [posixpath.join(dst, posixpath.relpath(k, src)) for k in keys])
        fs.copy(root_meta, posixpath.join(dst, "zarr.json"))
        fs.rm(src, recursive=True)


def _check_replaceable(fs: Any, root: str, url: str) -> None:
    """Refuse to overwrite anything but an eigenflow store (or an empty directory): never delete user data."""
    if fs.isfile(root):
        raise StoreFormatError(f"refusing to overwrite {url}: it is a file, not an eigenflow store")
    meta = _read_json(fs, posixpath.join(root, "zarr.json"))
    if meta is None and fs.ls(root, detail=False):
        raise StoreFormatError(f"refusing to overwrite {url}: it is a non-empty directory, not an eigenflow store")
    if meta is not None and layout.ATTR_SCHEMA_VERSION not in (meta.get("attributes") or {}):
        raise StoreFormatError(f"refusing to overwrite {url}: it is a zarr store not written by eigenflow")


def _labels_by_name(source: Any, name: str, labels_key: Any, label_column: Any) -> tuple[Any, Any]:
    """``labels="<name>"`` (not a .npy path): the label column (csv/parquet) or key (npz/zarr) of the source."""
    kind = source_kind(source) if isinstance(source, (str, os.PathLike)) else "array"
    if kind in ("csv", "parquet") and label_column is None:
        return labels_key, name
    if kind in ("npz", "zarr", "anndata", "hdf5") and labels_key in ("auto", None, name):
        return name, label_column
    raise IngestError(
        f"labels={name!r} is neither a .npy file nor a label column/key of the {kind} source "
        f"(label_column={label_column!r}, labels_key={labels_key!r}); pass an array, a .npy path, or one name"
    )


def _check_options(dtype: str, chunk_rows: Any, n_columns: int | None) -> int:
    if dtype not in layout.X_DTYPES:
        raise StorageError(f"dtype must be one of {list(layout.X_DTYPES)}; got {dtype!r}")
    if chunk_rows is None:
        return layout.default_chunk_rows(n_columns or 1, np.dtype(dtype).itemsize)
    return layout.check_chunk_rows(chunk_rows)


def ingest(
    source: Any,
    store_url: Any,
    *,
    labels: Any = None,
    x_key: str = "X",
    labels_key: str | None = "auto",
    label_column: Any = None,
    chunk_rows: int | None = None,
    dtype: str = layout.DEFAULT_X_DTYPE,
    overwrite: bool = False,
    storage_options: dict | None = None,
    read_options: dict | None = None,
    executor: Any = None,
) -> IngestInfo:
    """Ingest ``source`` into a new eigenflow store at ``store_url``, streaming chunk by chunk.

    Parameters
    ----------
    source : str, os.PathLike, numpy.ndarray, dask.array.Array, zarr.Array or zarr.Group
        ``.npy`` / ``.npz`` / ``.csv`` / ``.parquet`` file, a zarr store path or URL (array, or group holding
        ``x_key``), an ``.h5ad`` file or AnnData zarr directory, an HDF5 dataset ``file.h5:/group/dataset``
        (:mod:`storage.anndata_io`), or an in-memory array of shape ``(n, d)``.
    store_url : str or os.PathLike
        Target store (local path or fsspec URL).
    labels : array-like of shape (n,), path to a .npy file, or a name, optional
        Integer labels, ``-1`` = unlabeled. Not allowed together with labels from the source itself. A string
        that does not end in ``.npy`` names the label column (csv / parquet) or key (npz / zarr group) of the
        source, i.e. it is shorthand for ``label_column`` / ``labels_key`` (convenient for the CLI).
    x_key : str
        Key of X in a ``.npz`` or zarr group source; of an AnnData source, ``"X"`` or a key of ``obsm``.
    labels_key : str or None
        Key of the labels in a ``.npz`` or zarr group source (an ``obs`` column of an AnnData source, a dataset
        of an HDF5 file); ``"auto"`` uses ``"y"`` when present (AnnData, HDF5: no labels), ``None`` ignores
        labels in the source.
    label_column : str or int, optional
        Label column (name or position) of a CSV or parquet source; the other columns are the features.
    chunk_rows : int, optional
        Rows per chunk (default :func:`storage.layout.default_chunk_rows`: 2**16, less for very wide data).
    dtype : {"float32", "float64"}
        Stored dtype of X.
    overwrite : bool
        Replace an existing store at ``store_url`` (only once the new one is complete).
    storage_options : dict, optional
        fsspec options for URL targets and zarr URL sources.
    read_options : dict, optional
        Extra keyword arguments of ``pandas.read_csv`` (e.g. ``{"header": None, "sep": ";"}``).
    executor : concurrent.futures.Executor-like, optional
        Anything with ``map(fn, *iterables)`` (e.g. ``distributed.Client.get_executor()``): then every chunk
        of an ``.npy`` or zarr-path source is read, validated and written by its own task (the source and the
        target must be reachable from the workers). CSV, parquet, npz and in-memory sources are streams read
        in order, so they are always ingested sequentially; ``IngestInfo.parallel`` tells which happened.

    Returns
    -------
    IngestInfo

    Raises
    ------
    IngestError
        Bad source (see the module docstring); nothing complete is left at ``store_url``.
    StoreFormatError
        ``store_url`` exists and ``overwrite`` is False.
    """
    start_time = time.perf_counter()
    if isinstance(labels, str) and not labels.lower().endswith(".npy"):
        labels, labels_key, label_column = None, *_labels_by_name(source, labels, labels_key, label_column)
    src = open_source(source, x_key=x_key, labels_key=labels_key, label_column=label_column,
                      read_options=read_options, storage_options=storage_options)
    ext_labels = None
    if labels is not None:
        if src.has_labels:
            raise IngestError("labels were given twice: as `labels` and inside the source (set labels_key=None "
                              "or label_column=None)")
        ext_labels = open_labels(labels)
        if src.n_rows is not None:
            check_label_count(int(ext_labels.shape[0]), src.n_rows)
    rows = _check_options(dtype, chunk_rows, src.n_columns)
    fs, root = filesystem(store_url, storage_options)
    url = os.fspath(store_url).rstrip("/")
    claimed = fs.exists(root) and claimed_here(fs, root)  # a new store this process locked before its ingest
    if fs.exists(root) and not claimed:
        if not overwrite:
            raise StoreFormatError(f"store {url} already exists; pass overwrite=True to replace it")
        _check_replaceable(fs, root, url)
    suffix = f".tmp-{secrets.token_hex(4)}"
    tmp_url, tmp_root = url + suffix, root + suffix
    try:
        group = open_store(tmp_url, "w", storage_options if is_url(url) else None)
        tmp_url = tmp_url if is_url(url) else tmp_root
        parallel = executor is not None and src.spec is not None
        if parallel:
            attrs = _write_parallel(group, tmp_url, src, ext_labels, rows, dtype, executor,
                                    storage_options if is_url(url) else None)
        else:
            attrs = _write_chunks(group, src, ext_labels, rows, dtype)
        attrs[layout.ATTR_SOURCE] = src.description
        if src.partitions is not None:  # a folder of partitions: what an update compares (storage.partitions)
            attrs[layout.ATTR_PARTITIONS] = src.partitions.records()
        if src.cells is not None:  # AnnData: the obs names and the label categories, for the exports
            from .anndata_io import write_cells

            attrs.update(write_cells(group, src.cells, rows))
        record_checksums(Store(tmp_url, storage_options if is_url(url) else None))
        group.attrs.update({**attrs, layout.ATTR_STATUS: layout.STATUS_COMPLETE})  # written LAST
        carry_lock(fs, root, tmp_root)  # the replacing store is locked from its first moment
        _swap_into_place(fs, tmp_root, root, url, replace=overwrite, claimed=claimed)
    except BaseException as exc:
        if fs.exists(tmp_root):
            fs.rm(tmp_root, recursive=True)
        if isinstance(exc, OSError) and not getattr(exc, "filename", None):
            raise StorageError(f"cannot write store {url}: {exc}") from exc  # name the place (full disk, ...)
        raise
    return IngestInfo(store=url, n=attrs[layout.ATTR_N], d=attrs[layout.ATTR_D], chunk_rows=rows, dtype=dtype,
                      has_labels=attrs[layout.ATTR_HAS_LABELS], fingerprint=attrs[layout.ATTR_FINGERPRINT],
                      source=src.description, seconds=time.perf_counter() - start_time, parallel=parallel)


def store_token(store: Store) -> str:
    """Identity of one ingest of a store, for cache keys and run records: ``<fingerprint>@<mtime of X's metadata>``.

    The fingerprint identifies the data; the modification time of ``X/zarr.json`` changes when the store
    is deleted and ingested again, so cached results never outlive the arrays they describe.
    """
    fingerprint = read_attrs(store).get(layout.ATTR_FINGERPRINT, "")
    fs, root = filesystem(store)
    modified = fs.modified(posixpath.join(root, layout.X, "zarr.json"))
    return f"{fingerprint}@{modified.isoformat()}"
