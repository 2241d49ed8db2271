"""Shared plumbing of eigenflow's Prefect tasks: task options, cache keys and the per-chunk Dask map.

Task options
------------
``IO_TASK`` (ingest, write-back: retried on transient I/O errors) and ``COMPUTE_TASK`` (no retries: a
mathematical failure does not go away by retrying) both persist their results with the cache policy
``TASK_SOURCE + INPUTS`` (STACK.md "Resume after a crash"). A task's inputs always include the store URL,
the run id and the :func:`store_token` of the store, so

- re-running a failed run (same ``run_name``) on the same store reuses every task that had finished and
  recomputes only what is missing;
- a new run, or a store that was re-ingested (new token), recomputes everything.

Tasks return store URLs and small JSON-able metadata, never big arrays: the cached results are small files in
Prefect's local result storage (``$PREFECT_HOME/storage``, or ``PREFECT_RESULTS_LOCAL_STORAGE_PATH``).

Per-chunk work
--------------
Tasks run in the flow process; their per-chunk work runs on the Dask cluster the flow owns
(:func:`map_row_chunks`), one Dask task per row chunk of X, each writing whole aligned chunks of the store.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
from prefect.cache_policies import INPUTS, TASK_SOURCE

from storage import layout
from storage.store import filesystem, read_attrs

#: Cache policy of every eigenflow task (no RUN_ID: a re-run of the same run reuses finished tasks).
CACHE_POLICY = TASK_SOURCE + INPUTS
#: Retries of I/O tasks and the delay between them (seconds): covers transient object-store errors.
IO_RETRIES = 2
IO_RETRY_DELAY_SECONDS = 2

IO_TASK: dict[str, Any] = {
    "retries": IO_RETRIES,
    "retry_delay_seconds": IO_RETRY_DELAY_SECONDS,
    "persist_result": True,
    "cache_policy": CACHE_POLICY,
}
COMPUTE_TASK: dict[str, Any] = {"persist_result": True, "cache_policy": CACHE_POLICY}

#: Progress callback of :func:`map_row_chunks`: ``(n_done, n_total)``.
ProgressFn = Callable[[int, int], None]
#: The progress callback of the stage running in this context (set by the flow around each stage, see
#: :func:`chunk_progress`); :func:`map_row_chunks` reports to it when no ``on_progress`` is given.
_STAGE_PROGRESS: ContextVar[ProgressFn | None] = ContextVar("eigenflow_stage_progress", default=None)


@contextmanager
def chunk_progress(callback: ProgressFn | None) -> Iterator[None]:
    """Report the per-chunk progress of the tasks called inside the block to ``callback(done, total)``."""
    token = _STAGE_PROGRESS.set(callback)
    try:
        yield
    finally:
        _STAGE_PROGRESS.reset(token)


def store_token(store_url: str) -> str:
    """Identity of one ingest of a store, for cache keys: ``<fingerprint>@<mtime of X's metadata>``.

    The fingerprint identifies the data; the modification time of ``X/zarr.json`` changes when the store
    is deleted and ingested again, so cached results never outlive the arrays they describe.
    """
    fingerprint = read_attrs(store_url).get(layout.ATTR_FINGERPRINT, "")
    fs, root = filesystem(store_url)
    modified = fs.modified(posixpath.join(root, layout.X, "zarr.json"))
    return f"{fingerprint}@{modified.isoformat()}"


def map_row_chunks(
    fn: Callable[..., Any],
    bounds: Sequence[tuple[int, int]],
    *,
    args: Sequence[Any] = (),
    per_chunk: Sequence[tuple] | None = None,
    client: Any = None,
    name: str = "chunk",
    on_progress: ProgressFn | None = None,
) -> list[Any]:
    """Run ``fn(*args, start, stop, *per_chunk[i])`` on the Dask cluster for every row chunk, in order.

    Parameters
    ----------
    fn : callable
        A module-level function (importable on the workers) that reads its rows from the store,
        computes and writes whole aligned chunks; it returns small metadata.
    bounds : sequence of (start, stop)
        Row chunks (``storage.arrays.row_chunks``).
    args : sequence
        Arguments shared by every call (store URL, run id, a scattered model future, ...).
    per_chunk : sequence of tuples, optional
        Extra arguments of chunk ``i`` (small arrays: sent with that task only).
    client : distributed.Client, optional
        Default: the flow's client (``distributed.get_client()``).
    name : str
        Prefix of the Dask task keys (shown on the dashboard).
    on_progress : callable, optional
        Called with ``(n_done, n_total)`` as chunks finish.

    Returns
    -------
    list
        The results of ``fn`` in chunk order. The first failing chunk's exception is raised (the other
        chunks are cancelled).
    """
    from distributed import as_completed, get_client

    client = client or get_client()
    on_progress = on_progress or _STAGE_PROGRESS.get()
    extras = per_chunk if per_chunk is not None else [()] * len(bounds)
    futures = [
        client.submit(fn, *args, start, stop, *extra, key=f"{name}-{start}-{_token()}", pure=False)
        for (start, stop), extra in zip(bounds, extras)
    ]
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            if future.status == "error":
                future.result()  # raises the worker's exception here
            if on_progress is not None:
                on_progress(done, len(futures))
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])


def _token() -> str:
    import secrets

    return secrets.token_hex(4)


# ---- fit set ---------------------------------------------------------------------------------------------------
#: Name of the per-point output ``outputs/<run>/in_fit`` (bool): True for the points the model was fitted on.
IN_FIT = "in_fit"
#: Name of the per-point output ``outputs/<run>/held_out`` (bool): True for the points of the run's hold-out draw.
HELD_OUT = "held_out"
#: Name of the model array holding the sorted rows of X the model was fitted on.
FIT_ROWS = "fit_rows"
#: Stream id of the hold-out draw: spawned from the run's seed so that the stages that mirror an estimator's
#: ``fit`` (kNN, eigensolver) see the same random sequence with or without a hold-out.
HOLDOUT_STREAM = 1


def fit_rows_for(n: int, holdout: float, random_state: int | None) -> np.ndarray:
    """Sorted rows (int64) of the fit set: all ``n`` rows, minus ``round(holdout * n)`` drawn at random."""
    from spectral.datasets import holdout_mask

    if holdout == 0:
        return np.arange(n, dtype=np.int64)
    seq = np.random.SeedSequence(random_state).spawn(HOLDOUT_STREAM + 1)[HOLDOUT_STREAM]
    return np.flatnonzero(~holdout_mask(n, holdout, random_state=seq)).astype(np.int64)


def chunk_fit_slices(fit_rows: np.ndarray, bounds: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """For each row chunk, the slice ``(lo, hi)`` of ``fit_rows`` (sorted) that falls inside it."""
    starts = np.searchsorted(fit_rows, [b[0] for b in bounds])
    stops = np.searchsorted(fit_rows, [b[1] for b in bounds])
    return [(int(a), int(b)) for a, b in zip(starts, stops)]


# ---- per-chunk functions (defined in the Prefect-free module tasks._chunks, re-exported here) ----------------
from tasks._chunks import warm_nndescent, write_points_chunk  # noqa: E402,F401
