"""Functions that run on Dask workers, one call per row chunk (kept free of Prefect imports).

A worker imports the module of every function it runs; importing Prefect costs seconds of CPU per worker
process, so what runs per chunk lives here (numpy, storage, and spectral only when a model needs it).
Method authors: put your per-chunk transform in a module that does not import Prefect either.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# ---- per-chunk write-back of a method's per-point outputs --------------------------------------------------
def write_points_chunk(
    store_url: str,
    run: str,
    method: str,
    model: Any,
    start: int,
    stop: int,
    local_fit: np.ndarray,
    fitted: dict[str, np.ndarray] | None,
) -> dict:
    """Write rows ``start:stop`` of every output of ``run``: fit rows as given, the others mapped by ``model``.

    Runs on a Dask worker. ``local_fit`` (f,) are the chunk-relative rows of the fit set and ``fitted`` their
    fitted outputs (``{"embedding": (f, k), ...}``; None when no row of the chunk is in the fit set); every
    other row is read from X and mapped by :func:`tasks.registry.point_outputs` (``model`` is scattered once).
    Returns ``n_fitted`` and ``n_extended``. Each output chunk's digest is recorded once it is written
    (:func:`storage.checksums.record_chunk`): a resumed run rewrites only the chunks without an intact record.
    """
    from storage.arrays import read_X
    from storage.checksums import record_chunk
    from storage.embedding_io import write_embedding_block, write_output_block
    from tasks.registry import EMBEDDING, get_entry, point_outputs

    entry = get_entry(method)
    n_rows = stop - start
    in_fit = np.zeros(n_rows, dtype=bool)
    in_fit[local_fit] = True
    mapped = point_outputs(entry, model, read_X(store_url, start, stop)[~in_fit]) if not in_fit.all() else {}
    for name in entry.outputs:
        parts = [v for v in ((fitted or {}).get(name), mapped.get(name)) if v is not None]
        block = np.empty((n_rows, *parts[0].shape[1:]), dtype=parts[0].dtype)
        if in_fit.any():
            block[in_fit] = fitted[name]
        if not in_fit.all():
            block[~in_fit] = mapped[name]
        if name == EMBEDDING:
            write_embedding_block(store_url, run, start, block)
        else:
            write_output_block(store_url, run, name, start, block.astype(np.float32) if block.dtype.kind == "f"
                               else block)
        record_chunk(store_url, output_array(run, name), start)  # this chunk is done (resume skips it)
    return {"n_fitted": int(in_fit.sum()), "n_extended": int(n_rows - in_fit.sum())}


def output_array(run: str, name: str) -> str:
    """Store path of the per-point output ``name`` of ``run`` (``embeddings/<run>`` or ``outputs/<run>/<name>``)."""
    from storage import layout
    from tasks.registry import EMBEDDING

    return layout.embedding_path(run) if name == EMBEDDING else layout.output_path(run, name)


def warm_nndescent() -> float:
    """Compile pynndescent's numba kernels in this process (build + query a tiny index); returns seconds.

    Submitted once per Dask worker before out-of-sample queries: the compile costs 17-20 s per new process
    even with ``NUMBA_CACHE_DIR`` (STACK.md), so it is paid in parallel with the fit, not inside a query.
    """
    import time

    from spectral.knn import KNNIndex

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):  # stores hold float32 X by default; in-memory data is often float64
        index = KNNIndex.build(rng.normal(size=(300, 4)).astype(dtype), 5, method="nndescent", random_state=0,
                               n_jobs=1)
        index.query(rng.normal(size=(10, 4)).astype(dtype), 5)
    return time.perf_counter() - t0
