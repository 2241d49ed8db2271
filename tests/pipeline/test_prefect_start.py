"""Prefect's temporary server started by the CLI before Prefect is imported (:mod:`flows._prefect_start`).

Real uvicorn processes serving Prefect's API on loopback ports; a real CLI ``embed`` in a subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from eigenflow.flows import _prefect_start
from eigenflow.flows._prefect_start import TemporaryServer, start_early


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_server_answers_then_stops(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    server = TemporaryServer()
    try:
        server.wait(timeout=90)
        assert answers(server.api_url)
        process = server.process
    finally:
        server.stop()
    assert server.process is None and process.poll() is not None
    assert not answers(server.api_url)
    server.stop()  # idempotent


def test_taken_port_starts_again_on_another(monkeypatch):
    """uvicorn exits with code 3 on a taken port; the start goes on with a new free port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real_free_port = _prefect_start.free_port
        monkeypatch.setattr(_prefect_start, "free_port", lambda: next(ports, None) or real_free_port())
        server = TemporaryServer()
        try:
            assert server.port == busy
            server.wait(timeout=90)
            assert server.port != busy and answers(server.api_url)
        finally:
            server.stop()


def test_exited_server_is_an_error_naming_the_url(monkeypatch):
    monkeypatch.setattr(TemporaryServer, "_launch",
                        lambda self: subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"]))
    server = TemporaryServer()
    with pytest.raises(RuntimeError, match=r"127\.0\.0\.1:\d+/api exited with code 7"):
        server.wait(timeout=30)
    server.stop()


def test_startup_timeout_is_checked(monkeypatch):
    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "-2")
    with pytest.raises(ValueError, match="PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.*> 0.*'-2'"):
        _prefect_start.startup_timeout()


@pytest.mark.parametrize("name, value", [("PREFECT_API_URL", "http://127.0.0.1:9/api"),
                                         ("PREFECT_SERVER_EPHEMERAL_ENABLED", "false"),
                                         ("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "0")])
def test_configured_environment_starts_nothing(monkeypatch, name, value):
    monkeypatch.setattr(_prefect_start, "_SERVER", None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv(name, value)
    assert start_early() is None


def test_a_later_start_launches_the_server_once_when_begun(monkeypatch):
    """:class:`flows._prefect_start.LaterStart` launches nothing until :meth:`begin` (or the flow call it
    serves), then the one server of the process; with a configured API it launches nothing and serves as is."""
    from eigenflow.flows._prefect_start import LaterStart

    monkeypatch.setattr(_prefect_start, "_SERVER", None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    later = LaterStart()
    assert _prefect_start.running_server() is None
    later.begin()
    server = _prefect_start.running_server()
    try:
        assert server is not None
        later.begin()
        assert _prefect_start.running_server() is server
    finally:
        server.stop()
    monkeypatch.setattr(_prefect_start, "_SERVER", None)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    configured = LaterStart()
    with configured.serving():
        assert _prefect_start.running_server() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_later_start_beside_a_stage_runs_the_server_and_its_caller_at_a_lower_priority(monkeypatch):
    """Begun beside a running stage (the eigensolve), the server's process and the calling thread get the side
    work's nice value; begun otherwise, the server keeps this process's."""
    import threading

    from eigenflow.flows._prefect_start import LaterStart
    from eigenflow.tasks._priority import SIDE_WORK_NICENESS

    own = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    for beside, expected in ((True, max(own, SIDE_WORK_NICENESS)), (False, own)):
        monkeypatch.setattr(_prefect_start, "_SERVER", None)
        seen: dict[str, int] = {}

        def begin() -> None:
            LaterStart().begin(beside_stage=beside)  # noqa: B023 - called before the loop moves on
            seen["caller"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        thread = threading.Thread(target=begin)
        thread.start()
        thread.join()
        server = _prefect_start.running_server()
        try:
            assert server is not None
            assert seen["caller"] == expected
            assert os.getpriority(os.PRIO_PROCESS, server.process.pid) == expected
            server.wait()  # a lowered server still starts and answers
            assert answers(server.api_url)
        finally:
            server.stop()


def test_settings_naming_a_server_stop_the_speculative_one(monkeypatch):
    """A URL that only Prefect's settings know (here entered as Prefect's temporary settings, as a profile would
    give it): the server started early is stopped unused and the block sees the configured URL."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    server = TemporaryServer()
    configured = "http://127.0.0.1:9/api"
    with temporary_settings(updates={PREFECT_API_URL: configured}):
        with server.serving():
            assert server.process is None
            assert str(get_current_settings().api.url) == configured
    assert "PREFECT_API_URL" not in os.environ


def test_serving_points_prefect_at_the_server_in_every_thread(monkeypatch):
    import threading

    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    server = TemporaryServer()
    seen = {}
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):  # the caller's own settings
            with server.serving():
                seen["main"] = str(get_current_settings().api.url)
                thread = threading.Thread(target=lambda: seen.update(thread=str(get_current_settings().api.url)))
                thread.start()
                thread.join()
                assert answers(server.api_url)
    finally:
        server.stop()
    assert seen == {"main": server.api_url, "thread": server.api_url}
    assert "PREFECT_API_URL" not in os.environ and get_current_settings().api.url is None


CLI_PROBE = """
import atexit, sys
from eigenflow.flows.cli import app

def report():
    print("SERVER-MODULE", "prefect.server.api.server" in sys.modules, file=sys.stderr)

atexit.register(report)
sys.argv = ["eigenflow", *sys.argv[1:]]
app()
"""


@pytest.mark.parametrize("command", ["embed", "demo"])
def test_cli_never_imports_prefects_server_and_leaves_nothing(tmp_path, command):
    """``eigenflow embed`` / ``demo`` run on the server started before Prefect's import: the CLI's process never
    imports ``prefect.server.api.server`` (Prefect's own start would), an embed run records ``prefect_start``, and
    no server process outlives the command."""
    from eigenflow.storage.manifest import read_manifest

    X = np.random.default_rng(0).normal(size=(600, 5))
    np.save(tmp_path / "X.npy", X)
    args = {"embed": ["embed", str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"), "--run-name", "probe"],
            "demo": ["demo", "--n-points", "1500", "--out", str(tmp_path / "demo")]}[command]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    cli = subprocess.Popen([sys.executable, "-c", CLI_PROBE, *args, "--workers", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr[-2000:]
    assert "SERVER-MODULE False" in stderr
    if command == "embed":
        assert read_manifest(str(tmp_path / "s.zarr"), "probe").fixed_seconds["prefect_start"] > 0
    left = subprocess.run(["pgrep", "-f", f"eigenflow.flows._server_watch {cli.pid} "], capture_output=True, text=True)
    assert left.stdout.strip() == ""
