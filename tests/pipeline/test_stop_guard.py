"""The CLI run's guard (:mod:`flows._stop`) when a stop's exception is lost: Python ignores an exception that a
signal handler raises inside a garbage-collection callback or a ``__del__`` method. Each case runs in a
subprocess (real signals to a real process; the guard's forced exit must not reach the test process)."""

from __future__ import annotations

import subprocess
import sys

LOST_IN_GC = """
import gc, os, signal, time
from flows._stop import RunGuard, RunInterrupted, raise_if_stopping
guard = RunGuard("unused.zarr")
with guard:
    fired = []
    def callback(phase, info):
        if phase == "start" and not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.{name})
            time.sleep(0.2)  # the handler runs here, inside the callback: its exception is ignored
    gc.callbacks.append(callback)
    gc.collect()
    gc.callbacks.remove(callback)
    print("continued", type(guard.stopping).__name__, flush=True)
    try:
        raise_if_stopping()  # what the next stage's start does
    except RunInterrupted as stop:
        print("raised", stop, flush=True)
    guard._done.set()  # no forced exit in this test
"""

PREFECT_BRIDGE = """
import os, signal
from flows._stop import RunGuard, bridge_prefect_sigterm
class TerminationSignal(BaseException):
    pass
def prefect_handler(signum, frame):  # what Prefect's engine installs during a flow run
    raise TerminationSignal()
guard = RunGuard("unused.zarr")
with guard:
    signal.signal(signal.SIGTERM, prefect_handler)
    bridge_prefect_sigterm()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    except TerminationSignal:
        print("prefect's handler ran;", "guard:", guard.stopping, flush=True)
    guard._done.set()
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_stop_lost_in_a_gc_callback_is_not_printed_and_raised_at_the_next_stage():
    for name in ("SIGINT", "SIGTERM"):
        r = _run(LOST_IN_GC.replace("{name}", name))
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["continued RunInterrupted", f"raised interrupted ({name})"]
        assert r.stderr == ""  # not "Exception ignored in ... Traceback"


def test_prefects_sigterm_handler_is_bridged_to_the_guard():
    r = _run(PREFECT_BRIDGE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "prefect's handler ran; guard: interrupted (SIGTERM)"
