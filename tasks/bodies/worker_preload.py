"""Dask preload of eigenflow's local workers: the stop signals of a Ctrl-C are ignored, and the worker's note of a
task cancelled by its close is not printed. Prefect-free.

The local workers are child processes of the CLI, in its process group: a Ctrl-C in the terminal (SIGINT to the
group) or a SIGTERM to the group would kill each of them in the middle of a task, and their Nannies would restart
them while the run stops. They ignore both (:func:`flows.cluster.local_cluster` also starts them with both
blocked, for the moments before this preload runs); the flow process stops them with Dask's own close.

Dask logs the WARNING "Async instruction for <Task ...> ended with CancelledError" when a worker is closed while
a task runs (its comment: "this should exclusively happen in Worker.close()"), which is what a stopped run's close
of its cluster does; the run reports its stop in one line of its own.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

#: The signals a local worker ignores.
IGNORED = (signal.SIGINT, signal.SIGTERM)
#: The logger of Dask's worker that writes the record :class:`CancelledOnClose` drops.
STATE_MACHINE_LOGGER = "distributed.worker.state_machine"


def ignore_stop_signals() -> None:
    """Ignore :data:`IGNORED` in this process (only the main thread may set handlers; elsewhere nothing)."""
    if threading.current_thread() is threading.main_thread():
        for signum in IGNORED:
            signal.signal(signum, signal.SIG_IGN)


class CancelledOnClose(logging.Filter):
    """Drops Dask's "Async instruction for ... ended with CancelledError" warning; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (record.levelno == logging.WARNING and text.startswith("Async instruction for")
                    and text.endswith("ended with CancelledError"))


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called in the worker process when its worker starts."""
    ignore_stop_signals()


ignore_stop_signals()  # at import: as early as the worker process loads its preloads
logging.getLogger(STATE_MACHINE_LOGGER).addFilter(CancelledOnClose())
