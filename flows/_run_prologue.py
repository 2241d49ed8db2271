"""The prologue every store-writing flow shares: cluster start, ingest, then the run's manifest context.

``with ingested_run(...) as (ctx, ingested):`` starts the Dask cluster in the background (or takes over the one
the CLI started before the flow, :func:`flows.cluster.client_started_early`), begins the workers' NN-descent
warm-up once it is up when the run asks for it, ingests ``source`` into ``store`` (skipped when ``source`` is
already that complete store; taken from :func:`ingest_early` when the CLI ingested it while Prefect's server
started), takes the store's lock (:mod:`storage.lock`: a second run on the store fails
here, naming the first) and opens :func:`flows._runtime.run_context` with the ingest recorded as the first
stage of the manifest. The body runs the method's stages; the manifest ends ``completed``, or
``failed`` with the error (re-raised).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from storage.checksums import check_intact
from storage.lock import store_lock
from storage.store import Store
from tasks.task_options import store_token
from tasks.ingest import ingest_source, ingest_task

from flows._runtime import RunContext, emit, run_context, timed
from flows._warm_up import start_when_ready
from flows.cluster import dask_client_in_background, scheduler_address


@dataclass(frozen=True)
class EarlyIngest:
    """An ingest the CLI ran before its flow call (:func:`ingest_early`): its arguments, summary and seconds."""

    arguments: tuple
    ingested: dict
    seconds: float


_EARLY_INGEST: ContextVar[EarlyIngest | None] = ContextVar("eigenflow_early_ingest", default=None)


def _ingest_arguments(source: str, store: str, labels: str | None, chunk_rows: int | None, overwrite: bool,
                      use_rep: str | None, labels_obs: str | None) -> tuple:
    return (str(source), str(store), labels, chunk_rows, bool(overwrite), use_rep, labels_obs)


@contextmanager
def ingest_early(source: str, store: str, *, labels: str | None, chunk_rows: int | None, overwrite: bool,
                 use_rep: str | None, labels_obs: str | None, threads: int) -> Iterator[EarlyIngest]:
    """Ingest ``source`` into ``store`` now, in this process (chunks on ``threads`` threads), for the flow run
    called inside this block, which records it as its ``ingest`` stage instead of ingesting again.

    The CLI runs it with a local cluster, while Prefect's temporary server starts (Prefect's start and the
    ingest overlap; the workers' warm-up runs beside both); the store is not locked yet, as in the flow, whose
    lock is taken after its ingest. A flow called with other ingest arguments ingests itself.
    """
    from concurrent.futures import ThreadPoolExecutor

    emit("start", "ingest")
    with timed() as t_ingest, ThreadPoolExecutor(max(1, threads), thread_name_prefix="eigenflow-ingest") as pool:
        ingested = ingest_source(source, store, labels=labels, chunk_rows=chunk_rows, overwrite=overwrite,
                                 use_rep=use_rep, labels_obs=labels_obs, executor=pool)
    emit("end", "ingest", t_ingest["seconds"])
    early = EarlyIngest(_ingest_arguments(source, store, labels, chunk_rows, overwrite, use_rep, labels_obs),
                        {**ingested, "before_flow": True}, t_ingest["seconds"])
    token = _EARLY_INGEST.set(early)
    try:
        yield early
    finally:
        _EARLY_INGEST.reset(token)


@contextmanager
def ingested_run(source: str, store: str, *, run: str, flow: str, method: str, params: dict,
                 labels: str | None, chunk_rows: int | None, overwrite: bool, scheduler: str | None,
                 n_workers: int, seed: Any, extra_manifest: dict | None = None, fixed_seconds: dict | None = None,
                 warm_up: tuple[str, ...] = (), opened: Store | None = None, use_rep: str | None = None,
                 labels_obs: str | None = None) -> Iterator[tuple[RunContext, dict]]:
    """Yield ``(ctx, ingested)``: the run context (``ctx.store``: the store opened once, a
    :class:`storage.store.Store`) and the ingest summary (``n``, ``d``, ``fingerprint``, ...).

    ``params`` are the method's parameters, recorded in the manifest with the store / cluster options and
    ``extra_manifest``; ``fixed_seconds`` the run's fixed time so far (:mod:`flows._fixed_time`). ``warm_up``:
    X dtypes whose NN-descent warm-up the workers begin as soon as the cluster is up, while the ingest runs
    (:func:`flows._warm_up.start_when_ready`). ``opened``: the handle of the existing store at ``store``, opened
    by the caller's checks (:func:`tasks.ingest.open_existing`); the run keeps it when the ingest is skipped.
    ``use_rep`` / ``labels_obs``: X and labels of an AnnData source.
    """
    with dask_client_in_background(scheduler, n_workers=n_workers) as pending:
        start_when_ready(pending, warm_up)
        early = _EARLY_INGEST.get()
        if early is not None and early.arguments == _ingest_arguments(source, store, labels, chunk_rows, overwrite,
                                                                      use_rep, labels_obs):
            ingested, t_ingest = early.ingested, {"seconds": early.seconds}  # the CLI's, while Prefect started
        else:
            emit("start", "ingest")
            with timed() as t_ingest:
                ingested = ingest_task(source, store if opened is None else opened, labels=labels,
                                       chunk_rows=chunk_rows, overwrite=overwrite,
                                       scheduler_address=scheduler_address(pending), use_rep=use_rep,
                                       labels_obs=labels_obs)
            emit("end", "ingest", t_ingest["seconds"])
        if opened is None or not ingested["skipped"]:
            opened = Store.open(store, "r+")  # the run's one whole-store check; its stages receive this handle
        check_intact(opened)  # X and y as ingested: a damaged chunk is refused, named, before any stage
        manifest_params = {"source": str(source), "method": method, "labels": labels, "use_rep": use_rep,
                           "labels_obs": labels_obs, "chunk_rows": chunk_rows,
                           "n_workers": n_workers, "scheduler": scheduler, **(extra_manifest or {}), **params}
        with store_lock(opened, run), \
                run_context(opened, run, flow=flow, parameters=manifest_params, seed=seed, pending_client=pending,
                            token=store_token(opened), stages_before=[("ingest", t_ingest["seconds"], ingested)],
                            fixed_seconds=fixed_seconds) as ctx:
            yield ctx, ingested
