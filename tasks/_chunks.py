"""Functions that run on Dask workers, one call per row chunk (kept free of Prefect imports).

A worker imports the module of every function it runs; importing Prefect costs seconds of CPU per worker
process, so what runs per chunk lives here (numpy, storage, and spectral only when a model needs it).
Method authors: put your per-chunk transform in a module that does not import Prefect either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# ---- per-chunk write-back of an embedding ---------------------------------------------------------------------
#: ``transform(payload, X_rows) -> (Z_rows (m, k), info dict)``: a module-level function, pickled by reference.
TransformFn = Callable[[Any, np.ndarray], tuple[np.ndarray, dict]]


def write_embedding_chunk(
    store_url: str,
    run: str,
    transform: TransformFn | None,
    payload: Any,
    start: int,
    stop: int,
    local_fit: np.ndarray,
    Z_fit: np.ndarray,
) -> dict:
    """Write rows ``start:stop`` of ``embeddings/<run>``: fitted rows as given, the others out-of-sample.

    Runs on a Dask worker. ``local_fit`` (f,) are the chunk-relative rows that belong to the fit set and
    ``Z_fit`` (f, k) their fitted embedding; every other row of the chunk is read from X and embedded with
    ``transform(payload, X_rows)`` (e.g. a Nystrom extension; ``payload`` is the model, scattered once).
    """
    from storage.arrays import read_X
    from storage.embedding_io import write_embedding_block

    n_rows = stop - start
    out = np.empty((n_rows, Z_fit.shape[1]), dtype=np.float64)
    in_fit = np.zeros(n_rows, dtype=bool)
    in_fit[local_fit] = True
    out[in_fit] = Z_fit
    info: dict = {"n_fitted": int(in_fit.sum()), "n_extended": int(n_rows - in_fit.sum())}
    if not in_fit.all():
        if transform is None:
            raise ValueError(f"rows {start}:{stop} hold points outside the fit set but no transform was given")
        X_rows = read_X(store_url, start, stop)[~in_fit]
        out[~in_fit], extra = transform(payload, X_rows)
        info.update(extra)
    write_embedding_block(store_url, run, start, out)
    return info


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


def transform_with_index(payload: tuple[Any, Any], X_rows: np.ndarray) -> tuple[np.ndarray, dict]:
    """Out-of-sample map of a model whose kNN index travels separately: ``payload = (model, index)``.

    The model must have an ``index`` attribute and ``transform(X, return_info=True) -> (Z, info)``
    (e.g. :class:`spectral.embedding.LaplacianEigenmapsModel`).
    """
    model, index = payload
    model.index = index  # attached per chunk: the index was checked once, when the payload was built
    return model.transform(X_rows, return_info=True)
