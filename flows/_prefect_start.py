"""Prefect's temporary API server started early: while the CLI imports the flow and the Dask cluster starts.

Without ``PREFECT_API_URL`` (in the environment or the active Prefect profile), the first flow call of a process
starts Prefect's temporary server (``prefect.server.api.server.SubprocessASGIServer``: a uvicorn subprocess with
a sqlite database, 5-6 s on this 2-core machine), and only then does the flow begin. :func:`start_early` starts
that same server in a background thread at the beginning of ``embed`` / ``extend``, so that its subprocess starts
up while this process imports Prefect, Dask and the flows and starts the cluster; :meth:`EarlyStart.wait` is
called right before the flow, which then finds the server running (``start`` is idempotent in Prefect 3: one
server per process). With an API URL configured nothing is started. If the early start fails, the flow's own
start runs as it would have and reports its error.

The server's process is started in its own session (:func:`session_server`): a Ctrl-C or a SIGTERM sent to
the CLI's process group does not reach it, so the run can still report its end to it; the CLI stops it on exit
(Prefect's ``atexit`` stop, or :mod:`flows._stop` on an interrupted run), and the server stops itself when the
CLI is gone (:mod:`flows._server_watch`: a SIGKILL of the CLI leaves no server behind).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

logger = logging.getLogger(__name__)


class EarlyStart:
    """A background start of Prefect's temporary server; :meth:`wait` before the flow is called."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="eigenflow-prefect-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            from prefect.settings import get_current_settings

            if get_current_settings().api.url:  # a configured server: the flow talks to it
                return
            session_server().start()
        except BaseException as exc:  # the flow's own start retries and reports it
            self.error = exc
            logger.debug("early start of Prefect's temporary server failed: %s", exc)

    def wait(self) -> None:
        """Block until the background start has ended (successfully or not)."""
        self._thread.join()


def _session_server_class() -> type:
    """:class:`prefect.server.api.server.SubprocessASGIServer` whose uvicorn process starts in a new session.

    Prefect keeps one instance per port in ``SubprocessASGIServer._instances`` (shared with subclasses): once this
    class has made the instance of the default port, Prefect's own ``SubprocessASGIServer()`` calls return it.
    The command is Prefect's own (:meth:`SubprocessASGIServer._run_uvicorn_command`), with ``start_new_session``,
    run by :mod:`flows._server_watch` (uvicorn stopped when this process is gone, even after a SIGKILL).
    """
    import prefect
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    class SessionASGIServer(SubprocessASGIServer):
        """Prefect's temporary server in a process of its own session (not hit by the CLI's group signals)."""

        def _run_uvicorn_command(self) -> subprocess.Popen:
            server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
            args = [sys.executable, "-m", "flows._server_watch", str(os.getpid()),  # uvicorn, watching this process
                    "--app-dir", str(prefect.__module_path__.parent), "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
                    "--log-level", "error", "--lifespan", "on"]
            env = {**os.environ, **server_env,
                   **get_current_settings().to_environment_variables(exclude_unset=True)}
            return subprocess.Popen(args=args, env=env, start_new_session=True)

    return SessionASGIServer


def session_server() -> object:
    """The process's temporary-server instance, made by the class of :func:`_session_server_class` (built on first
    use: Prefect is imported late)."""
    global _SESSION_CLASS
    if _SESSION_CLASS is None:
        _SESSION_CLASS = _session_server_class()
    return _SESSION_CLASS()


_SESSION_CLASS: type | None = None


def running_server() -> object | None:
    """The temporary server started in this process, if any (to be stopped on an interrupted run)."""
    if "prefect.server.api.server" not in sys.modules:
        return None
    from prefect.server.api.server import SubprocessASGIServer

    return next((s for s in list(SubprocessASGIServer._instances.values()) if s.server_process is not None), None)


def start_early() -> EarlyStart | None:
    """Start Prefect's temporary server in the background unless ``PREFECT_API_URL`` is set in the environment
    (the thread also checks the active profile); None when nothing was started."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    return EarlyStart()
