"""CPU priority of the work that runs beside a run's critical path (Linux nice values; elsewhere a no-op).

On a 2-core machine a large run's stages keep the cores busy in turn: the kNN build both, the eigensolve one. What
runs beside them and is waited for only later (a stage's store write, Prefect's server and the flow's start, a
worker's imports for a later stage) runs at :data:`SIDE_WORK_NICENESS`: it takes the CPU the stage leaves free,
not CPU from the stage. Measured at 1e6 x 32 (local CLI run): with Prefect's start beside the eigensolve at nice
0, the eigensolve took 15.6-15.8 s; at nice 10, 14.8-15.4 s. A lowered priority is never raised again (an
unprivileged process cannot), so only threads and processes whose remaining work is side work are lowered.
Prefect-free and Dask-free.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

#: Nice value of side work (Linux: weight 110 against 1024 for nice 0, so a stage at nice 0 keeps ~90 % of a
#: core it shares with it).
SIDE_WORK_NICENESS = 10

T = TypeVar("T")


def _has_thread_priorities() -> bool:
    """Linux: a thread is a task with its own id and nice value."""
    return hasattr(os, "setpriority") and sys.platform.startswith("linux")


def lower_thread_priority(niceness: int) -> None:
    """Give the calling thread the nice value ``niceness`` (unless it is already nicer); threads it starts from
    then on inherit it. Elsewhere than Linux the thread keeps its priority."""
    if _has_thread_priorities():
        thread = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, thread) < niceness:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)


def lower_process_priority(pid: int, niceness: int) -> None:
    """Give the process ``pid``, just started by this one (its main thread, which every thread it starts
    inherits from), the nice value ``niceness`` (unless it is already nicer). A process that has already exited
    is left alone."""
    if niceness > 0 and _has_thread_priorities():
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < niceness:
                os.setpriority(os.PRIO_PROCESS, pid, niceness)
        except ProcessLookupError:
            pass


def call_at_lower_priority(fn: Callable[..., T], *args: Any, niceness: int = SIDE_WORK_NICENESS) -> T:
    """``fn(*args)`` in a thread of its own at nice ``niceness``, waited for: the calling thread (a Dask worker's
    executor thread, which runs later stages) keeps its priority. ``fn``'s exception is raised here."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            lower_thread_priority(niceness)
            outcome["value"] = fn(*args)
        except BaseException as exc:  # raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="eigenflow-side-work", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
