"""Imported once by the server process that forks the test session's local Dask workers
(:func:`flows._local_workers.fork_warm_workers`).

Importing it loads the kNN search's numba kernels (:func:`tasks._worker.warm_nndescent`) for the X dtypes named in
``$EIGENFLOW_WARM_DTYPES`` (comma-separated; set by :func:`~flows._local_workers.fork_warm_workers`, default
float32) from the compiled-code cache (compiling them on a machine's first use). Every worker forked afterwards
starts with them loaded, and the forks skip even the imports.

numba's threading layer is set to ``workqueue`` before any parallel kernel runs: the default on this machine,
GNU OpenMP, aborts a forked child ("fork() called from a process already using GNU OpenMP, this is unsafe").
``workqueue`` is fork-safe but must not be entered by two threads of one process at once, which holds for
workers of one thread (the local clusters' default).
"""

from __future__ import annotations

import os

os.environ["NUMBA_THREADING_LAYER"] = "workqueue"  # read by numba at import and when it reloads its config;
import numba  # noqa: E402                          # inherited by the forked workers

numba.config.THREADING_LAYER = "workqueue"  # in case numba was imported before (e.g. by a preloaded package)

from eigenflow.tasks._worker import WARM_DTYPES_ENV, warm_nndescent  # noqa: E402

#: Seconds the compile took in the server process.
WARM_SECONDS = warm_nndescent(tuple(os.environ.get(WARM_DTYPES_ENV, "float32").split(",")))
