"""What the stages of one run share, passed to them as one object: :class:`RunContext`.

A flow opens it with :func:`open_run` once its store is ingested and its cluster is up::

    with open_run(store, run, client, flow="embed", parameters=params, seed=seed) as ctx:
        with ctx.stage("knn") as record:
            record.info.update(knn_task(ctx.store, ctx.run, ctx.token, on_progress=ctx.progress("knn")))

Each stage is timed into the store's run manifest (``runs/<run>.json``, :mod:`storage.manifest`); the manifest is
the one record a resumed run reads (:func:`tasks.resume.finished_stages`). The run ends ``completed``, or ``failed`` with the
error (a stop from outside, :mod:`flows.stops`, is recorded by its reason), and the exception is re-raised.

Stage events go to the ``eigenflow.progress`` logger (records whose ``eigenflow_event`` attribute is ``(event,
stage, payload)``, event in ``start`` / ``progress`` / ``end``); the CLI draws its progress bars from them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eigenflow.storage import layout
from eigenflow.storage.ingest import store_token
from eigenflow.storage.lock import store_lock
from eigenflow.storage.manifest import RunManifest, StageRecord, run_context as manifest_context, stage as manifest_stage
from eigenflow.storage.store import Store

#: The logger of stage events (see the module docstring).
EVENTS = logging.getLogger("eigenflow.progress")
EVENTS.propagate = False  # events, not messages: only a handler attached for them (the CLI's) reads them


def emit(event: str, stage: str, payload: Any = None) -> None:
    """Log one stage event (``start``, ``progress`` with ``(done, total)``, ``end`` with seconds)."""
    EVENTS.debug("%s %s %s", stage, event, payload, extra={"eigenflow_event": (event, stage, payload)})


class _EventHandler(logging.Handler):
    """Passes the stage events of :data:`EVENTS` to ``listener(event, stage, payload)``."""

    def __init__(self, listener: Callable[[str, str, Any], None]):
        super().__init__(logging.DEBUG)
        self.listener = listener

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "eigenflow_event", None)
        if event is not None:
            self.listener(*event)


@contextlib.contextmanager
def stage_events(listener: Callable[[str, str, Any], None]) -> Iterator[None]:
    """Pass the stage events of the runs inside the block to ``listener(event, stage, payload)``."""
    handler, level = _EventHandler(listener), EVENTS.level
    EVENTS.addHandler(handler)
    EVENTS.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        EVENTS.removeHandler(handler)
        EVENTS.setLevel(level)


@dataclass
class RunContext:
    """One run: its store (opened once), run id, Dask client, manifest and the store's token."""

    store: Store
    run: str
    client: Any
    manifest: RunManifest
    token: str = ""
    stop: Any = None
    started: float = field(default_factory=time.perf_counter)

    def api_lost(self) -> bool:
        """Whether the run's Prefect API has been lost (:class:`flows.prefect_api.ApiWatch`): its artifacts are
        then not published, each call would wait for Prefect's client to give up."""
        return getattr(self.stop, "lost", None) is not None

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[StageRecord]:
        """Time stage ``name`` into the manifest (saved before and after) and log its start and end."""
        from eigenflow.flows.reporting import logger

        emit("start", name)
        log = logger()
        log.info("run %s of %s: stage %s started", self.run, self.store, name)
        t0 = time.perf_counter()
        try:
            with manifest_stage(self.store, self.manifest, name) as record:
                yield record
        finally:
            seconds = time.perf_counter() - t0
            log.info("run %s of %s: stage %s ended after %.2f s", self.run, self.store, name, seconds)
            emit("end", name, seconds)

    def progress(self, name: str) -> Callable[[int, int], None]:
        """``on_progress(done, total)`` of stage ``name``'s chunks: a stage event and a Prefect progress artifact."""
        from eigenflow.flows.reporting import StageReporter

        artifact = StageReporter(self.run, name)

        def report(done: int, total: int) -> None:
            emit("progress", name, (done, total))
            if not self.api_lost():
                artifact(done, total)

        return report

    def record_stage(self, name: str, seconds: float, info: dict | None = None) -> None:
        """Add a stage that ran before the manifest existed (the ingest, the cluster's start), or one reused from
        an earlier attempt of the run."""
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self.manifest.stages.append(StageRecord(name=name, start=now, end=now, seconds=seconds,
                                                status="completed", info=dict(info or {})))

    def summary(self) -> dict[str, Any]:
        """Small JSON-able summary of the run (what the flows return)."""
        m = self.manifest
        return {"store": str(self.store), "run": self.run, "flow": m.flow, "status": m.status,
                "seconds": m.seconds, "stages": m.stage_seconds(), "results": dict(m.results),
                "fixed_seconds": dict(m.fixed_seconds), "total_seconds": time.perf_counter() - self.started}


@contextlib.contextmanager
def open_run(store: Store, run: str, client: Any, *, flow: str, parameters: dict, seed: Any,
             stages_before: list[tuple[str, float, dict]] = (), stop: Any = None) -> Iterator[RunContext]:
    """Lock ``store`` for ``run``, start its manifest and finish it ``completed`` / ``failed`` (re-raising).

    ``stages_before``: ``(name, seconds, info)`` of what ran before (the ingest). ``stop``: an object whose
    ``lost`` attribute, once set, is the reason the run failed (:class:`flows.prefect_api.ApiWatch`): raised in place
    of whatever error its action (the client's close) caused."""
    manifest = RunManifest.start(run, flow=flow, parameters=parameters, seed=seed)
    ctx = RunContext(store=store, run=run, client=client, manifest=manifest, token=store_token(store), stop=stop)
    for name, seconds, info in stages_before:
        ctx.record_stage(name, seconds, info)
    with store_lock(store, run), manifest_context(store, manifest), _reasons(stop):
        yield ctx


@contextlib.contextmanager
def _reasons(stop: Any) -> Iterator[None]:
    """Re-raise a failure by its cause: a lost Prefect API, a worker stuck paused for memory
    (:mod:`flows.paused_workers`), a stop signal in Prefect's form (:func:`flows.stops.stop_of`)."""
    from eigenflow.flows.paused_workers import stall_error
    from eigenflow.flows.stops import RunStopped, stop_of

    try:
        yield
    except BaseException as exc:
        lost = getattr(stop, "lost", None)
        if lost is not None and exc is not lost:
            raise lost from exc
        if not isinstance(exc, RunStopped):
            stopped = stop_of(exc)
            if stopped is not None:
                raise stopped from exc
        error = stall_error(exc) if isinstance(exc, Exception) else None
        if error is None:
            raise
        raise error from exc
    lost = getattr(stop, "lost", None)
    if lost is not None:  # the API went away while the last stage ended: the run is not reported
        raise lost


def ingest(source: str, target: str | Store, client: Any, **options: Any) -> tuple[dict, Store, float]:
    """The ingest stage (:func:`tasks.ingest_task.ingest_task`, its chunks on ``client``'s workers), before the
    run's manifest exists: ``(summary, the store opened once and checked intact, seconds)``. ``target``: the
    store's URL, or the handle of the existing store the run's checks opened (kept when the ingest is skipped)."""
    from eigenflow.storage.checksums import check_intact
    from eigenflow.tasks.ingest_task import ingest_task

    emit("start", "ingest")
    t0 = time.perf_counter()
    ingested = ingest_task(source, target, client=client, **options)
    seconds = time.perf_counter() - t0
    emit("end", "ingest", seconds)
    opened = target if isinstance(target, Store) and ingested["skipped"] else Store.open(str(target), "r+")
    check_intact(opened)  # X and y as ingested: a damaged chunk is refused, named, before any stage
    return ingested, opened, seconds


@contextlib.contextmanager
def run_watch(client: Any) -> Iterator[Any]:
    """While the block runs, watch the configured Prefect API (:class:`flows.prefect_api.ApiWatch`; nothing to watch in
    ephemeral mode): when it is lost, ``client`` is closed, which ends the flow's waits on the cluster. Yields the
    watch (or None), for :func:`open_run`'s ``stop``."""
    from eigenflow.flows.prefect_api import ApiWatch, api_timeout, configured_api_url

    url = configured_api_url()
    if url is None:
        yield None
        return
    with ApiWatch(url, api_timeout(), on_lost=client.close) as watch:
        yield watch


def new_run_id(flow: str, run_name: str | None) -> str:
    """``run_name`` if given (a re-run with the same name resumes that run), else a fresh id."""
    if run_name is None:
        return layout.new_run_id(flow)
    return layout.check_name("run_name", run_name)
