"""Prefect's temporary API server started early: while the CLI imports the flow and the Dask cluster starts.

Without ``PREFECT_API_URL`` (in the environment or the active Prefect profile), the first flow call of a process
starts Prefect's temporary server (``prefect.server.api.server.SubprocessASGIServer``: a uvicorn subprocess with
a sqlite database, 5-6 s on this 2-core machine), and only then does the flow begin. :func:`start_early` starts
that same server in a background thread at the beginning of ``embed`` / ``extend``, so that its subprocess starts
up while this process imports Prefect, Dask and the flows and starts the cluster; :meth:`EarlyStart.wait` is
called right before the flow, which then finds the server running (``start`` is idempotent in Prefect 3: one
server per process). With an API URL configured nothing is started. If the early start fails, the flow's own
start runs as it would have and reports its error.
"""

from __future__ import annotations

import logging
import os
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
            from prefect.server.api.server import SubprocessASGIServer

            SubprocessASGIServer().start()
        except BaseException as exc:  # the flow's own start retries and reports it
            self.error = exc
            logger.debug("early start of Prefect's temporary server failed: %s", exc)

    def wait(self) -> None:
        """Block until the background start has ended (successfully or not)."""
        self._thread.join()


def start_early() -> EarlyStart | None:
    """Start Prefect's temporary server in the background unless ``PREFECT_API_URL`` is set in the environment
    (the thread also checks the active profile); None when nothing was started."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    return EarlyStart()
