"""Killing a Dask worker during a stage leaves a run that completes with the same result.

The heavy stages run as Dask tasks on the workers (:func:`tasks.dask_calls.run_on_worker`) and the write-back as one
task per chunk. Each test starts a real ``LocalCluster`` with Nannies, runs ``embed`` against it, and SIGKILLs the
worker process that is executing the stage's task (seen in that worker's ``executing`` set): the eigensolve in the
default run, the write-back and the kNN build as slow tests. The scheduler runs
the task again on the other worker, the Nanny restarts the killed one, and the embedding equals the one of an
uninterrupted run bit for bit. Each test also checks that the kill did hit the task: the scheduler sent the
task to a worker at least twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.embedding_io import read_embedding
from eigenflow.storage.manifest import read_manifest
from tests.helpers import local_worker_processes

N_POINTS = 6000
COMMON = dict(holdout=0.2, chunk_rows=500, random_state=0)
EXACT = {"knn_method": "exact", "n_neighbors": 10}
NNDESCENT = {"knn_method": "nndescent", "n_neighbors": 10}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill")
    X = make_swiss_roll_lifted(N_POINTS, n_features=32, random_state=0)[0]
    np.save(d / "X.npy", X.astype(np.float32))
    return d


def _cluster():
    from distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")


def _reference(data, params: dict, name: str) -> np.ndarray:
    from eigenflow.flows.embed import embed

    with _cluster() as cluster:
        summary = embed(str(data / "X.npy"), str(data / f"{name}.zarr"), params=params,
                        scheduler=cluster.scheduler_address, **COMMON)
    return read_embedding(str(data / f"{name}.zarr"), summary["run"])


class WorkerKiller(threading.Thread):
    """SIGKILLs the worker process that starts executing a task whose key matches ``is_target(key)``."""

    def __init__(self, address: str, is_target, timeout: float = 240.0):
        super().__init__(daemon=True)
        self.address, self.is_target, self.timeout = address, is_target, timeout
        self.killed: tuple[str, str] | None = None  # (worker address, task key)

    def run(self) -> None:
        from distributed import Client

        with Client(self.address, set_as_default=False) as client:
            deadline = time.monotonic() + self.timeout
            while self.killed is None and time.monotonic() < deadline:
                try:
                    executing = client.run(_executing_keys)
                except Exception:  # noqa: BLE001 - a worker is restarting: ask again
                    time.sleep(0.05)
                    continue
                for worker, (pid, keys) in executing.items():
                    hit = [k for k in keys if self.is_target(str(k))]
                    if hit:
                        os.kill(pid, signal.SIGKILL)
                        self.killed = (worker, str(hit[0]))
                        break
                else:
                    time.sleep(0.01)


def _executing_keys(dask_worker) -> tuple[int, list]:
    return os.getpid(), [ts.key for ts in dask_worker.state.executing]


def _times_sent_to_a_worker(address: str, key: str) -> int:
    """How many times the scheduler sent ``key`` to a worker (``processing`` transitions of its story)."""
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        story = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.story(key))
    return sum(1 for entry in story if entry[2] == "processing")


def _stage_task(stage: str):
    """``run -> (key -> bool)``: the Dask task of a stage body (key ``<stage>-<run>-<hex>``)."""
    return lambda run: (lambda key: key.startswith(f"{stage}-{run}-"))


def _chunk_task(run: str):
    """A write-back chunk task (key ``embed-points-<start>-<hex>``)."""
    return lambda key: key.startswith("embed-points-") and key.split("-")[2].isdigit()


def _embed_killing(data, params: dict, target, name: str) -> tuple[np.ndarray, dict, tuple[str, str], int]:
    """Run embed while a :class:`WorkerKiller` waits for a task matching ``target(run)``; returns the embedding,
    the stages' info, the (worker, key) killed and how many times that key was sent to a worker."""
    from eigenflow.flows.embed import embed

    run = f"killed-{name}"
    with _cluster() as cluster:
        killer = WorkerKiller(cluster.scheduler_address, target(run))
        killer.start()
        summary = embed(str(data / "X.npy"), str(data / f"{name}.zarr"), params=params,
                        scheduler=cluster.scheduler_address, run_name=run, **COMMON)
        killer.join(timeout=5)
        assert killer.killed is not None, f"no task of stage {name!r} was seen executing"
        sent = _times_sent_to_a_worker(cluster.scheduler_address, killer.killed[1])
        cluster.wait_for_workers(2, timeout=120)  # the Nanny restarted the killed worker
    assert summary["status"] == "completed"
    infos = {s.name: s.info for s in read_manifest(str(data / f"{name}.zarr"), run).stages}
    return read_embedding(str(data / f"{name}.zarr"), run), infos, killer.killed, sent


@pytest.fixture(scope="module")
def exact_reference(data):
    return _reference(data, EXACT, "reference-exact")


def test_worker_killed_during_the_eigensolve(data, exact_reference):
    Z, infos, (worker, _), sent = _embed_killing(data, EXACT, _stage_task("eigensolve"), "eigensolve")
    assert sent >= 2 and infos["eigensolve"]["worker"] != worker  # rerun on the other worker
    np.testing.assert_array_equal(Z, exact_reference)


@pytest.mark.slow
def test_worker_killed_during_the_write_back(data, exact_reference):
    Z, infos, _, sent = _embed_killing(data, EXACT, _chunk_task, "write-back")
    assert sent >= 2
    assert infos["embed-points"]["n_chunks"] == N_POINTS // COMMON["chunk_rows"]
    np.testing.assert_array_equal(Z, exact_reference)


@pytest.mark.slow
def test_worker_killed_during_the_knn_build(data):
    reference = _reference(data, NNDESCENT, "reference-nndescent")
    Z, infos, (worker, _), sent = _embed_killing(data, NNDESCENT, _stage_task("knn-index"), "knn")
    assert sent >= 2
    np.testing.assert_array_equal(Z, reference)


def test_the_warm_up_results_survive_a_killed_worker():
    """The per-worker warm-up tasks of the flow (:func:`tasks.warm_up.warm_workers`) hold their result on their
    worker. When that worker dies the scheduler computes the result again; pinned to the dead worker's address it
    would wait forever, and the flow with it. It runs on another worker."""
    from distributed import Client, wait

    from eigenflow.tasks.warm_up import warm_workers

    with _cluster() as cluster, Client(cluster) as client:  # the default client: distributed.wait uses it
        warm = warm_workers(client, "float32")
        client.gather(warm)
        holder = next(iter(client.who_has(warm[0]).values()))[0]
        pid = client.run(os.getpid, workers=[holder])[holder]
        os.kill(pid, signal.SIGKILL)
        done, pending = wait([client.submit(lambda s: s, f, pure=False) for f in warm], timeout=90)
        assert not pending, "a compile task of the killed worker was never computed again"
        assert len(set(client.gather(warm))) >= 1 and client.who_has(warm[0])[warm[0].key][0] != holder


@pytest.mark.slow
def test_worker_killed_during_the_clis_knn_build(tmp_path):
    """``eigenflow embed`` builds the kNN index on a worker of its local cluster. SIGKILL that worker while it builds
    (the only worker process running two threads at once, seen from its CPU time): the scheduler builds again on
    the other worker, the flow takes that build, and the graph equals a build of the stored X with the run's
    seed."""
    import subprocess
    import sys
    from pathlib import Path

    import psutil

    from eigenflow.spectral._validation import check_random_state
    from eigenflow.spectral.neighbours.index import KNNIndex
    from eigenflow.storage.arrays import read_X
    from eigenflow.storage.graph_io import read_knn

    X = make_swiss_roll_lifted(150_000, n_features=32, random_state=0)[0].astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    script = Path(sys.executable).with_name("eigenflow")
    cli = subprocess.Popen([str(script), "embed", "X.npy", "s.zarr", "-p", "knn_method=nndescent"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, seen = None, {}
    deadline = time.monotonic() + 120
    while killed is None and cli.poll() is None and time.monotonic() < deadline:
        for worker in local_worker_processes(cli.pid):
            try:
                cpu = sum(worker.cpu_times()[:2])
            except psutil.NoSuchProcess:
                continue
            before = seen.get(worker.pid)
            seen[worker.pid] = (time.monotonic(), cpu)
            if before is not None and (cpu - before[1]) / (time.monotonic() - before[0]) > 1.5:
                worker.send_signal(signal.SIGKILL)
                killed = worker.pid
                break
        time.sleep(0.1)
    out, err = cli.communicate(timeout=600)
    assert killed is not None, "no worker was seen building"
    assert cli.returncode == 0, err
    store = str(tmp_path / "s.zarr")
    indices, distances = read_knn(store)
    expected = KNNIndex.build(read_X(store), 15, method="nndescent", random_state=check_random_state(0)).neighbor_graph()
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(distances, expected[1])
