"""How results leave a store: one per-point output of a run written to ``.npy`` or ``.parquet``.

Streamed chunk by chunk (a million-point embedding is never held twice), written to a temporary file in the
target directory and renamed into place, so a reader never sees half a file and a failed export leaves nothing.
Rows are in the store's order (row i of the file is point i of X).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import layout
from .arrays import iter_row_chunks
from .errors import StorageError, StoreFormatError
from .manifest import list_runs, read_manifest
from .store import as_group, get_node, has_node

#: Outputs a run may have: the embedding and the per-point arrays under ``outputs/<run>/``.
OUTPUTS = ("embedding", "labels", "scores", "in_fit", "held_out")
FORMATS = (".npy", ".parquet")


def output_path(run: str, output: str) -> str:
    """Store path of ``output`` of ``run``."""
    if output not in OUTPUTS:
        raise StorageError(f"output must be one of {list(OUTPUTS)}; got {output!r}")
    return layout.embedding_path(run) if output == "embedding" else layout.output_path(run, output)


def latest_run_with(store: Any, output: str) -> str:
    """The most recent completed run of ``store`` that has ``output``."""
    group = as_group(store, "r")
    done = [m for m in (read_manifest(store, r) for r in list_runs(store))
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
    if path.exists() and not overwrite:
        raise StorageError(f"{out_file} already exists: pass overwrite=True (CLI --overwrite) to replace it")
    run = run if run is not None else latest_run_with(store, output)
    node_path = output_path(run, output)
    arr = get_node(as_group(store, "r"), node_path)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        if suffix == ".npy":
            _write_npy(store, node_path, arr, tmp)
        else:
            _write_parquet(store, node_path, arr, output, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"path": str(path), "run": run, "output": output, "shape": list(arr.shape)}


def _write_npy(store: Any, node_path: str, arr: Any, tmp: Path) -> None:
    target = np.lib.format.open_memmap(tmp, mode="w+", dtype=arr.dtype, shape=arr.shape)
    for start, stop, block in iter_row_chunks(store, node_path):
        target[start:stop] = block
    target.flush()
    del target


def _write_parquet(store: Any, node_path: str, arr: Any, output: str, tmp: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"c{i}" for i in range(arr.shape[1])] if len(arr.shape) == 2 else [output]
    schema = pa.schema([(name, pa.from_numpy_dtype(arr.dtype)) for name in names])
    with pq.ParquetWriter(tmp, schema) as writer:
        for _, _, block in iter_row_chunks(store, node_path):
            columns = [block[:, i] for i in range(block.shape[1])] if block.ndim == 2 else [block]
            writer.write_table(pa.table(dict(zip(names, columns)), schema=schema))
