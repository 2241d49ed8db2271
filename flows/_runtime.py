"""Shared plumbing of eigenflow's flows: Prefect settings, the run context (manifest + stages), progress events.

A flow body stays a plain sequence of stages::

    with run_context(store, run, flow="embed", parameters=params, seed=seed, client=client) as ctx:
        with ctx.stage("knn") as record:
            record.info.update(knn_task(ctx.store, ctx.run, ctx.token, ...))

Each stage is timed into the store's run manifest (``runs/<run>.json``, see :mod:`storage.manifest`), and its
start / end are sent to the progress listener of the caller (the CLI's rich progress), if any. The run ends
``completed``, or ``failed`` with the error message, and the exception is re-raised.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from eigenflow.storage import layout
from eigenflow.storage.manifest import RunManifest, StageRecord, run_context as manifest_context, stage as manifest_stage
from eigenflow.storage.store import Store

from eigenflow.flows._fixed_time import cluster_seconds

#: ``listener(event, stage, payload)`` with event in {"start", "end", "progress"}; payload: seconds for "end",
#: ``(done, total)`` for "progress", None for "start".
Listener = Callable[[str, str, Any], None]
_LISTENER: ContextVar[Listener | None] = ContextVar("eigenflow_stage_listener", default=None)


@contextlib.contextmanager
def stage_listener(listener: Listener) -> Iterator[None]:
    """Send the stage events of flows run inside this block (same thread / context) to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def emit(event: str, stage: str, payload: Any = None) -> None:
    """Send one event to the current listener (no-op without one)."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(event, stage, payload)


def progress_callback(stage: str) -> Callable[[int, int], None]:
    """An ``on_progress(done, total)`` callback that emits ``progress`` events of ``stage``."""
    listener = _LISTENER.get()

    def report(done: int, total: int) -> None:
        if listener is not None:
            listener("progress", stage, (done, total))

    return report


@contextlib.contextmanager
def cache_refreshed(refresh: bool) -> Iterator[None]:
    """With ``refresh``, the Prefect tasks called inside do not take a cached result (and store a new one): a stage
    that a resumed run had recorded as completed but whose outputs are not intact in the store (e.g. a write left
    running in a worker that failed) is computed again, not taken from the cache of the run that lost them."""
    if not refresh:
        yield
        return
    from prefect.settings import PREFECT_TASKS_REFRESH_CACHE, temporary_settings

    with temporary_settings(updates={PREFECT_TASKS_REFRESH_CACHE: True}):
        yield


@dataclass
class RunContext:
    """What the stages of one run share: the store, the run id, its manifest and the Dask client."""

    store: Store
    run: str
    manifest: RunManifest
    pending_client: Any = None
    token: str = ""

    def require_cluster(self) -> Any:
        """Wait for the Dask client (started in the background by the flow) and return it.

        Call before any stage that submits Dask work; tasks then reach it with ``distributed.get_client()``.
        The first call records the cluster start time as stage ``cluster`` (it overlapped earlier stages).
        """
        client = self.pending_client.result()
        if "cluster" not in self.manifest.stage_seconds():
            emit("start", "cluster")
            self.record_stage("cluster", self.pending_client.seconds, {"overlapped_earlier_stages": True})
            emit("end", "cluster", self.pending_client.seconds)
        self.manifest.fixed_seconds.update(cluster_seconds(self.pending_client))
        return client

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[StageRecord]:
        """Time stage ``name`` into the manifest (saved before and after) and emit start / end events; first,
        the run stops here if it is stopping (:func:`flows._stop.raise_if_stopping`)."""
        from eigenflow.flows._stop import raise_if_stopping
        from eigenflow.flows.reporting import StageReporter, logger
        from eigenflow.tasks.dask_calls import chunk_progress

        raise_if_stopping()  # a stop whose exception was lost ends the run here, before the next stage
        emit("start", name)
        log = logger()
        log.info("run %s of %s: stage %s started", self.run, self.store, name)
        reporter, cli_progress = StageReporter(self.run, name), progress_callback(name)

        def progress(done: int, total: int) -> None:
            cli_progress(done, total)
            reporter(done, total)

        t0 = time.perf_counter()
        try:
            with manifest_stage(self.store, self.manifest, name) as record, chunk_progress(progress):
                yield record
        finally:
            seconds = time.perf_counter() - t0
            log.info("run %s of %s: stage %s ended after %.2f s", self.run, self.store, name, seconds)
            emit("end", name, seconds)

    def record_stage(self, name: str, seconds: float, info: dict | None = None) -> None:
        """Add a stage that ran before the store existed (the ingest) to the manifest."""
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self.manifest.stages.append(StageRecord(name=name, start=now, end=now, seconds=seconds,
                                                status="completed", info=dict(info or {})))

    def summary(self) -> dict[str, Any]:
        """Small JSON-able summary of the run (what the flows return)."""
        m = self.manifest
        return {"store": str(self.store), "run": self.run, "flow": m.flow, "status": m.status,
                "seconds": m.seconds, "stages": m.stage_seconds(), "results": dict(m.results),
                "fixed_seconds": dict(m.fixed_seconds)}


@contextlib.contextmanager
def run_context(store: Store, run: str, *, flow: str, parameters: dict, seed: Any, pending_client: Any = None,
                token: str = "", stages_before: list[tuple[str, float, dict]] = (),
                client: Any = None, fixed_seconds: dict | None = None) -> Iterator[RunContext]:
    """Start the manifest of ``run`` in ``store`` and finish it ``completed`` / ``failed`` (re-raising).

    ``pending_client`` is the :class:`flows.cluster.PendingClient` of the flow (see ``require_cluster``);
    a flow that started its client itself passes it as ``client`` instead. ``fixed_seconds``: the run's fixed
    time known so far (:mod:`flows._fixed_time`), kept in the manifest and completed by the flow.
    """
    if pending_client is None and client is not None:
        from eigenflow.flows.cluster import ReadyClient

        pending_client = ReadyClient(client)
    manifest = RunManifest.start(run, flow=flow, parameters=parameters, seed=seed)
    manifest.fixed_seconds.update(fixed_seconds or {})
    ctx = RunContext(store=store, run=run, manifest=manifest, pending_client=pending_client, token=token)
    for name, seconds, info in stages_before:
        ctx.record_stage(name, seconds, info)
    with manifest_context(store, manifest), paused_worker_errors():
        yield ctx


@contextlib.contextmanager
def paused_worker_errors() -> Iterator[None]:
    """Re-raise a failure caused by the paused-worker watch (:mod:`flows.paused_workers`) as its
    :class:`~flows.paused_workers.ClusterMemoryError` (so the manifest records that message)."""
    from eigenflow.flows.paused_workers import stall_error

    try:
        yield
    except Exception as exc:
        error = stall_error(exc)
        if error is None:
            raise
        raise error from exc


def new_run_id(flow: str, run_name: str | None) -> str:
    """``run_name`` if given (a re-run with the same name resumes from Prefect's task cache), else a fresh id."""
    if run_name is None:
        return layout.new_run_id(flow)
    return layout.check_name("run_name", run_name)


@contextlib.contextmanager
def timed() -> Iterator[dict]:
    """``with timed() as t: ...`` then ``t["seconds"]``."""
    out: dict = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - t0
