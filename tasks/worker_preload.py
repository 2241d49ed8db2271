"""Imported once by the server process that forks local Dask workers (:func:`flows.cluster.fork_warm_workers`).

Importing it compiles pynndescent's numba kernels for float32 and float64 X (:func:`tasks._worker.warm_nndescent`,
about 35 s of one core), so every worker forked afterwards starts with them compiled instead of compiling them
again (35-80 s per fresh worker process on this 2-core machine, even with ``NUMBA_CACHE_DIR``).

numba's threading layer is set to ``workqueue`` before any parallel kernel runs: the default on this machine,
GNU OpenMP, aborts a forked child ("fork() called from a process already using GNU OpenMP, this is unsafe").
``workqueue`` is fork-safe but must not be entered by two threads of one process at once, which holds for
workers of one thread (the local clusters' default).
"""

from __future__ import annotations

import numba

numba.config.THREADING_LAYER = "workqueue"

from tasks._worker import warm_nndescent  # noqa: E402

#: Seconds the compile took in the server process.
WARM_SECONDS = warm_nndescent()
