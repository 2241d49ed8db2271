"""How results leave a store: one per-point output of a run written to ``.npy`` or ``.parquet``.

Streamed chunk by chunk (a million-point embedding is never held twice), written to a temporary file in the
target directory and renamed into place, so a reader never sees half a file and a failed export leaves nothing.
Rows are in the store's order (row i of the file is point i of X).

Both formats go through ordinary buffered file writes, never a memory map: a full disk under a mapped file is a
SIGBUS that kills the process without a message, where a ``write`` raises ``OSError`` (ENOSPC), which leaves as
a :class:`~storage.errors.StorageWriteError` naming the output file (``cannot write out.npy: No space left on
device (ENOSPC)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from . import layout
from .arrays import iter_row_chunks
from .errors import StorageError, StoreFormatError, writing
from .manifest import readable_manifests
from .store import as_group, as_store, get_node, has_node

#: Outputs a run may have: the embedding and the per-point arrays under ``outputs/<run>/``.
OUTPUTS = ("embedding", "labels", "scores", "in_fit", "held_out")
FORMATS = (".npy", ".parquet")


def output_path(run: str, output: str) -> str:
    """Store path of ``output`` of ``run``."""
    if output not in OUTPUTS:
        raise StorageError(f"output must be one of {list(OUTPUTS)}; got {output!r}")
    return layout.embedding_path(run) if output == "embedding" else layout.output_path(run, output)


def latest_run_with(store: Any, output: str) -> str:
    """The most recent completed run of ``store`` that has ``output`` (runs whose manifest cannot be read are
    skipped with a warning naming the file)."""
    group = as_group(store, "r")
    done = [m for m in readable_manifests(store)
            if m.status == "completed" and has_node(group, output_path(m.run_id, output))]
    if not done:
        raise StoreFormatError(f"store {store} has no completed run with a {output!r} output")
    return max(done, key=lambda m: m.started).run_id


def export_output(store: Any, out_file: str, *, run: str | None = None, output: str = "embedding",
                  overwrite: bool = False) -> dict[str, Any]:
    """Write ``output`` of ``run`` (default: the latest completed run that has it) to ``out_file``.

    ``.npy``: the array as stored ((n,) or (n, c)); ``.parquet``: one column per component (``c0``, ``c1``,
    ...) or one column named after the output. Returns ``{"path", "run", "output", "shape"}``.
    """
    path = Path(out_file)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise StorageError(f"OUT must end in one of {list(FORMATS)}; got {str(out_file)!r}")
    with replaced_atomically(path, overwrite) as tmp:
        store = as_store(store)  # a path is opened (validated) once for the calls below
        run = run if run is not None else latest_run_with(store, output)
        node_path = output_path(run, output)
        arr = get_node(as_group(store, "r"), node_path)
        with writing(path), _open_output(tmp) as fh:
            if suffix == ".npy":
                _write_npy(store, node_path, arr, fh)
            else:
                _write_parquet(store, node_path, arr, output, fh)
            _sync(fh)
    return {"path": str(path), "run": run, "output": output, "shape": list(arr.shape)}


@contextmanager
def replaced_atomically(path: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; renamed to ``path`` when the block ends without an
    error, removed otherwise, so a reader never sees half a file and a failed export leaves nothing. An existing
    ``path`` is refused (StorageError) unless ``overwrite``."""
    if path.exists() and not overwrite:
        raise StorageError(f"{path} already exists: pass overwrite=True (CLI --overwrite) to replace it")
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield tmp
        with writing(path):
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _open_output(tmp: Path) -> BinaryIO:
    """The temporary output file, created for buffered binary writes (never an existing file)."""
    return open(tmp, "xb")


def _sync(fh: BinaryIO) -> None:
    """Push the written bytes to the disk before the rename (a disk that fills only at write-back, as network
    filesystems do, fails here and not after the file has taken its final name)."""
    fh.flush()
    os.fsync(fh.fileno())


def _write_npy(store: Any, node_path: str, arr: Any, fh: BinaryIO) -> None:
    """The ``.npy`` header of ``arr``'s dtype and shape, then its rows chunk by chunk (C order)."""
    dtype = np.dtype(arr.dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(s) for s in arr.shape)}
    np.lib.format.write_array_header_1_0(fh, header)
    for _, _, block in iter_row_chunks(store, node_path):
        fh.write(memoryview(np.ascontiguousarray(block, dtype=dtype)).cast("B"))


def _write_parquet(store: Any, node_path: str, arr: Any, output: str, fh: BinaryIO) -> None:
    """One row group per chunk: a column per component (``c0``, ``c1``, ...) or one named ``output``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"c{i}" for i in range(arr.shape[1])] if len(arr.shape) == 2 else [output]
    schema = pa.schema([(name, pa.from_numpy_dtype(arr.dtype)) for name in names])
    with pq.ParquetWriter(fh, schema) as writer:
        for _, _, block in iter_row_chunks(store, node_path):
            columns = [block[:, i] for i in range(block.shape[1])] if block.ndim == 2 else [block]
            writer.write_table(pa.table(dict(zip(names, columns)), schema=schema))
