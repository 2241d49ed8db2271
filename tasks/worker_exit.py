"""Dask preload of eigenflow's local workers: a worker that has closed cleanly ends its process without the
interpreter's teardown.

A local worker process holds numba's compiled kernels, scikit-learn, SciPy and matplotlib; freeing them at exit
took 0.5 s, and a local cluster's close waits for its workers' processes (0.6 s at the end of every CLI run). Once
the worker has closed (:func:`dask_teardown`: its tasks, plugins and their background writes are done), the
process's last exit handler flushes the standard streams and ends it with status 0 (``os._exit``), as the worker's
own clean exit would. A worker that did not close (killed, or failed) exits as Python does. Prefect-free.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

#: Set once this process's worker has closed.
_CLOSED = threading.Event()


def _exit_after_close() -> None:
    """Exit handler (registered first, so it runs last): end a cleanly closed worker's process now."""
    if not _CLOSED.is_set():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written to it
            pass
    os._exit(0)


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called in the worker process when its worker starts."""
    atexit.register(_exit_after_close)


def dask_teardown(worker: Any) -> None:
    """Dask's preload hook, called when the worker closes."""
    _CLOSED.set()
