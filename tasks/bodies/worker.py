"""Running one stage body on a Dask worker (kept free of Prefect imports, like every worker-side module).

The heavy fit stages (kNN build, weights, eigensolve, an estimator's own fit) are plain functions that read
their inputs from the store and write their outputs to it. :func:`tasks.dask_calls.run_on_worker` submits one
such body as a single Dask task through :func:`call_on_worker`, so the flow process only orchestrates: it
sends a store handle and parameters and gets small JSON metadata back. The scheduler places the task (the least
loaded worker); if that worker dies (killed, or out of memory), the scheduler runs the task again on another
worker (``distributed.scheduler.allowed-failures``, default 3) and a Nanny restarts the dead one. Every body
is deterministic for a given store, run and seed, so a rerun writes the same bytes.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far, in bytes.

    On Linux ``VmHWM`` of ``/proc/self/status``: ``getrusage``'s ``ru_maxrss`` survives ``execve``, so a process
    started by a big parent (a benchmark, a Prefect runner) would report the parent's peak. Elsewhere
    ``ru_maxrss`` (kilobytes on Linux / BSD, bytes on macOS).
    """
    if sys.platform.startswith("linux"):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # "VmHWM:  123456 kB"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def call_on_worker(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run ``fn(*args, **kwargs)`` on the worker that received this task.

    A dict result (stage metadata) gains ``worker`` (the worker's address), ``worker_seconds`` and
    ``worker_peak_rss_gb`` (peak memory of the worker process up to the end of the stage, including what it
    held before). Any other result (e.g. a kNN index kept on the cluster) is returned as it is.
    """
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    if isinstance(result, dict):
        from distributed import get_worker

        result = {**result, "worker": get_worker().address, "worker_seconds": time.perf_counter() - t0,
                  "worker_peak_rss_gb": round(peak_rss_bytes() / 1e9, 3)}
    return result


#: The packages whose code runs on the Dask workers (their ``.py`` files make :func:`code_digest`).
WORKER_PACKAGES = ("spectral", "storage", "tasks")


def code_digest(packages: tuple[str, ...] = WORKER_PACKAGES) -> str:
    """SHA-256 (first 16 hex digits) of the ``.py`` files of ``packages``, found beside this module's package
    (each file's path inside its package and its bytes, in path order): two processes run the same eigenflow code
    iff their digests are equal, wherever it is installed. Reads ~100 files (a few ms).

    Not located by ``importlib.util.find_spec``: a Dask worker has its local directory on ``sys.path``, and its
    spill directory there, ``storage/``, is found as a namespace package ``storage`` before an editable install's
    finder is asked (measured on a served cluster's worker: 0 files found).
    """
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # the directory holding spectral/, storage/, tasks/
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(f"{package}/{path.relative_to(root / package).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: Environment variable naming the X dtypes (comma-separated) that :mod:`tasks.bodies.worker_preload` compiles for.
WARM_DTYPES_ENV = "EIGENFLOW_WARM_DTYPES"


def warm_nndescent(dtypes: tuple[str, ...] = ("float32", "float64"), metrics: tuple[str, ...] = ("euclidean",),
                   methods: tuple[str, ...] = ("nndescent",)) -> float:
    """Load (or, on a machine's first use, compile) the kNN search's numba kernels in this process: build and query
    a tiny index for each X dtype, metric and search ``method`` ("nndescent", "exact"), and weight tiny graphs (the
    weights stage's kernels: float32 distances, as an index gives them, and float64 ones when ``dtypes`` has
    float64; a graph that repeats a column, the kernels' general path); returns seconds.

    The kernels come from eigenflow's compiled-code cache (:mod:`spectral.neighbours.jit_cache`), so in every process
    after the first on a machine this is a load of about a second, not a compile. Submitted to every Dask worker at the
    start of a run that builds or queries an NN-descent index, while the ingest runs, so that the first task
    does not pay even that; ``eigenflow warm`` runs it for every dtype and metric to fill the cache once.
    """
    from eigenflow.spectral.graph.weights import knn_weights
    from eigenflow.spectral.neighbours.index import KNNIndex

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        for metric in metrics:
            for method in methods:
                index = KNNIndex.build(rng.normal(size=(300, 4)).astype(dtype), 5, method=method, metric=metric,
                                       random_state=0, n_jobs=1)
                index.query(rng.normal(size=(10, 4)).astype(dtype), 5)
    ring = (np.arange(20)[:, None] + np.arange(1, 4)) % 20  # a tiny graph (k = 3) for the weights stage's kernels
    ring_dist = np.sort(rng.random(ring.shape), axis=1)
    repeated = ring.copy()
    repeated[0, 2] = repeated[0, 1]  # a row listing a column twice: the kernels' general path
    for dist_dtype in sorted({"float32"} | ({"float64"} & set(dtypes))):  # an index's distances are float32
        knn_weights(ring, ring_dist.astype(dist_dtype))  # (spectral.graph._weight_kernels)
    knn_weights(repeated, ring_dist)
    return time.perf_counter() - t0
