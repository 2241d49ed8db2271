"""Serve Prefect deployments by running their flow runs inside the serving process, one at a time.

``prefect.serve`` starts every flow run in a fresh ``spawn`` subprocess. For eigenflow that subprocess pays
9-11 s of interpreter start and imports (numpy, scipy, dask, distributed, Prefect, the flow modules) before
its first stage, about 0.3x of a whole 1e6-point run (``benchmarks/bench_embed.py --served``). The heavy
stages already run on the Dask workers (:func:`tasks.dask_calls.run_on_worker`), so the flow process only
orchestrates; running the flow in the serving process, where everything is imported once, removes that cost.

:class:`InProcessRunner` does what Prefect's runner does for served deployments, with the execution step
replaced:

- registers each deployment (``RunnerDeployment.apply``: schedule, parameters, concurrency limit);
- polls the server every ``poll_seconds`` for the deployments' runs scheduled before the next poll
  (``get_scheduled_flow_runs_for_deployments``, the runner's own query; this also marks the deployments ready)
  and starts each at its scheduled time (Prefect's runner claims runs up to 10 s early to hide its subprocess
  start; here there is nothing to hide);
- claims each run by proposing *Pending* (the server's orchestration rules decide: a rejected proposal, e.g.
  the deployment's concurrency slot taken by another server, skips the run) and records this process as the
  run's owner (:func:`flows._serve_recovery.record_owner`: a ``serve`` started after this one dies marks the
  run *Crashed*);
- executes it with Prefect's engine in this process (``prefect.flow_engine.run_flow`` with the flow run, the
  same call the runner's subprocess makes), so states, logs and artifacts are the usual ones;
- cancellation: while a run executes, a watcher thread polls its state every ``poll_seconds``; when the UI or
  ``prefect flow-run cancel`` moves it to *Cancelling*, the watcher interrupts the main thread with SIGUSR1 (the
  run executes in the main thread; it stops at
  its next Python bytecode; Dask tasks already sent finish on the workers and are released) and the run is
  marked *Cancelled*;
- SIGTERM / Ctrl-C: the run in progress stops (Prefect's engine marks it *Crashed*; eigenflow's store manifest
  keeps its completed stages, so the next run of the same name resumes), the deployments' schedules are
  paused (``prefect.serve``'s default ``pause_on_shutdown``) and the process exits.

What the subprocess isolation gave and this mode does not: a run that corrupts the interpreter (a segfault in
a native library) takes the serving process with it; memory a run leaks stays in the serving process. Use
``eigenflow serve --runner prefect`` (``prefect.serve``, the default) when that matters more than the start-up
time.
"""

from __future__ import annotations

import contextvars
import logging
import signal
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from eigenflow.storage.lock import process_identity

from eigenflow.flows._serve_recovery import record_owner

logger = logging.getLogger("eigenflow.serve")

#: The signal the cancellation watcher sends to the main thread (handled only while a run executes).
CANCEL_SIGNAL = signal.SIGUSR1
#: Seconds between two polls of the server for scheduled runs (and between two cancellation checks).
DEFAULT_POLL_SECONDS = 2.0


class InProcessRunner:
    """Run the scheduled and on-demand flow runs of deployments in this process (module docstring).

    Parameters
    ----------
    poll_seconds : float > 0
        Seconds between polls for scheduled runs and between cancellation checks of the running one.
    """

    def __init__(self, *, poll_seconds: float = DEFAULT_POLL_SECONDS):
        from eigenflow.spectral._validation import check_float

        self.poll_seconds = check_float("poll_seconds", poll_seconds, low=0.0, low_inclusive=False)
        self._flows: dict[UUID, Any] = {}
        self._stop = threading.Event()

    # ---- the loop -------------------------------------------------------------------------------------------
    def run(self, deployments: Sequence[tuple[Any, Any]]) -> None:
        """Register ``deployments`` (pairs of RunnerDeployment and the Flow it runs) and serve them until
        SIGTERM / SIGINT (or :meth:`stop`)."""
        from prefect.client.orchestration import get_client

        if not deployments:
            raise ValueError("InProcessRunner.run needs at least one (deployment, flow) pair; got none")
        _check_main_thread("run")
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            with get_client(sync_client=True) as client:
                for deployment, flow in deployments:
                    self._flows[deployment.apply()] = flow
                    logger.info("serving deployment %s/%s in process", flow.name, deployment.name)
                try:
                    while not self._stop.is_set():
                        if not self.run_once(client):
                            self._stop.wait(self.poll_seconds)
                except KeyboardInterrupt:
                    logger.info("stopping: interrupted")
                finally:
                    for deployment_id in self._flows:
                        client.pause_deployment(deployment_id)
                    logger.info("paused the schedules of %d deployments", len(self._flows))
        finally:
            signal.signal(signal.SIGTERM, previous)

    def stop(self) -> None:
        """Stop after the run in progress (from another thread)."""
        self._stop.set()

    def run_once(self, client: Any) -> int:
        """Claim and execute every run of the deployments scheduled before the next poll, oldest first, each at
        its scheduled start time (not before it, and without a poll's delay); returns how many were executed.
        Must be called from the main thread (it installs the cancellation signal handler)."""
        _check_main_thread("run_once")
        runs = client.get_scheduled_flow_runs_for_deployments(
            deployment_ids=list(self._flows),
            scheduled_before=datetime.now(timezone.utc) + timedelta(seconds=self.poll_seconds))
        executed = 0
        for flow_run in sorted(runs, key=_start_time):
            wait = (_start_time(flow_run) - datetime.now(timezone.utc)).total_seconds()
            if self._stop.wait(max(wait, 0.0)):
                break
            if self._claim(client, flow_run):
                self._execute(client, flow_run.id)
                executed += 1
        return executed

    # ---- one run --------------------------------------------------------------------------------------------
    @staticmethod
    def _claim(client: Any, flow_run: Any) -> bool:
        """Propose *Pending*; True when the server accepted it (the run is ours to execute)."""
        from prefect.exceptions import Abort
        from prefect.states import Pending
        from prefect.utilities.engine import propose_state_sync

        try:
            state = propose_state_sync(client, Pending(), flow_run_id=flow_run.id)
        except Abort as exc:
            logger.info("flow run %s not claimed: %s", flow_run.name, exc)
            return False
        if not state.is_pending():
            logger.info("flow run %s not claimed: the server set it %s", flow_run.name, state.type.value)
            return False
        record_owner(client, flow_run.id, process_identity())  # a restarted serve can tell it died with us
        return True

    def _execute(self, client: Any, flow_run_id: UUID) -> None:
        """Execute a claimed run with Prefect's engine, watching for a cancellation request."""
        from prefect.flow_engine import run_flow

        flow_run = client.read_flow_run(flow_run_id)
        flow = self._flows[flow_run.deployment_id]
        logger.info("flow run %s (%s) starts in process", flow_run.name, flow.name)
        watcher = _CancelWatcher(flow_run_id, self.poll_seconds)
        # the watcher interrupts this (main) thread with CANCEL_SIGNAL; its own handler, so that it works even
        # where SIGINT is ignored (a background job of a non-interactive shell inherits SIGINT ignored)
        previous = signal.signal(CANCEL_SIGNAL, _raise_cancelled)
        watcher.start()
        try:
            state = run_flow(flow, flow_run=flow_run, return_type="state")
            logger.info("flow run %s finished: %s", flow_run.name, state.type.value)
        except RunCancelled:
            pass
        except Exception:  # the engine itself failed (its flow's errors come back as a Failed state)
            logger.exception("flow run %s: the engine failed", flow_run.name)
            _force_state(client, flow_run_id, "crashed", "the in-process engine raised; see the serve log")
        finally:
            watcher.finish()
            signal.signal(CANCEL_SIGNAL, previous)
        if watcher.cancel_requested:
            _force_state(client, flow_run_id, "cancelled", "cancelled while running in the serving process")
            logger.info("flow run %s cancelled", flow_run.name)


class _CancelWatcher(threading.Thread):
    """Polls one flow run's state; interrupts the main thread once the run is *Cancelling*."""

    def __init__(self, flow_run_id: UUID, poll_seconds: float):
        super().__init__(name=f"eigenflow-cancel-watch-{flow_run_id}", daemon=True)
        self.flow_run_id = flow_run_id
        self.poll_seconds = poll_seconds
        self.cancel_requested = False
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._context = contextvars.copy_context()  # Prefect's settings context (API URL) of the serving thread

    def run(self) -> None:
        self._context.run(self._watch)

    def _watch(self) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while not self._done.wait(self.poll_seconds):
                state = client.read_flow_run(self.flow_run_id).state
                if state is not None and state.is_cancelling():
                    with self._lock:
                        if self._done.is_set():
                            return
                        self.cancel_requested = True
                        # a real signal to the main thread: it also wakes a blocking wait (a future's result)
                        signal.pthread_kill(threading.main_thread().ident, CANCEL_SIGNAL)
                    return

    def finish(self) -> None:
        """Stop watching (the run ended); an interrupt can no longer be sent after this returns."""
        with self._lock:
            self._done.set()


def _force_state(client: Any, flow_run_id: UUID, kind: str, message: str) -> None:
    from prefect.states import Cancelled, Crashed

    client.set_flow_run_state(flow_run_id, {"cancelled": Cancelled, "crashed": Crashed}[kind](message=message),
                              force=True)


def _start_time(flow_run: Any) -> datetime:
    return flow_run.next_scheduled_start_time or flow_run.expected_start_time or datetime.now(timezone.utc)


class RunCancelled(BaseException):
    """Raised in the main thread when the running flow run was cancelled (a BaseException, like
    KeyboardInterrupt, so that the flow's own ``except Exception`` blocks do not swallow it)."""


def _raise_cancelled(signum: int, frame: Any) -> None:
    raise RunCancelled(f"the flow run was cancelled (signal {signum})")


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _check_main_thread(method: str) -> None:
    """Refuse a call from another thread by name (signal handlers can only be installed from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(f"InProcessRunner.{method} must be called from the main thread (it installs signal "
                           f"handlers for cancellation and SIGTERM); got thread {threading.current_thread().name!r}")
