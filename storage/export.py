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
    """Write ``output`` of ``run`` to ``out_file``; without ``run``, the store's table of results
    (:mod:`storage.results_table`: every row once, from the latest fit and the updates that followed it).

    ``.npy``: the array as stored ((n,) or (n, c)); ``.parquet``: one column per component (``c0``, ``c1``,
    ...) or one column named after the output, and for the table the columns ``run`` and ``placement`` (``fitted``,
    ``held_out``, ``mapped``). Returns ``{"path", "run", "output", "shape"}`` (the table: also ``updates``).
    """
    from .results_table import table_info, table_segments

    path = Path(out_file)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise StorageError(f"OUT must end in one of {list(FORMATS)}; got {str(out_file)!r}")
    if output not in OUTPUTS:
        raise StorageError(f"output must be one of {list(OUTPUTS)}; got {output!r}")
    with replaced_atomically(path, overwrite) as tmp:
        store = as_store(store)  # a path is opened (validated) once for the calls below
        table = output in TABLE_OUTPUTS and run is None
        segments = table_segments(store, output) if table else None
        run = segments[0].run if table else run if run is not None else latest_run_with(store, output)
        arr = get_node(as_group(store, "r"), output_path(run, output))
        shape = [segments[-1].stop, *arr.shape[1:]] if table else list(arr.shape)
        blocks = _table_blocks(store, segments, output) if table else _run_blocks(store, output_path(run, output))
        with writing(path), _open_output(tmp) as fh:
            if suffix == ".npy":
                _write_npy(arr.dtype, shape, blocks, fh)
            else:
                _write_parquet(arr.dtype, shape, blocks, output, fh, [s.run for s in segments] if table else None)
            _sync(fh)
    return {"path": str(path), "run": run, "output": output, "shape": shape,
            **(table_info(segments) if table else {})}


#: Outputs exported from the table of results when no run is named (the per-point results of a model).
TABLE_OUTPUTS = ("embedding", "labels", "scores")


def _run_blocks(store: Any, node_path: str) -> Iterator[tuple[np.ndarray, Any, Any]]:
    for _, _, block in iter_row_chunks(store, node_path):
        yield block, None, None


def _table_blocks(store: Any, segments: list, output: str) -> Iterator[tuple[np.ndarray, Any, Any]]:
    from .results_table import iter_table

    for _, _, values, runs, placement in iter_table(store, segments, output):
        yield values, runs, placement


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


def _write_npy(dtype: Any, shape: list[int], blocks: Iterator, fh: BinaryIO) -> None:
    """The ``.npy`` header of ``dtype`` and ``shape``, then the rows block by block (C order)."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(s) for s in shape)}
    np.lib.format.write_array_header_1_0(fh, header)
    for block, _, _ in blocks:
        fh.write(memoryview(np.ascontiguousarray(block, dtype=dtype)).cast("B"))


def _write_parquet(dtype: Any, shape: list[int], blocks: Iterator, output: str, fh: BinaryIO,
                   runs: list[str] | None) -> None:
    """One row group per block: a column per component (``c0``, ``c1``, ...) or one named ``output``; with ``runs``
    (the table) also ``run`` (dictionary-encoded) and ``placement``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"c{i}" for i in range(shape[1])] if len(shape) == 2 else [output]
    fields = [(name, pa.from_numpy_dtype(np.dtype(dtype))) for name in names]
    if runs is not None:
        fields += [("run", pa.dictionary(pa.int32(), pa.string())), ("placement", pa.string())]
    schema = pa.schema(fields)
    with pq.ParquetWriter(fh, schema) as writer:
        for block, run_index, placement in blocks:
            columns = [block[:, i] for i in range(block.shape[1])] if block.ndim == 2 else [block]
            if runs is not None:
                columns += [pa.DictionaryArray.from_arrays(pa.array(run_index, pa.int32()), pa.array(runs)),
                            pa.array(placement, pa.string())]
            writer.write_table(pa.table(dict(zip([f[0] for f in fields], columns)), schema=schema))
