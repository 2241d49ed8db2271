"""The Dask client of a flow run: a fresh ``LocalCluster`` by default, or an existing scheduler.

The flow owns the client; tasks run in the flow process (Prefect's default task runner) and submit their
per-chunk work to this client (``distributed.get_client()`` finds it). This avoids the prefect-dask pitfall
of every Dask worker starting its own temporary Prefect server (STACK.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from distributed import Client, LocalCluster

from eigenflow.flows._local_workers import (  # noqa: F401 - SCHEDULER_ENV and the workers' environment: cluster's API
    DASK_DEFAULT_MALLOC_TRIM_THRESHOLD,
    SCHEDULER_ENV,
    forked_workers,
    worker_config,
    worker_environ,
)

#: Local default: 2 worker processes x 1 thread, the measured best on this 2-core machine (STACK.md:
#: keep workers x threads <= cores; more threads oversubscribe numba's kernels).
DEFAULT_N_WORKERS = 2
DEFAULT_THREADS_PER_WORKER = 1
#: Preloads of eigenflow's local workers: they ignore the stop signals sent to the CLI's process group, and a
#: worker that has closed ends its process without the interpreter's teardown.
WORKER_PRELOADS = ("eigenflow.tasks.worker_signals", "eigenflow.tasks.worker_exit")
#: Preload of a local cluster asked to warm up at start: the :data:`BUILDER_NAME` worker begins its warm-up.
WARM_UP_PRELOAD = "eigenflow.tasks.warm_up_preload"
#: The name of the local worker that builds a kNN index begun before the flow (LocalCluster names its workers
#: 0, 1, ...): :func:`flows._warm_up.builder_worker` picks it.
BUILDER_NAME = 0


@contextmanager
def local_cluster(n_workers: int = DEFAULT_N_WORKERS,
                  threads_per_worker: int = DEFAULT_THREADS_PER_WORKER,
                  warm_up: tuple[str, ...] = ()) -> Iterator[LocalCluster]:
    """eigenflow's local Dask cluster: ``n_workers`` worker processes (Nannies restart a dead one) of
    ``threads_per_worker`` threads, dashboard on a free port, workers started with :func:`worker_environ` and
    :func:`worker_config` (the latter the scheduler's too), forked from the CLI's import server when it runs
    (:func:`flows._local_workers.forked_workers`), ignoring SIGINT / SIGTERM sent to the process group
    (:mod:`tasks.worker_signals`: the flow process stops them), each ending its process without the
    interpreter's teardown once it has closed (:mod:`tasks.worker_exit`).

    ``warm_up``: X dtypes whose NN-descent warm-up the :data:`BUILDER_NAME` worker begins as it starts
    (:mod:`tasks.warm_up_preload`), before the cluster is up."""
    import dask

    from eigenflow.tasks.warm_up_preload import WARM_AT_START_ENV, warm_at_start_value

    environ, preload = worker_environ(), list(WORKER_PRELOADS)
    if warm_up:
        environ[WARM_AT_START_ENV] = warm_at_start_value(BUILDER_NAME, tuple(warm_up))
        preload.append(WARM_UP_PRELOAD)
    with forked_workers():
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ, **worker_config()}):
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                                   dashboard_address=":0",  # ":0": a free port; None would still bind 8787
                                   preload=preload)
        with cluster:
            yield cluster


def resolve_scheduler(scheduler: str | None) -> str | None:
    """The scheduler address to use: ``scheduler`` if given, else ``$EIGENFLOW_SCHEDULER``, else None."""
    if scheduler:
        return scheduler
    return os.environ.get(SCHEDULER_ENV) or None


class WorkerCodeError(RuntimeError):
    """The workers of a Dask cluster run other eigenflow code than the flow process (:func:`check_worker_code`)."""


def check_worker_code(client: Client) -> str:
    """Refuse a cluster whose workers run other eigenflow code than this process; returns the code digest.

    A worker that cannot load a task's function (another eigenflow version: a function renamed, moved or
    missing) drops the task with an error in its own log only, and the flow would wait for it forever. So the
    flow compares :func:`tasks._worker.code_digest` here and on every worker of an existing scheduler when it
    connects (workers that join later are not checked).

    Raises
    ------
    WorkerCodeError
        Naming the workers whose digest differs (or that could not compute one) and both digests.
    """
    from eigenflow.tasks._worker import code_digest

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
def dask_client(
    scheduler: str | None = None,
    *,
    n_workers: int = DEFAULT_N_WORKERS,
    threads_per_worker: int = DEFAULT_THREADS_PER_WORKER,
    paused_timeout: float | None = None,
    warm_up: tuple[str, ...] = (),
) -> Iterator[Client]:
    """A Dask client for the duration of a flow run, closed (with its local cluster) on exit.

    While it is open, :func:`flows.paused_workers.watch_paused_workers` fails the run's pending work when a
    worker stays paused for memory (``paused_timeout`` seconds, None: ``$EIGENFLOW_PAUSED_WORKER_TIMEOUT`` or
    120 s) with nothing executing, instead of letting the flow wait forever.

    Parameters
    ----------
    scheduler : str or None
        Address of an existing scheduler (its workers must run the same eigenflow code:
        :func:`check_worker_code`, else :class:`WorkerCodeError`); when None, ``$EIGENFLOW_SCHEDULER`` is used
        if set, else a :func:`local_cluster` of ``n_workers`` x ``threads_per_worker`` is started.
    n_workers, threads_per_worker : int
        Size of the local cluster (ignored with a scheduler address).
    warm_up : tuple of str
        X dtypes whose NN-descent warm-up a local cluster's builder worker begins as it starts
        (:func:`local_cluster`; ignored with a scheduler address).

    Yields
    ------
    client : distributed.Client
        Also the default client of the process, so tasks reach it with ``distributed.get_client()``.
    """
    from eigenflow.flows.paused_workers import resolve_paused_timeout, watch_paused_workers

    timeout = resolve_paused_timeout(paused_timeout)  # a bad value fails before any cluster starts
    address = resolve_scheduler(scheduler)
    if address is not None:
        with Client(address, set_as_default=True) as client:
            check_worker_code(client)
            with watch_paused_workers(client, timeout):
                yield client
        return
    with local_cluster(n_workers, threads_per_worker, warm_up) as cluster, \
            Client(cluster, set_as_default=True) as client, watch_paused_workers(client, timeout):
        yield client


class PendingClient:
    """A Dask client being started in a background thread (:func:`dask_client_in_background`).

    :meth:`result` waits for it; :attr:`seconds` is how long the start took (cluster + client), :attr:`waited`
    how long callers of :meth:`result` were blocked in it; :meth:`close` closes it (once).
    """

    def __init__(self, future, started: float, key: tuple | None = None, release: Callable[[], None] | None = None,
                 begin_release: Callable[[], None] | None = None):
        self._future = future
        self._started = started
        self._release = release
        self._begin_release = begin_release
        self.key = key
        self.seconds: float | None = None
        self.waited = 0.0
        self.adopted = False

    def result(self) -> Client:
        """The client, once started (re-raises a start failure)."""
        t0 = time.perf_counter()
        try:
            return self._future.result()
        finally:
            self.waited += time.perf_counter() - t0

    def done(self) -> bool:
        """True once the client is started (or failed to start)."""
        return self._future.done() and self._future.exception() is None

    def start_failed(self) -> bool:
        """True once the client's start has failed."""
        return self._future.done() and self._future.exception() is not None

    def when_ready(self, fn: Callable[[Client], None]) -> None:
        """Call ``fn(client)`` once the client is started: at once if it is, else in the thread that started it
        (not called if the start failed; ``fn`` handles its own errors)."""
        def call(future) -> None:
            if future.exception() is None:
                fn(future.result())

        self._future.add_done_callback(call)

    def begin_close(self) -> None:
        """Begin closing the client and its local cluster in the thread that holds them, and return at once (a
        flow whose work on the cluster has ended: its own end overlaps the workers' shutdown); :meth:`close`
        waits for it. Does nothing for a client this object does not own."""
        begin, self._begin_release = self._begin_release, None
        if begin is not None:
            begin()

    def close(self) -> None:
        """Close the client and its local cluster (waits for them); later calls do nothing."""
        release, self._release = self._release, None
        if release is not None:
            release()


class ReadyClient(PendingClient):
    """A :class:`PendingClient` for a client that is already running (start time 0)."""

    def __init__(self, client: Client):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result(client)
        super().__init__(future, 0.0)
        self.seconds = 0.0


#: The client started by :func:`client_started_early` for the flow run called inside its block.
_EARLY: ContextVar[PendingClient | None] = ContextVar("eigenflow_early_client", default=None)


def _start_in_background(scheduler: str | None, n_workers: int, threads_per_worker: int,
                         warm_up: tuple[str, ...] = ()) -> PendingClient:
    """:func:`dask_client` entered in a daemon thread, which holds it open until the result's :meth:`close`."""
    import threading
    from concurrent.futures import Future

    future: Future = Future()
    release = threading.Event()

    def hold() -> None:
        try:
            with dask_client(scheduler, n_workers=n_workers, threads_per_worker=threads_per_worker,
                             warm_up=warm_up) as client:
                pending.seconds = time.perf_counter() - pending._started
                future.set_result(client)
                release.wait()
        except BaseException as exc:  # reported to the caller by pending.result()
            if not future.done():
                future.set_exception(exc)

    thread = threading.Thread(target=hold, name="eigenflow-dask-client", daemon=True)

    def close() -> None:
        release.set()
        thread.join()

    pending = PendingClient(future, time.perf_counter(), key=(scheduler, n_workers, threads_per_worker), release=close,
                            begin_release=release.set)
    thread.start()
    return pending


@contextmanager
def client_started_early(
    scheduler: str | None = None,
    *,
    n_workers: int = DEFAULT_N_WORKERS,
    threads_per_worker: int = DEFAULT_THREADS_PER_WORKER,
    warm_up: tuple[str, ...] = (),
) -> Iterator[PendingClient]:
    """Start a flow's Dask client now, in the background, for the flow run called inside this block (a local
    cluster's builder worker warming up for the X dtypes ``warm_up`` as it starts: :func:`local_cluster`).

    The CLI enters it before it calls a flow, so that the cluster starts while Prefect starts the flow run
    (without ``PREFECT_API_URL``, Prefect's temporary API server: seconds). The flow's
    :func:`dask_client_in_background` with the same arguments takes this client over (and closes it at the
    run's end); if no flow takes it (e.g. the run fails before it needs one), it is closed at the block's exit.
    """
    pending = _start_in_background(scheduler, n_workers, threads_per_worker, warm_up)
    token = _EARLY.set(pending)
    try:
        yield pending
    finally:
        _EARLY.reset(token)
        pending.close()


def _take_early_client(key: tuple) -> PendingClient | None:
    pending = _EARLY.get()
    if pending is None or pending.adopted or pending.key != key:
        return None
    pending.adopted = True
    return pending


@contextmanager
def dask_client_in_background(
    scheduler: str | None = None,
    *,
    n_workers: int = DEFAULT_N_WORKERS,
    threads_per_worker: int = DEFAULT_THREADS_PER_WORKER,
) -> Iterator[PendingClient]:
    """Like :func:`dask_client`, but the start overlaps the caller's work until ``pending.result()``.

    Starting a local cluster of worker processes takes 3 s on an idle 2-core machine (much more when it is
    busy); the flows start it first and need it only at their first per-chunk stage. A client the caller
    started earlier with the same arguments (:func:`client_started_early`) is used instead of a new one. Either
    is closed at the block's exit.
    """
    key = (scheduler, n_workers, threads_per_worker)
    pending = _take_early_client(key) or _start_in_background(*key)
    try:
        yield pending
    finally:
        pending.close()


def scheduler_address(pending: PendingClient) -> str:
    """Wait for the flow's cluster and return its scheduler address (for tasks that submit per-chunk work).

    The ingest waits for it so that every chunk is ingested as Dask work (a local cluster starts in ~1.3 s on
    the idle 2-core machine).
    """
    return pending.result().scheduler.address
