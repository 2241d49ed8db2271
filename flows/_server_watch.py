"""Prefect's temporary server, ended when the process that started it is gone.

The CLI starts Prefect's temporary server in its own session (:mod:`flows._prefect_start`), so that the CLI's
group signals do not reach it; a SIGKILL of the CLI (alone, or of its whole process group) then gives it no
chance to stop the server. ``python -m flows._server_watch PARENT_PID UVICORN_ARGS...`` runs uvicorn as
``python -m uvicorn UVICORN_ARGS...`` would, with a daemon thread that checks every second whether its parent is
still ``PARENT_PID`` and sends the server SIGTERM (uvicorn's graceful stop) when it is not.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: Seconds between two checks of the parent.
CHECK_SECONDS = 1.0


def watch_parent(parent: int) -> None:
    """SIGTERM this process once its parent is no longer ``parent`` (the parent died: it was re-parented)."""
    while os.getppid() == parent:
        time.sleep(CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> None:
    """``argv = [PARENT_PID, *uvicorn arguments]``: watch the parent, then run uvicorn's command line."""
    import uvicorn

    threading.Thread(target=watch_parent, args=(int(argv[0]),), name="parent-watch", daemon=True).start()
    sys.argv = ["uvicorn", *argv[1:]]
    uvicorn.main()


if __name__ == "__main__":
    main(sys.argv[1:])
