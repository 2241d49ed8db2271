"""The CLI run's guard (:mod:`flows._stop`) when a stop's exception is lost: Python ignores an exception that a
signal handler raises inside a garbage-collection callback or a ``__del__`` method. Each case runs in a
subprocess (real signals to a real process; the guard's forced exit must not reach the test process)."""

from __future__ import annotations

import subprocess
import sys

LOST_IN_GC = """
import gc, os, signal, time
from eigenflow.flows._stop import RunGuard, RunInterrupted, raise_if_stopping
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
from eigenflow.flows._stop import RunGuard, bridge_prefect_sigterm
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


def test_the_api_url_is_not_read_from_a_prefect_settings_module_another_thread_is_importing(tmp_path, monkeypatch):
    """The API watchdog's thread may look while the main thread imports Prefect: a ``prefect.settings`` still being
    imported (in ``sys.modules``, its body not run to the end) is not read (no AttributeError), one imported is."""
    import threading

    from eigenflow.flows import _stop
    from eigenflow.flows._prefect_start import imported_module

    release, entered = threading.Event(), threading.Event()
    (tmp_path / "settings_being_imported.py").write_text(
        "import builtins\nbuiltins._eigenflow_test_entered.set()\nbuiltins._eigenflow_test_release.wait(30)\n"
        "class _Api:\n    url = 'http://127.0.0.1:9/api'\n"
        "class _Settings:\n    api = _Api()\n"
        "def get_current_settings():\n    return _Settings()\n")
    import builtins

    monkeypatch.setattr(builtins, "_eigenflow_test_entered", entered, raising=False)
    monkeypatch.setattr(builtins, "_eigenflow_test_release", release, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    importer = threading.Thread(target=__import__, args=("settings_being_imported",))
    importer.start()
    try:
        assert entered.wait(30)
        module = sys.modules["settings_being_imported"]
        monkeypatch.setitem(sys.modules, "prefect.settings", module)
        assert imported_module("prefect.settings") is None and not hasattr(module, "get_current_settings")
        assert _stop.configured_api_url() is None
    finally:
        release.set()
        importer.join(30)
    assert imported_module("prefect.settings") is module
    assert _stop.configured_api_url() == "http://127.0.0.1:9/api"
    monkeypatch.delitem(sys.modules, "settings_being_imported")
