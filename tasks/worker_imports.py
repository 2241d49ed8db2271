"""Imported once by the server process that forks the CLI's local Dask workers (:mod:`flows._local_workers`).

The modules a local worker of an ``embed`` / ``extend`` run needs before its first task: Dask's worker, numba,
scikit-learn and pynndescent (the NN-descent warm-up's imports), and eigenflow's stage bodies. A worker forked
from the server starts with them imported; its warm-up (:mod:`tasks._warm_up`) then only loads the compiled
kernels from the cache. Nothing here runs a numba kernel: a forked child of a process that has started numba's
OpenMP threading layer aborts, and one that has only imported numba does not.

The server ends without the interpreter's teardown (:func:`_end_at_once`): it holds the CLI's standard streams, and
freeing these modules kept them open ~0.5 s after the CLI had exited (a caller reading the CLI's output to its
end waited that long).
"""

from __future__ import annotations

import atexit
import os

import distributed.nanny  # noqa: F401
import distributed.worker  # noqa: F401
import numba  # noqa: F401
import pynndescent  # noqa: F401  (scikit-learn's estimators come with it)
import scipy.sparse  # noqa: F401
import zarr  # noqa: F401

import eigenflow.spectral.neighbours.index  # noqa: F401
import eigenflow.tasks._warm_up  # noqa: F401
import eigenflow.tasks.early_fit  # noqa: F401
import eigenflow.tasks.laplacian_eigenmaps  # noqa: F401
import eigenflow.tasks.warm_up_preload  # noqa: F401
import eigenflow.tasks.worker_exit  # noqa: F401
import eigenflow.tasks.worker_signals  # noqa: F401


def _end_at_once() -> None:
    """Exit handler of the server process, registered after every import above (so it runs first): the server has
    nothing to flush or free. Forked workers never run it (multiprocessing ends them with ``os._exit``)."""
    os._exit(0)


atexit.register(_end_at_once)
