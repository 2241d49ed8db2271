"""Where a run's fixed time goes: the seconds around its stages, recorded in its manifest and shown by the CLI.

``fixed_seconds`` of a run's manifest (:class:`storage.manifest.RunManifest`), each a number of seconds
(:data:`FIXED_KEYS`, in this order):

- ``interpreter``: the process's creation -> the CLI command starts (Python's start, the import of the CLI,
  argument parsing). Only when the CLI called the flow (``eigenflow embed`` / ``extend``).
- ``imports``: the CLI command starts -> the flow is called (the argument checks, the launch of the early cluster
  start, the estimator's value check, which imports the method's estimator; ``extend``: the flow modules' imports,
  Prefect's included). CLI only.
- ``prefect_start``: the flow is called -> its body starts (without ``PREFECT_API_URL``, the start of Prefect's
  temporary API server; ``embed``: Prefect's import, once the fit stages have begun; the flow run's creation and
  parameter validation), less the CLI's own work in between (its ingest while the server starts,
  :func:`flows._run_prologue.ingest_early`, recorded as the ``ingest`` stage). CLI only.
- ``cluster_start``: the Dask client's start -> ready (a local cluster's worker processes, or the connection to
  a scheduler and the check of its workers' code). The CLI starts it before it calls the flow
  (:func:`flows.cluster.client_started_early`), so it overlaps ``prefect_start``; a flow called otherwise starts
  it at its beginning, beside the ingest.
- ``cluster_wait``: the part of ``cluster_start`` the flow waited for (what nothing else overlapped).
- ``compile``: the NN-descent warm-up on the workers, seconds of the slowest (:mod:`tasks._warm_up`: the import
  of the kNN modules, numba and pynndescent, and the kernels loaded from the compiled-code cache, or compiled on
  a machine's first use). It starts when the cluster is up (the CLI's builder worker: as its process starts),
  during the ingest when the run knows from the source's header that it will need it, so only what outlasts the
  ingest delays the run. 0 when the run uses no
  NN-descent index (no warm-up).
- ``teardown``: the end of the run's work -> the final manifest write (the manifest's completion, the store
  lock's release, the closing of the Dask client and its local cluster, Prefect artifacts).

What follows the final manifest write cannot be in the manifest: Prefect's end of the flow run (its final
state) and the process's exit (Prefect's temporary server is stopped at exit). The CLI's summary shows
``teardown`` measured until the flow has returned (:func:`cli_teardown`), which adds Prefect's end of the run;
the server's stop at exit is after the summary and not measured. A run's own teardown is known only after its
manifest is final, so no run records a previous run's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from eigenflow.flows._prefect_start import quiet_prefect, served_by

#: The keys of ``fixed_seconds``, in the order they happen (module docstring).
FIXED_KEYS = ("interpreter", "imports", "prefect_start", "cluster_start", "cluster_wait", "compile", "teardown")


def process_age() -> float | None:
    """Seconds since this process was created; None where that is unknown.

    Linux: the start time of ``/proc/self/stat`` (clock ticks since boot) against ``CLOCK_BOOTTIME``, exact to a
    tick (psutil's ``create_time`` adds the boot time, which Linux gives in whole seconds: up to 1 s off).
    """
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


@dataclass
class CallClock:
    """Times (``time.perf_counter``) around one flow call made by the CLI, shared with the flow it calls."""

    interpreter: float | None
    command_started: float
    flow_called: float | None = None
    meanwhile_seconds: float = 0.0
    manifest_written: float | None = None

    def call(self, flow: Callable[[], Any], *, before: Any = None,
             meanwhile: Callable[[], AbstractContextManager] | None = None) -> Any:
        """Call ``flow()`` with this clock visible to it (:func:`entry_seconds`); returns its result. ``before``
        (Prefect's temporary server started early, :class:`flows._prefect_start.TemporaryServer`) is waited for
        first and serves the call (``before.serving()``); that wait counts as Prefect's start. ``meanwhile``:
        work that needs no Prefect, entered first (while the server starts) and held open around the call
        (:func:`flows._run_prologue.ingest_early`); its seconds are not Prefect's start. The flow runs with
        :func:`flows._prefect_start.quiet_prefect`'s settings."""

        token = _CLOCK.set(self)
        try:
            self.flow_called = time.perf_counter()
            with meanwhile() if meanwhile is not None else nullcontext():
                self.meanwhile_seconds = time.perf_counter() - self.flow_called
                with served_by(before), quiet_prefect():
                    return flow()
        finally:
            _CLOCK.reset(token)


_CLOCK: ContextVar[CallClock | None] = ContextVar("eigenflow_call_clock", default=None)


def command_clock() -> CallClock:
    """A clock started now: the first call of a CLI command that runs a flow."""
    return CallClock(interpreter=process_age(), command_started=time.perf_counter())


def entry_seconds() -> dict[str, float]:
    """The first call of a flow body: ``interpreter``, ``imports`` and ``prefect_start`` when the CLI called the
    flow (:meth:`CallClock.call`), else ``{}`` (their start is unknown to the flow)."""
    entered = time.perf_counter()
    clock = _CLOCK.get()
    if clock is None or clock.flow_called is None:
        return {}
    out = {"imports": clock.flow_called - clock.command_started,
           "prefect_start": entered - clock.flow_called - clock.meanwhile_seconds}
    if clock.interpreter is not None:
        out = {"interpreter": clock.interpreter, **out}
    return out


def cluster_seconds(pending: Any) -> dict[str, float]:
    """``cluster_start`` and ``cluster_wait`` of a :class:`flows.cluster.PendingClient` (once it is ready)."""
    return {"cluster_start": float(pending.seconds or 0.0), "cluster_wait": float(pending.waited)}


def final_write(fixed: dict[str, float], work_ended: float, write: Callable[[dict[str, float]], None]
                ) -> dict[str, float]:
    """Set ``teardown`` (``work_ended``, a ``time.perf_counter()`` taken where the run's work ended, to now),
    call ``write(fixed_seconds)`` (the run's final manifest write) and tell the CLI's clock when that happened;
    returns ``fixed_seconds`` in :data:`FIXED_KEYS` order."""
    fixed = {**fixed, "teardown": time.perf_counter() - work_ended}
    ordered = {key: round(float(fixed[key]), 3) for key in FIXED_KEYS if key in fixed}
    write(ordered)
    clock = _CLOCK.get()
    if clock is not None:
        clock.manifest_written = time.perf_counter()
    return ordered


def cli_teardown(clock: CallClock, fixed: dict[str, float]) -> dict[str, float]:
    """``fixed`` (a flow summary's ``fixed_seconds``) with ``teardown`` extended to now: the flow has returned,
    so Prefect's end of the run is included."""
    if clock.manifest_written is None or "teardown" not in fixed:
        return dict(fixed)
    return {**fixed, "teardown": round(fixed["teardown"] + time.perf_counter() - clock.manifest_written, 3)}
