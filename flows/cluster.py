"""The Dask client of a flow run: a fresh local cluster by default, or an existing scheduler.

The flow owns the client; its Prefect tasks run in the flow process and submit their work to this client. The
local cluster's workers are Dask's own (``LocalCluster``, worker processes started by their Nannies) with three
settings of eigenflow:

- they ignore SIGINT and SIGTERM: a Ctrl-C in the terminal reaches the CLI's whole process group, and the flow
  process alone decides how the run stops (it closes the cluster, which stops the workers with Dask's own close
  and, after its timeout, SIGKILL). They are forks of multiprocessing's fork server (Dask's
  ``distributed.worker.multiprocessing-method: forkserver``), which :func:`launch_fork_server` starts with both
  signals blocked, so that a worker has them blocked from its first instruction, and its preload
  (:mod:`tasks.bodies.worker_preload`) then ignores them;
- :func:`worker_environ`: Dask's ``pre-spawn-environ`` without its glibc malloc threshold, which turns off glibc's
  dynamic mmap threshold and makes every large array fault its pages in again (the eigensolve's arrays above all);
- :func:`worker_config`: the statistical profiler off and a slower event-loop tick, two threads that otherwise
  wake every 10-20 ms beside the kNN build's numba threads.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Environment variable giving the address of an existing Dask scheduler (``tcp://host:port``): no local workers.
SCHEDULER_ENV = "EIGENFLOW_SCHEDULER"
#: Local default: 2 worker processes x 1 thread (workers x threads <= cores; more threads oversubscribe numba).
DEFAULT_N_WORKERS = 2
DEFAULT_THREADS_PER_WORKER = 1
#: Preload of the local workers: stop signals ignored, the note of a task cancelled by the close not printed.
WORKER_PRELOAD = "eigenflow.tasks.bodies.worker_preload"
#: The resource tracker's warning filter (``PYTHONWARNINGS`` of its process): after a stopped run it unlinks the
#: semaphores of the workers' queues that the stop did not close, and would print two lines of warning for them
#: after the run's one line.
TRACKER_WARNINGS = "ignore:resource_tracker:UserWarning"
#: The value of ``MALLOC_TRIM_THRESHOLD_`` that Dask's Nanny sets in its workers by default.
DASK_DEFAULT_MALLOC_TRIM_THRESHOLD = 65536
#: Dask's shipped values of the settings :func:`worker_config` changes, and eigenflow's.
QUIET_WORKER_SETTINGS = {
    "distributed.worker.profile.enabled": (True, False),
    "distributed.admin.tick.interval": ("20ms", "1s"),
}


def worker_environ() -> dict:
    """The ``distributed.nanny.pre-spawn-environ`` of eigenflow's local workers: Dask's configured one without
    ``MALLOC_TRIM_THRESHOLD_`` when it holds Dask's default (a value set by the user is kept)."""
    import dask

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    if str(env.get("MALLOC_TRIM_THRESHOLD_")) == str(DASK_DEFAULT_MALLOC_TRIM_THRESHOLD):
        del env["MALLOC_TRIM_THRESHOLD_"]
    return env


def worker_config() -> dict:
    """Dask settings of eigenflow's local cluster: each of :data:`QUIET_WORKER_SETTINGS` that still holds Dask's
    shipped value gets eigenflow's (a value the user set is kept)."""
    import dask

    return {key: ours for key, (shipped, ours) in QUIET_WORKER_SETTINGS.items()
            if str(dask.config.get(key)) == str(shipped)}


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in the calling thread during the block: the threads and processes started in
    it inherit the mask (see the module docstring). A signal sent to the process meanwhile is delivered to
    another thread's handler (the main thread's), never lost."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextmanager
def environ_set(values: dict) -> Iterator[None]:
    """``os.environ`` with ``values`` (as strings) during the block, as it was after it."""
    saved = dict(os.environ)
    os.environ.update({key: str(value) for key, value in values.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def launch_fork_server() -> str:
    """Launch multiprocessing's fork server, importing Dask's worker and eigenflow's worker preload, with SIGINT and
    SIGTERM blocked (see the module docstring) and the workers' environment (:func:`worker_environ`: what Dask
    sets before it spawns a worker, such as one BLAS thread, which a fork inherits from the server instead);
    returns the start method for Dask's workers: ``"forkserver"``, or Dask's configured one where there is no fork
    server (Windows). Once per process: a server already running keeps what it was launched with. Multiprocessing's
    resource tracker is launched first (its own launch unblocks SIGINT in the calling thread), with
    :data:`TRACKER_WARNINGS`."""
    import multiprocessing
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    import dask
    import distributed  # noqa: F401  (Dask's configuration of its workers: their start method, their environment)

    configured = dask.config.get("distributed.worker.multiprocessing-method")
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return configured
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["distributed", WORKER_PRELOAD])
    warnings = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), TRACKER_WARNINGS)))
    with environ_set({"PYTHONWARNINGS": warnings}):
        multiprocessing.resource_tracker.ensure_running()
    with environ_set(worker_environ()), stop_signals_blocked():
        multiprocessing.forkserver.ensure_running()  # a second call finds it running
    return "forkserver"


@contextmanager
def local_cluster(n_workers: int = DEFAULT_N_WORKERS,
                  threads_per_worker: int = DEFAULT_THREADS_PER_WORKER, **kwargs: Any) -> Iterator[Any]:
    """eigenflow's local Dask cluster (see the module docstring): ``n_workers`` worker processes of
    ``threads_per_worker`` threads, dashboard on a free port; ``kwargs`` go to ``LocalCluster``."""
    import dask
    from distributed import LocalCluster

    method = launch_fork_server()
    with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ(), **worker_config(),
                          "distributed.worker.multiprocessing-method": method}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                               dashboard_address=":0", preload=[WORKER_PRELOAD], **kwargs)
    with cluster:
        yield cluster


def resolve_scheduler(scheduler: str | None) -> str | None:
    """The scheduler address to use: ``scheduler`` if given, else ``$EIGENFLOW_SCHEDULER``, else None."""
    return scheduler or os.environ.get(SCHEDULER_ENV) or None


def keeps_index(keep_index: bool | None, scheduler: str | None) -> bool:
    """Whether a run leaves the model's kNN index on its cluster for the later runs that map rows with the model
    (:mod:`tasks.model_index`): ``keep_index``; None: when the cluster outlives the run, i.e. ``scheduler`` (or
    ``$EIGENFLOW_SCHEDULER``) names an existing one (a run's own local cluster closes with it). A caller that passes
    the address of a cluster it stops after the run (the CLI's) says False."""
    return resolve_scheduler(scheduler) is not None if keep_index is None else bool(keep_index)


class WorkerCodeError(RuntimeError):
    """The workers of a Dask cluster run other eigenflow code than the flow process (:func:`check_worker_code`)."""


def check_worker_code(client: Any) -> str:
    """Refuse a cluster whose workers run other eigenflow code than this process; returns the code digest.

    A worker that cannot load a task's function (another eigenflow version) drops the task with an error in its
    own log only, and the flow would wait for it forever; so the digests (:func:`tasks.bodies.worker.code_digest`) are
    compared on every worker of an existing scheduler when the flow connects.

    Raises
    ------
    WorkerCodeError
        Naming the workers whose digest differs (or that could not compute one) and both digests.
    """
    from eigenflow.tasks.bodies.worker import code_digest

    here = code_digest()
    address = client.scheduler.address
    try:
        there = client.run(code_digest)
    except Exception as exc:  # e.g. a worker without this function: an older eigenflow, or none
        raise WorkerCodeError(
            f"the workers of {address} could not run eigenflow's code check ({type(exc).__name__}: {exc}): they "
            f"run another eigenflow version or none; install the flow's code (digest {here}) on every worker"
        ) from exc
    other = {worker: digest for worker, digest in there.items() if digest != here}
    if other:
        listed = ", ".join(f"{w} ({d})" for w, d in sorted(other.items()))
        raise WorkerCodeError(
            f"{len(other)} of the {len(there)} workers of {address} run other eigenflow code than this flow "
            f"(digest {here}): {listed}; install the same eigenflow on every worker (a worker cannot run a task "
            "whose function it does not have, and the flow would wait for it forever)"
        )
    return here


@contextmanager
def dask_client(scheduler: str | None = None, *, n_workers: int = DEFAULT_N_WORKERS,
                threads_per_worker: int = DEFAULT_THREADS_PER_WORKER,
                paused_timeout: float | None = None) -> Iterator[Any]:
    """A Dask client for the duration of a flow run, closed (with its local cluster) on exit.

    ``scheduler``: the address of an existing scheduler (its workers must run the same eigenflow code,
    :func:`check_worker_code`); None: ``$EIGENFLOW_SCHEDULER`` if set, else a :func:`local_cluster` of
    ``n_workers`` x ``threads_per_worker``. While it is open, :func:`flows.paused_workers.watch_paused_workers`
    fails the run's pending work when a worker stays paused for memory (``paused_timeout`` seconds) with nothing
    executing, instead of letting the flow wait forever. The client is the process's default client.
    """
    from distributed import Client

    from eigenflow.flows.paused_workers import resolve_paused_timeout, watch_paused_workers

    timeout = resolve_paused_timeout(paused_timeout)  # a bad value fails before any cluster starts
    address = resolve_scheduler(scheduler)
    if address is not None:
        with Client(address, set_as_default=True) as client:
            check_worker_code(client)
            with watch_paused_workers(client, timeout):
                yield client
        return
    with local_cluster(n_workers, threads_per_worker) as cluster, \
            Client(cluster, set_as_default=True) as client, watch_paused_workers(client, timeout):
        yield client
