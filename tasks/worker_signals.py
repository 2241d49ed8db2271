"""Dask preload of eigenflow's local workers: a Ctrl-C or SIGTERM sent to the CLI's process group is ignored.

The local workers are child processes of the CLI, in its process group: a Ctrl-C in the terminal (SIGINT to the
group) or a SIGTERM to the group would kill each of them in the middle of a task, and their Nannies would
restart them while the run stops. With this preload (:func:`flows.cluster.local_cluster`) they ignore both; the
CLI stops them itself when the run ends (the Nanny's stop message, then SIGKILL after its timeout), and reports
the stop in one line: the worker's own note that the task it was running has been cancelled by its close
(:class:`CancelledOnClose`) is not printed. Prefect-free.
"""

from __future__ import annotations

import logging
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


class CancelledOnClose(logging.Filter):
    """Drops Dask's WARNING "Async instruction for <Task ...> ended with CancelledError", which Dask logs (its
    comment: "this should exclusively happen in Worker.close()") when a worker closes while a task runs: what a
    stopped run's close of its cluster does. Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (record.levelno == logging.WARNING and text.startswith("Async instruction for")
                    and text.endswith("ended with CancelledError"))


#: The logger of Dask's worker that writes the record :class:`CancelledOnClose` drops.
STATE_MACHINE_LOGGER = "distributed.worker.state_machine"


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called in the worker process when its worker starts."""
    ignore_stop_signals()


ignore_stop_signals()  # at import: as early as the worker process loads its preloads
logging.getLogger(STATE_MACHINE_LOGGER).addFilter(CancelledOnClose())
