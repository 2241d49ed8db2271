"""How eigenflow's local Dask workers are started: their environment (:func:`worker_environ`), their Dask
settings (:func:`worker_config`), and, for the CLI, forks of a server process that imported their modules as the
command started (:func:`start_import_server`), or, for the test session, of one that compiled NN-descent
(:func:`fork_warm_workers`).

A spawned local worker starts a fresh interpreter and imports Dask's worker (~0.5 s); the builder's warm-up then
imports numba, scikit-learn and pynndescent (~1.3 s) before it loads the compiled kernels (~0.35 s): the first
2-3 s of every ``embed``, on the path to the kNN build. :func:`start_import_server`, called by the console script
(:mod:`flows._launch`) for a flow command on a local cluster, before it imports the CLI, launches
multiprocessing's fork server with :data:`IMPORTS_MODULE` as its preload: those imports run beside the CLI's own
start and checks, and each local worker (and each worker a Nanny restarts) is a fork of the server
(:func:`forked_workers`, entered by :func:`flows.cluster.local_cluster`). Measured at 1e6 x 32 (local CLI run):
the builder's warm-up ended 2.6-2.8 s after the command instead of 3.5 s.

The server is started with the workers' environment (:func:`worker_environ`: what Dask sets before it spawns a
worker, such as the BLAS thread counts that numpy reads when it loads); the Nanny sets the rest of a worker's
environment in the child, and its Dask settings, as for a spawned one. If the server cannot import a module,
multiprocessing ignores that and the worker imports it itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import ContextManager

#: Environment variable giving the address of an existing Dask scheduler (``tcp://host:port``): no local workers.
SCHEDULER_ENV = "EIGENFLOW_SCHEDULER"
#: The server's preload (imports only: see its docstring).
IMPORTS_MODULE = "eigenflow.tasks.worker_imports"
#: The value of ``MALLOC_TRIM_THRESHOLD_`` that Dask's Nanny sets in its workers by default
#: (``distributed.nanny.pre-spawn-environ``), which eigenflow's local workers do without (:func:`worker_environ`).
DASK_DEFAULT_MALLOC_TRIM_THRESHOLD = 65536


def worker_environ() -> dict:
    """The ``distributed.nanny.pre-spawn-environ`` of eigenflow's local workers: Dask's configured one without
    ``MALLOC_TRIM_THRESHOLD_`` when it holds Dask's default (:data:`DASK_DEFAULT_MALLOC_TRIM_THRESHOLD`; another
    value set by the user is kept).

    Why: setting any glibc malloc threshold turns off glibc's dynamic mmap threshold, so every array above 128 KB
    is a fresh ``mmap`` whose pages fault in again at each allocation. Measured on this machine (1e6 x 32, k = 15,
    a LocalCluster of 2 x 1 workers, the same task on the same worker): the eigensolve took
    16.6-17.6 s with Dask's default against 14.0-15.5 s without it (14.5-14.7 s in the driver process),
    pynndescent's build 13.7-13.9 s against 13.0-13.4 s. The price is that freed heap memory is kept for reuse
    instead of returned at once (bounded by glibc's dynamic trim threshold, at most 64 MB of free heap top).
    """
    import dask

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    if str(env.get("MALLOC_TRIM_THRESHOLD_")) == str(DASK_DEFAULT_MALLOC_TRIM_THRESHOLD):
        del env["MALLOC_TRIM_THRESHOLD_"]
    return env


#: Dask's shipped values of the settings :func:`worker_config` changes, and eigenflow's.
QUIET_WORKER_SETTINGS = {
    "distributed.worker.profile.enabled": (True, False),
    "distributed.admin.tick.interval": ("20ms", "1s"),
}


def worker_config() -> dict:
    """Dask settings of eigenflow's local cluster (its workers, through their Nannies, and its scheduler): each
    of :data:`QUIET_WORKER_SETTINGS` that still holds Dask's shipped value gets eigenflow's. A value other than
    the shipped one is kept; an explicit ``profile.enabled: True`` cannot be told from the default (a cluster of
    one's own, ``--scheduler``, keeps every Dask setting).

    Why: a worker's statistical profiler samples every thread's stack every 10 ms and its event loop ticks every
    20 ms; each wakes a thread that needs the GIL and a core, beside the kNN build's two numba threads. Measured
    on this machine (1e6 x 32, k = 15, the build in a task of a local worker, interleaved): 13.56-13.66 s with
    both and 4,200-4,800 involuntary context switches of the worker process; 12.67-13.23 s and 1,100-1,300
    without them (a plain process: 12.2-13.0 s and ~430). The dashboard's profile page stays empty; the tick
    still detects an event loop blocked for longer than ``distributed.admin.tick.limit`` (3 s).
    """
    import dask

    return {key: ours for key, (shipped, ours) in QUIET_WORKER_SETTINGS.items()
            if str(dask.config.get(key)) == str(shipped)}


#: The preload of the test session's fork server (:func:`fork_warm_workers`): Dask's own preload, then the compile.
WARM_MODULES = ("distributed", "numpy", "eigenflow.tasks.worker_preload")

_SERVER_STARTED = False


def _launch_fork_server(preload: tuple[str, ...], environ: dict | None = None) -> bool:
    """Launch multiprocessing's fork server importing ``preload``, with :func:`worker_environ` and ``environ``
    added to this process's environment (the server's only: this process's is restored); returns at once, the
    server importing in the background. False, and nothing launched, where multiprocessing has no fork server
    (Windows).

    The server is launched with SIGINT blocked: multiprocessing's server ignores SIGINT only once its preload is
    imported, and a Ctrl-C in the terminal during those seconds (the first 2-6 s of a CLI run) killed it with a
    ``KeyboardInterrupt`` traceback, then every local worker's start with an ``EOFError`` one, and the run waited
    for its forced exit. The calling thread's signal mask passes to the server (multiprocessing's resource
    tracker, which unblocks SIGINT after it launches itself, is launched first); this process loses no signal:
    one that arrives meanwhile stays pending, and its handler runs once the mask is restored. The workers, forks
    of the server, keep SIGINT blocked, as they want it (:mod:`tasks.worker_signals` ignores it).
    """
    import multiprocessing
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker
    import signal

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
    multiprocessing.resource_tracker.ensure_running()
    saved = dict(os.environ)
    os.environ.update({key: str(value) for key, value in {**worker_environ(), **(environ or {})}.items()})
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.environ.clear()
        os.environ.update(saved)
    return True


def start_import_server() -> None:
    """Launch the fork server of the CLI's local workers, importing :data:`IMPORTS_MODULE` in the background, with
    the workers' environment. Call it once, before this process starts any thread. Where multiprocessing has no
    fork server (Windows), nothing is launched and the local workers are spawned as Dask does by default."""
    global _SERVER_STARTED
    _SERVER_STARTED = _launch_fork_server((IMPORTS_MODULE,))


def fork_warm_workers(dtypes: tuple[str, ...] = ("float32",)) -> None:
    """Start this process's local Dask worker processes by forking one server that has pynndescent compiled.

    Sets Dask's ``distributed.worker.multiprocessing-method`` to ``"forkserver"`` and launches the server with
    :data:`WARM_MODULES` as its preload (:mod:`tasks.worker_preload` compiles pynndescent once for X of
    ``dtypes``: the stores' X is float32 unless ingested with ``dtype="float64"``; and selects numba's fork-safe
    ``workqueue`` threading layer): its compile runs in the background from now on, and the first local worker
    waits for it. Every local worker started afterwards in this process (new clusters, workers a Nanny restarts)
    is a fork of it and needs no compile: a 4-worker cluster was warm in 37 s instead of 81 s.

    The price: numba's ``workqueue`` layer ran pynndescent's 1e6 build 15-20 % slower than OpenMP (18.9-19.3 s
    against 14.6-16.9 s, interleaved processes), so it is not used for the clusters that do the real work
    (the CLI's workers are forks of a server that only imports: :func:`start_import_server`).

    For processes that start many local clusters (the test suite); it changes how every later local worker of
    this process is started, so call it once, at start-up, before any cluster (a server already running keeps
    what it imported). Workers must keep one thread each (``workqueue`` refuses concurrent entry). The workers
    inherit the server's environment: :func:`worker_environ` added to this process's at the call (variables set
    later, such as credentials or an S3 endpoint, do not reach them). Raises :class:`RuntimeError` where
    multiprocessing has no fork server.
    """
    import dask
    from distributed import utils as distributed_utils

    from eigenflow.spectral._validation import check_choice
    from eigenflow.tasks._worker import WARM_DTYPES_ENV

    for dtype in dtypes:
        check_choice("dtypes", dtype, ("float32", "float64"))
    if not _launch_fork_server(WARM_MODULES, {WARM_DTYPES_ENV: ",".join(dtypes)}):
        raise RuntimeError("fork_warm_workers needs multiprocessing's fork server, which this platform lacks")
    distributed_utils._forkserver_preload_set = True  # noqa: SLF001  (the server has its preload: see _forked)
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})


@contextmanager
def _forked() -> Iterator[None]:
    import dask
    from distributed import utils as distributed_utils

    # Dask's first forkserver context would import its own preload list here (pandas among it) and set it on a
    # server that already runs: skipped, the server has its preload
    distributed_utils._forkserver_preload_set = True  # noqa: SLF001
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        yield


def forked_workers() -> ContextManager[None]:
    """The block in which this process's local workers (and those their Nannies restart) are forks of the server
    that :func:`start_import_server` launched; Dask's configured start method when it was not called."""
    return _forked() if _SERVER_STARTED else nullcontext()
