"""Prefect's temporary API server, started by the CLI before it imports Prefect.

Without an API URL (``PREFECT_API_URL`` in the environment, the active profile or a settings file), the first flow
call of a process starts Prefect's temporary server (``prefect.server.api.server.SubprocessASGIServer``: a uvicorn
process with a sqlite database, 2.9 s on an idle 2-core machine, most of it the server's imports) and the flow
begins only once it answers. Importing that class alone costs the calling process ~1.9 s more (FastAPI,
SQLAlchemy, the server's models). :func:`start_early` therefore launches the same uvicorn command itself, at the
very beginning of ``embed`` / ``extend``, without importing Prefect: the server's start overlaps the CLI's own
imports and the start of the Dask cluster. :meth:`TemporaryServer.serving` (entered right before the flow is
called) waits until it answers and points this process's Prefect settings at it. When the settings turn out to
name a server after all (a profile or a ``prefect.toml``), or forbid ephemeral mode, the speculative server is
stopped unused and Prefect does what it would have done.

The server's process runs in its own session: a Ctrl-C or a SIGTERM sent to the CLI's process group does not
reach it, so the run can still report its end to it. It is stopped when this process exits (an ``atexit``
handler registered before Prefect's, so it runs after Prefect has flushed its logs and events) or by
:mod:`flows._stop` on an interrupted run, and it stops itself when the CLI is gone (:mod:`flows._server_watch`: a
SIGKILL of the CLI leaves no server behind).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, ContextManager

from eigenflow.tasks._priority import SIDE_WORK_NICENESS, lower_process_priority, lower_thread_priority

#: uvicorn's exit code when its port is taken (Prefect's own start retries on a new port then, as this one does).
PORT_TAKEN_EXIT = 3
#: Seconds between two probes of the server's ``/health`` while it starts.
PROBE_SECONDS = 0.05
#: Seconds to wait for the server when ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` is unset.
DEFAULT_STARTUP_SECONDS = 90.0
#: The environment of the server's process, as Prefect's own start sets it (no UI, ephemeral services).
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}

_FALSE = {"0", "false", "no", "off"}
#: The environment variables (Prefect's setting and its alias) that can forbid ephemeral mode.
_EPHEMERAL_SWITCHES = ("PREFECT_SERVER_EPHEMERAL_ENABLED", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (uvicorn exits with :data:`PORT_TAKEN_EXIT` if it was
    taken in between; :meth:`TemporaryServer.wait` then starts again on another)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _prefect_dir() -> str:
    """The directory holding the ``prefect`` package (uvicorn's ``--app-dir``, as Prefect passes it), found
    without importing Prefect."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("prefect is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))).parent)


class TemporaryServer:
    """One uvicorn process serving Prefect's API on a free loopback port (Prefect's temporary server).

    ``TemporaryServer(niceness)`` launches it (at that nice value: :mod:`tasks._priority`) and returns at once;
    :meth:`wait` blocks until ``/health`` answers; :meth:`stop` ends it (idempotent; also registered with
    ``atexit``).
    """

    def __init__(self, niceness: int = 0) -> None:
        self.niceness = niceness
        self.port = free_port()
        self.process: subprocess.Popen | None = self._launch()
        self.answered = False
        atexit.register(self.stop)

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:PORT/api``."""
        return f"http://127.0.0.1:{self.port}/api"

    def _launch(self) -> subprocess.Popen:
        args = [sys.executable, "-m", "eigenflow.flows._server_watch", str(os.getpid()),  # uvicorn, watching this process
                "--app-dir", _prefect_dir(), "--factory", "prefect.server.api.server:create_app",
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "error", "--lifespan", "on"]
        process = subprocess.Popen(args, env={**os.environ, **SERVER_ENV}, start_new_session=True)
        lower_process_priority(process.pid, self.niceness)
        return process

    def wait(self, timeout: float | None = None) -> None:
        """Block until the server answers ``/health`` (at most ``timeout`` seconds, by default Prefect's
        ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` or 90); RuntimeError if its process exits or the
        time runs out (the message names the URL and the exit code)."""
        if self.answered:
            return
        if self.process is None:
            raise RuntimeError(f"Prefect's temporary server at {self.api_url} was stopped")
        limit = startup_timeout() if timeout is None else timeout
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code == PORT_TAKEN_EXIT:
                self.port = free_port()
                self.process = self._launch()
                continue
            if code is not None:
                self.process = None
                raise RuntimeError(f"Prefect's temporary server at {self.api_url} exited with code {code} "
                                   "before it answered")
            if api_answers(self.api_url, timeout=1.0):
                self.answered = True
                return
            time.sleep(PROBE_SECONDS)
        raise RuntimeError(f"Prefect's temporary server at {self.api_url} did not answer within {limit:g} s "
                           "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")

    @contextmanager
    def serving(self) -> Iterator[None]:
        """For the flow call inside this block: the server this process's Prefect reports to.

        Prefect must be importable here (it is imported). If its settings already name an API URL, or forbid
        ephemeral mode, this server is stopped unused and the block runs on Prefect's settings as they are.
        Otherwise it waits for the server (:meth:`wait`) and sets ``PREFECT_API_URL`` in the environment and in
        Prefect's process-global settings (``prefect.context.refresh_global_settings_context``), so that every
        thread (Prefect's log and event workers included) reports to it; both stay until :meth:`stop`. Settings
        entered by the caller (``temporary_settings``) shadow the global ones: the block runs in a copy of them
        with the URL set.
        """
        from prefect.context import refresh_global_settings_context
        from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

        settings = get_current_settings()
        if os.environ.get("PREFECT_API_URL") != self.api_url and (
                settings.api.url or not settings.server.ephemeral.enabled):
            self.stop()
            yield
            return
        self.wait()
        os.environ["PREFECT_API_URL"] = self.api_url
        refresh_global_settings_context()
        with temporary_settings(updates={PREFECT_API_URL: self.api_url}):
            yield

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s) and take its URL out of the environment."""
        process, self.process = self.process, None
        if os.environ.get("PREFECT_API_URL") == self.api_url:
            del os.environ["PREFECT_API_URL"]
            context = imported_module("prefect.context")
            if context is not None:
                context.refresh_global_settings_context()
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def imported_module(name: str) -> Any:
    """The module ``name`` if this process has imported it to the end, else None: a module another thread is still
    importing is in ``sys.modules`` before its body has run, so its names may not exist yet (Prefect's import runs
    in the main thread while the API watchdog's thread reads Prefect's settings)."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def api_answers(url: str, timeout: float) -> bool:
    """Whether the Prefect API at ``url`` answers its ``/health`` with 200 within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except Exception:  # noqa: BLE001 - refused, reset, timed out, HTTP error: not answering
        return False


def env_seconds(name: str, default: float) -> float:
    """The environment variable ``name`` as a number of seconds > 0, ``default`` when it is unset or blank;
    ValueError naming the variable and its value otherwise."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0; got {raw!r}")
    return value


def startup_timeout() -> float:
    """``$PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (seconds > 0), else :data:`DEFAULT_STARTUP_SECONDS`."""
    return env_seconds("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", DEFAULT_STARTUP_SECONDS)


def running_server() -> TemporaryServer | None:
    """The temporary server this process started and has not stopped, if any (stopped on an interrupted run)."""
    return _SERVER if _SERVER is not None and _SERVER.process is not None else None


def served_by(server: TemporaryServer | None) -> ContextManager[None]:
    """``server.serving()``, or a block that changes nothing when no server was started (a configured API)."""
    return nullcontext() if server is None else server.serving()


def start_early(niceness: int = 0) -> TemporaryServer | None:
    """Launch Prefect's temporary server now, at nice ``niceness`` (or return the one this process already runs),
    unless the environment names a server (``PREFECT_API_URL``) or forbids ephemeral mode; None when nothing was
    started.

    Settings that only Prefect can read (profiles, ``prefect.toml``) are checked when the flow is called
    (:meth:`TemporaryServer.serving`); in a process that has already imported Prefect they are checked here.
    """
    global _SERVER
    if running_server() is not None:
        return _SERVER
    if os.environ.get("PREFECT_API_URL"):
        return None
    if any(os.environ.get(name, "").strip().lower() in _FALSE for name in _EPHEMERAL_SWITCHES):
        return None
    prefect_settings = imported_module("prefect.settings")
    if prefect_settings is not None:
        settings = prefect_settings.get_current_settings()
        if settings.api.url or not settings.server.ephemeral.enabled:
            return None
    _SERVER = TemporaryServer(niceness)
    return _SERVER


_SERVER: TemporaryServer | None = None

#: Rows of a source from which ``embed`` starts Prefect's server only once the fit stages begun before the flow
#: reach the eigensolve (:class:`LaterStart`, :func:`flows._run_prologue.fit_before_flow`): the kNN build of
#: 250,000 rows of 32 features takes ~3 s here, what the server's start takes, so from there on the server would
#: take CPU from the build (both cores) rather than overlap idle time; later, it starts on the core the
#: single-threaded eigensolve leaves free.
LATE_START_ROWS = 250_000


class LaterStart:
    """Prefect's temporary server started by :meth:`begin` (:func:`start_early`, once), at the latest when the
    flow call is served (:meth:`serving`, what :func:`served_by` enters)."""

    def __init__(self) -> None:
        self._begun = False
        self._server: TemporaryServer | None = None

    @property
    def begun(self) -> bool:
        """Whether :meth:`begin` has been called."""
        return self._begun

    def begin(self, *, beside_stage: bool = False) -> None:
        """Launch the server now, if this has not done it yet.

        ``beside_stage``: the run's stages are running on the cluster (its one-core eigensolve has begun). The
        server's process and the calling thread, for the rest of its work (Prefect's import, the flow's start,
        waiting for the stages), then run at :data:`tasks._priority.SIDE_WORK_NICENESS`: they take the core the
        eigensolve leaves free, not CPU from it."""
        if not self._begun:
            self._begun = True
            niceness = SIDE_WORK_NICENESS if beside_stage else 0
            lower_thread_priority(niceness)
            self._server = start_early(niceness)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """:meth:`TemporaryServer.serving` of the server (begun now if not yet), or nothing (a configured API)."""
        self.begin()
        with served_by(self._server):
            yield


@contextmanager
def quiet_prefect() -> Iterator[None]:
    """Prefect settings for one-shot runs: no flow heartbeat thread (saves ~1 s at the end of each flow)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
