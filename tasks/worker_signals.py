"""Dask preload of eigenflow's local workers: a Ctrl-C or SIGTERM sent to the CLI's process group is ignored.

The local workers are child processes of the CLI, in its process group: a Ctrl-C in the terminal (SIGINT to the
group) or a SIGTERM to the group would kill each of them in the middle of a task, and their Nannies would
restart them while the run stops. With this preload (:func:`flows.cluster.local_cluster`) they ignore both; the
CLI stops them itself when the run ends (the Nanny's stop message, then SIGKILL after its timeout). Prefect-free.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

#: The signals a local worker ignores.
IGNORED = (signal.SIGINT, signal.SIGTERM)


def ignore_stop_signals() -> None:
    """Ignore :data:`IGNORED` in this process (only the main thread may set handlers; elsewhere nothing)."""
    if threading.current_thread() is threading.main_thread():
        for signum in IGNORED:
            signal.signal(signum, signal.SIG_IGN)


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called in the worker process when its worker starts."""
    ignore_stop_signals()


ignore_stop_signals()  # at import: as early as the worker process loads its preloads
