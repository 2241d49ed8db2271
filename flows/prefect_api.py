"""The Prefect API a run reports to: the configured server, or Prefect's temporary one, and a watch on it.

:class:`LocalServer`: without a configured API (``PREFECT_API_URL``), a CLI command that runs a flow launches
Prefect's documented local server, ``prefect server start``, as its first step, so that its start overlaps the
command's checks and the cluster's start; its flow run then reports to it (``PREFECT_API_URL`` for the run). It
does the job of Prefect's ephemeral mode, whose temporary server the flow process would start only at the flow's
first API call, after importing Prefect's whole server package itself.

:class:`ApiWatch` probes a configured API; after ``timeout`` seconds without an answer it records
:class:`flows.stops.PrefectAPILost` and calls ``on_lost`` (the flow closes its Dask client there, which ends every
wait of the flow on the cluster): the run fails with that reason in bounded time instead of running on while
Prefect's client retries its reports.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from eigenflow.flows.stops import PrefectAPILost

#: Environment variable: seconds an unreachable Prefect API is tolerated before the run fails.
API_TIMEOUT_ENV = "EIGENFLOW_PREFECT_API_TIMEOUT"
DEFAULT_API_TIMEOUT = 30.0
#: Seconds between two probes of the Prefect API's health.
PROBE_SECONDS = 2.0


def api_timeout() -> float:
    """``$EIGENFLOW_PREFECT_API_TIMEOUT`` (seconds > 0) or :data:`DEFAULT_API_TIMEOUT`."""
    from eigenflow.spectral.errors import ParameterError

    raw = os.environ.get(API_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_API_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ParameterError(f"{API_TIMEOUT_ENV} must be a number of seconds > 0; got {raw!r}")
    return value


def configured_api_url() -> str | None:
    """The Prefect API URL of the settings (``PREFECT_API_URL``, a profile); None in ephemeral mode."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url).rstrip("/") if url else None


def api_answers(url: str, timeout: float) -> bool:
    """Whether ``url/health`` answers 200 within ``timeout`` seconds."""
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


class ApiWatch:
    """Probe ``url`` every :data:`PROBE_SECONDS` in a thread; after ``timeout`` seconds without an answer, record
    :attr:`lost` and call ``on_lost()`` once (the flow closes its Dask client there)."""

    def __init__(self, url: str, timeout: float, on_lost: Any):
        self.url, self.timeout, self.on_lost = url, timeout, on_lost
        self.lost: PrefectAPILost | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="eigenflow-api-watch", daemon=True)

    def __enter__(self) -> "ApiWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()

    def _watch(self) -> None:
        down_since = None
        while not self._done.wait(PROBE_SECONDS):
            if api_answers(self.url, timeout=min(5.0, self.timeout)):
                down_since = None
            elif down_since is None:
                down_since = time.time()
            elif time.time() - down_since >= self.timeout:
                self.lost = PrefectAPILost(self.url, down_since)
                self.on_lost()
                return


class LocalServer:
    """``prefect server start --no-services`` on a free loopback port for one CLI command that runs a flow,
    launched at once (see the module docstring): :meth:`ready` waits for its API and returns its URL.

    It runs in a session of its own, so a Ctrl-C or SIGTERM sent to the CLI's process group does not stop it while
    the run still reports its end; it is stopped when this process exits (an ``atexit`` handler registered before
    Prefect's own, so it runs after they have flushed their logs and events), and the kernel ends it should this
    process die first (Linux: ``PR_SET_PDEATHSIG``)."""

    def __init__(self) -> None:
        import atexit
        import subprocess
        import sys
        import tempfile

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port),
             "--no-services", "--no-ui", "--analytics-off", "--log-level", "ERROR"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True,
            preexec_fn=_end_with_parent)
        atexit.register(self.stop)

    def ready(self, timeout: float) -> str:
        """Wait until the API answers (at most ``timeout`` seconds) and return its URL; a server that exits or
        does not answer is an error naming what it printed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if api_answers(self.url, timeout=1.0):
                return self.url
            time.sleep(0.05)
        self._stderr.seek(0)
        said = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:] or ["nothing"]
        state = f"exited with status {self.process.returncode}" if self.process.poll() is not None else \
            f"did not answer within {timeout:.0f} s"
        raise RuntimeError(f"Prefect's local server (prefect server start) {state}; it printed: {said[0]}")

    def stop(self) -> None:
        """Ask the server to stop (SIGTERM: it shuts down on its own, with nothing left to serve); later calls do
        nothing."""
        if self.process.poll() is None:
            self.process.terminate()


def _end_with_parent() -> None:
    """In the child, before it runs: SIGTERM when the process that started it dies (Linux; elsewhere nothing)."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
