"""Fail a run whose cluster is stuck on a paused worker instead of letting it wait forever.

A Dask worker whose process memory passes ``distributed.worker.memory.pause`` (80 % of its memory limit by
default) stops starting tasks until its memory falls again. When that memory is data the run still needs (the
operator shard of a sharded eigensolve), it never falls: the tasks pinned to that worker wait (scheduler
state ``no-worker``), the flow waits for them, and the run hangs without an error.

:func:`watch_paused_workers` polls the scheduler from a background thread. When some worker has been paused for
``timeout`` seconds without a break while tasks wait for it, no worker has a task to run or runs one, no task
changes state and the client still waits for results, it cancels the client's pending futures with a message naming
the worker, its memory and limit, and what to do. The flow's waits then raise; :func:`flows.run.open_run`
turns that into :class:`ClusterMemoryError`, recorded in the run's manifest. A paused worker that is still executing
(its memory may fall), or that other workers can work around (nothing pinned to it), is left alone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Seconds a worker may stay paused, with nothing executing anywhere, before the run is failed.
DEFAULT_PAUSED_TIMEOUT = 120.0
#: Environment variable overriding :data:`DEFAULT_PAUSED_TIMEOUT` (seconds, > 0).
PAUSED_TIMEOUT_ENV = "EIGENFLOW_PAUSED_WORKER_TIMEOUT"
#: The ``reason`` of the futures the watch cancels (how :func:`stall_error` recognizes them).
CANCEL_REASON = "eigenflow: cluster stalled on a paused worker"


class ClusterMemoryError(RuntimeError):
    """The run's cluster stalled: a worker stayed paused for memory while the run waited for its tasks."""


def resolve_paused_timeout(timeout: float | None) -> float:
    """``timeout`` if given, else ``$EIGENFLOW_PAUSED_WORKER_TIMEOUT``, else :data:`DEFAULT_PAUSED_TIMEOUT`.

    Raises ParameterError naming the parameter (or the variable), the allowed range (> 0 s) and the value.
    """
    from eigenflow.spectral._validation import check_float

    if timeout is not None:
        return check_float("paused_timeout", timeout, low=0.0, low_inclusive=False)
    text = os.environ.get(PAUSED_TIMEOUT_ENV)
    if not text:
        return DEFAULT_PAUSED_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = text
    return check_float(PAUSED_TIMEOUT_ENV, value, low=0.0, low_inclusive=False)


def _format_bytes(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def stalled_workers(snapshot: dict, previous: dict | None, waiting: int) -> dict[str, dict]:
    """The paused workers of ``snapshot`` (:meth:`PausedWorkerWatch.snapshot`) if the cluster is stalled, else ``{}``.

    Stalled: a worker is paused, tasks wait for paused workers, no running worker has a task to run, no paused
    worker executes one (a task started before the pause may free memory), no task changed state since the
    ``previous`` poll, and the client waits for ``waiting > 0`` results. Not the workers' heartbeats: between
    two heartbeats a busy worker often reports no executing task.
    """
    paused = snapshot["paused"]
    progressed = previous is None or previous["transitions"] != snapshot["transitions"]
    busy = snapshot["processing"] or snapshot["executing"]
    if not paused or not snapshot["waiting"] or busy or progressed or waiting <= 0:
        return {}
    return paused


def stall_message(paused: dict[str, dict], seconds: float, pause_fractions: dict[str, Any]) -> str:
    """The error text: each paused worker with its memory, limit and pause fraction, then the remedies."""
    parts = []
    for address, w in sorted(paused.items()):
        memory, limit = w["memory"], w["memory_limit"] or 0
        fraction = pause_fractions.get(address)
        pause = f", pause threshold {fraction:.0%} of the limit" if isinstance(fraction, float) else ""
        share = f" ({memory / limit:.0%})" if limit else ""
        parts.append(f"worker {w['name']} at {address}: process memory {_format_bytes(memory)}{share} of its "
                     f"{_format_bytes(limit) if limit else 'unlimited'} memory limit{pause}")
    return (f"the Dask cluster stalled: {len(paused)} worker(s) stayed paused for memory for {seconds:.0f} s while "
            f"no worker executed anything and the run waited for tasks pinned to them ({'; '.join(parts)}). "
            "The data this run keeps on those workers does not fit below their pause threshold: give the workers "
            "more memory (dask worker --memory-limit), add workers so that each holds fewer rows, or raise "
            "distributed.worker.memory.pause. The run was cancelled instead of waiting forever (the wait is "
            f"set by {PAUSED_TIMEOUT_ENV}).")


class PausedWorkerWatch:
    """The background thread of :func:`watch_paused_workers`; ``message`` is set once it cancelled the run."""

    def __init__(self, client: Any, timeout: float, poll: float):
        self.client, self.timeout, self.poll = client, timeout, poll
        self.message: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eigenflow-paused-worker-watch", daemon=True)

    def snapshot(self) -> dict:
        """The cluster's state as the watch needs it, from the scheduler: ``transitions`` (its transition
        counter), ``waiting`` (tasks no running worker may run, ``no-worker``, plus those queued on paused
        workers), ``processing`` (tasks assigned to running workers) and ``paused`` (``{address: {"name",
        "memory", "memory_limit"}}``); and from the paused workers themselves: ``executing`` (tasks they run now,
        started before the pause)."""

        def on_scheduler(dask_scheduler: Any) -> dict:  # nested: pickled by value, the scheduler needs no eigenflow
            paused = [ws for ws in dask_scheduler.workers.values() if getattr(ws.status, "name", "") == "paused"]
            return {"transitions": int(dask_scheduler.transition_counter),
                    "waiting": len(dask_scheduler.unrunnable) + sum(len(ws.processing) for ws in paused),
                    "processing": sum(len(ws.processing) for ws in dask_scheduler.running),
                    "paused": {ws.address: {"name": str(ws.name), "memory": int(ws.memory.process),
                                            "memory_limit": ws.memory_limit} for ws in paused}}

        def executing(dask_worker: Any) -> int:
            return len(dask_worker.state.executing)

        snapshot = self.client.run_on_scheduler(on_scheduler)
        running = self.client.run(executing, workers=list(snapshot["paused"])) if snapshot["paused"] else {}
        return {**snapshot, "executing": sum(running.values())}

    def _waiting_keys(self) -> list:
        return [key for key, state in list(self.client.futures.items()) if state.status == "pending"]

    def _pause_fractions(self, addresses: list[str]) -> dict[str, Any]:
        def pause_fraction(dask_worker: Any) -> Any:
            return dask_worker.memory_manager.memory_pause_fraction

        try:
            return self.client.run(pause_fraction, workers=addresses, on_error="return")
        except Exception:  # noqa: BLE001 - only decorates the message
            return {}

    def _run(self) -> None:
        since, previous = None, None
        while not self._stop.wait(self.poll):
            try:
                waiting = self._waiting_keys()
                snapshot = self.snapshot()
            except Exception as exc:  # noqa: BLE001 - the watch must not fail the run
                if self.client.status not in ("closing", "closed") and not self._stop.is_set():
                    logging.getLogger(__name__).warning(
                        "the paused-worker watch stopped (%s: %s): a run stalled on a paused worker will wait "
                        "instead of failing", type(exc).__name__, exc)
                return
            paused, previous = stalled_workers(snapshot, previous, len(waiting)), snapshot
            if not paused:
                since = None
                continue
            since = time.monotonic() if since is None else since
            stalled_for = time.monotonic() - since
            if stalled_for < self.timeout:
                continue
            self.message = stall_message(paused, stalled_for, self._pause_fractions(list(paused)))
            self.cancel(waiting)
            return

    def cancel(self, keys: list) -> None:
        """Cancel the client's futures of ``keys`` with :data:`CANCEL_REASON` and :attr:`message`."""
        from distributed import Future

        self.client.cancel([Future(key, self.client) for key in keys], reason=CANCEL_REASON, msg=self.message)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def watch_paused_workers(client: Any, timeout: float | None = None) -> Iterator[PausedWorkerWatch]:
    """Watch the cluster of ``client`` for a paused-worker stall (module docstring) while the block runs.

    ``timeout`` in seconds (None: :func:`resolve_paused_timeout`); the scheduler is polled every
    ``min(5, timeout / 4)`` s.
    """
    seconds = resolve_paused_timeout(timeout)
    watch = PausedWorkerWatch(client, seconds, poll=min(5.0, seconds / 4))
    watch.start()
    try:
        yield watch
    finally:
        watch.stop()


def stall_error(exc: BaseException) -> ClusterMemoryError | None:
    """A :class:`ClusterMemoryError` if ``exc`` (or an exception it was raised from) is the cancellation of futures
    by the watch (``FutureCancelledError`` from ``result`` / ``gather``, ``FuturesCancelledError`` from ``wait``),
    else None."""
    from distributed.client import FutureCancelledError, FuturesCancelledError

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cancelled = [exc] if isinstance(exc, FutureCancelledError) else \
            [e for group in exc.error_groups for e in group.errors] if isinstance(exc, FuturesCancelledError) else []
        for error in cancelled:
            if error.reason == CANCEL_REASON:
                return ClusterMemoryError(error.msg)
        exc = exc.__cause__ or exc.__context__
    return None
