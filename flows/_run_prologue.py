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

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from eigenflow.storage.checksums import check_intact
from eigenflow.storage.ingest import store_token
from eigenflow.storage.lock import store_lock
from eigenflow.storage.store import Store
from eigenflow.tasks.ingest import ingest_source

from eigenflow.flows._runtime import RunContext, emit, run_context, timed
from eigenflow.flows._warm_up import start_when_ready
from eigenflow.flows.cluster import dask_client_in_background, scheduler_address


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
def ingest_early(source: str, store: str, *, run: str, labels: str | None, chunk_rows: int | None,
                 overwrite: bool, use_rep: str | None, labels_obs: str | None, threads: int,
                 then: Callable[[EarlyIngest], None] | None = None) -> Iterator[EarlyIngest]:
    """Ingest ``source`` into ``store`` now, in this process (chunks on ``threads`` threads), for the flow run
    ``run`` called inside this block, which records it as its ``ingest`` stage instead of ingesting again; then
    take the store's lock for ``run`` (:func:`storage.lock.store_lock`; the flow's own lock of the same run nests
    in it) and call ``then`` with the result (:func:`begin_fit_early`).

    The CLI runs it with a local cluster, while the workers start (their warm-up runs beside the ingest). As in
    the flow, the store is locked after its ingest. A flow called with other ingest arguments ingests itself.
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
        with store_lock(store, run):
            if then is not None:
                then(early)
            yield early
    finally:
        _EARLY_INGEST.reset(token)


class EarlyFit:
    """The fit stages of a run that the CLI begins on the cluster before the flow (:func:`begin_fit_early`):
    :meth:`builder` is the worker they were sent to, or None if they did not begin; :meth:`wait_before_solve`
    waits until the stages before the eigensolve have ended."""

    def __init__(self) -> None:
        self._worker: str | None = None
        self._settled = threading.Event()
        self._before_solve = threading.Event()

    def settle(self, worker: str | None, before_solve: Any = None) -> None:
        """Record where the stages began (None: they did not) and the future of the last stage before the
        eigensolve."""
        self._worker = worker
        self._settled.set()
        if before_solve is None:
            self._before_solve.set()
        else:
            before_solve.add_done_callback(lambda _: self._before_solve.set())

    def builder(self, timeout: float = 30.0) -> str | None:
        """The worker the stages were sent to, once that is settled (None: not begun, or not settled in
        ``timeout`` seconds: the flow then runs its stages itself)."""
        self._settled.wait(timeout)
        return self._worker

    def wait_before_solve(self, timeout: float | None = None) -> bool:
        """Block until the stages before the eigensolve have ended (or nothing was begun); False after
        ``timeout`` seconds."""
        return self._before_solve.wait(timeout)


_EARLY_FIT: ContextVar[EarlyFit | None] = ContextVar("eigenflow_early_fit", default=None)


def early_fit() -> EarlyFit | None:
    """The :class:`EarlyFit` planned for the flow run called inside :func:`planned_fit_early`, or None."""
    return _EARLY_FIT.get()


@contextmanager
def planned_fit_early(method: str, params: dict, sharded: bool | None) -> Iterator[EarlyFit | None]:
    """Plan the fit stages of the flow run called inside this block to begin before it (when ``method`` with
    ``params`` builds one index in one process: :func:`tasks.early_fit.builds_one_knn_index`): yields the
    :class:`EarlyFit` that :func:`begin_fit_early` settles, else None. The builder alone is warmed up before the
    fit stages, the other workers during the eigensolve (:func:`flows.embed.embed`)."""
    from eigenflow.tasks.early_fit import builds_one_knn_index

    early = EarlyFit() if builds_one_knn_index(method, params, sharded) else None
    token = _EARLY_FIT.set(early)
    try:
        yield early
    finally:
        _EARLY_FIT.reset(token)


def begin_fit_early(pending: Any, ingest: EarlyIngest, early: EarlyFit | None, *, store: str, run: str,
                    method: str, params: dict, holdout: float, random_state: Any, sharded: bool | None) -> None:
    """Once the cluster of ``pending`` is up, begin the fit stages of run ``run`` on its
    :func:`flows._warm_up.builder_worker`, chained (:func:`tasks.early_fit.start_fit_early`; the flow's stages
    take them), so that they run while Prefect and the flow start; for a store the CLI has just ingested
    (``ingest``) and a run planned by :func:`planned_fit_early` (``early``), unless
    :func:`tasks.sharded_choice.resolve_sharded` sends it to the sharded path. Returns at once; if the stages
    cannot begin, a warning is logged and the flow's stages run themselves."""
    if early is None:
        return
    if ingest.ingested.get("skipped"):  # an existing store: the run may resume what it holds
        early.settle(None)
        return

    def begin(client: Any) -> None:
        from eigenflow.flows._warm_up import builder_worker
        from eigenflow.tasks.early_fit import start_fit_early
        from eigenflow.tasks.sharded_choice import resolve_sharded

        worker, futures = None, None
        try:
            if not resolve_sharded(sharded, method, params, ingest.ingested["n"], ingest.ingested["d"], client):
                worker = builder_worker(client)
                futures = start_fit_early(Store(store, mode="r+"), run, method, params, holdout, random_state,
                                          client, None if worker is None else [worker])
                if futures is None:
                    worker = None
        except Exception as exc:  # noqa: BLE001 - the flow's stages then run themselves
            import logging

            worker, futures = None, None
            logging.getLogger("eigenflow").warning("the fit stages did not begin before the flow: %s", exc)
        finally:
            early.settle(worker, None if futures is None else futures["weights"])

    pending.when_ready(begin)


@contextmanager
def fit_before_flow(pending: Any, early: EarlyFit | None, prefect_start: Any, source: str, store: str, *, run: str,
                    labels: str | None, chunk_rows: int | None, overwrite: bool, use_rep: str | None,
                    labels_obs: str | None, threads: int, method: str, params: dict, holdout: float,
                    random_state: Any, sharded: bool | None,
                    then: Callable[[], Any] | None = None) -> Iterator[EarlyIngest]:
    """What the CLI does with a local cluster before it calls its flow, held open around the call: the ingest
    (:func:`ingest_early`), the fit stages begun on the cluster (:func:`begin_fit_early`) and, when Prefect's server
    was not begun at the start of the command (``prefect_start``, a :class:`flows._prefect_start.LaterStart`: a
    large run), the server once those stages reach the single-threaded eigensolve (or nothing began): its start
    then takes the core the eigensolve leaves free, not CPU from the kNN build (both cores) or the weights; with
    the eigensolve running, the server and this thread's remaining work run at a lower priority
    (``LaterStart.begin(beside_stage=True)``, :mod:`tasks._priority`).
    ``then()`` is called last, before the block's body (the CLI imports its flow there: Prefect's import after the
    fit stages have begun)."""
    with ingest_early(source, store, run=run, labels=labels, chunk_rows=chunk_rows, overwrite=overwrite,
                      use_rep=use_rep, labels_obs=labels_obs, threads=threads,
                      then=lambda ingested: begin_fit_early(pending, ingested, early, store=store, run=run,
                                                            method=method, params=params, holdout=holdout,
                                                            random_state=random_state, sharded=sharded)) as ingested:
        if not prefect_start.begun:  # a large run's: the flow calls Prefect once its stages reach the eigensolve
            reached = False
            while early is not None and not pending.start_failed():
                reached = early.wait_before_solve(0.2)  # short waits: a signal is handled at once
                if reached:
                    break
            prefect_start.begin(beside_stage=reached and early.builder(0.0) is not None)  # the eigensolve running
        if then is not None:
            then()
        yield ingested


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
        start_when_ready(pending, warm_up, builder_only=early_fit() is not None)
        early = _EARLY_INGEST.get()
        if early is not None and early.arguments == _ingest_arguments(source, store, labels, chunk_rows, overwrite,
                                                                      use_rep, labels_obs):
            ingested, t_ingest = early.ingested, {"seconds": early.seconds}  # the CLI's, while Prefect started
        else:
            from eigenflow.tasks.ingest_task import ingest_task  # Prefect's: this module is imported before Prefect's start

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
