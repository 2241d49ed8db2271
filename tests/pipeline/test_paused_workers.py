"""A worker paused for memory fails the run with a clear error instead of a silent hang.

The clusters are real worker processes. Stall: a ``LocalCluster`` of two workers; when the sharded eigensolve has
built the operator, the pause threshold of a worker holding an operator shard is lowered to 1 % of its memory limit,
so its memory monitor pauses it (within 0.1 s) while it holds the shard, as the 1e7 benchmark's worker paused at 80
% of 5.5 GB. The eigensolve's tasks are pinned to the shards' workers, so the run stalls: the watch of
:mod:`flows.paused_workers` must cancel it with :class:`ClusterMemoryError` naming the worker, and the manifest must
record it. Work-around: a worker started as its own process (``python -m distributed.cli.dask_worker``) with a 1 %
threshold is paused from its first heartbeat and holds nothing; the scheduler gives the shards to the healthy
worker, and the same short timeout must let the sharded and the single-process runs complete.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from eigenflow.flows.paused_workers import (
    CANCEL_REASON, DEFAULT_PAUSED_TIMEOUT, PAUSED_TIMEOUT_ENV, ClusterMemoryError, resolve_paused_timeout,
    stall_error, stalled_workers,
)
from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.spectral.errors import ParameterError
from eigenflow.storage.manifest import read_manifest

PARAMS = {"n_neighbors": 10, "n_components": 2}
TIMEOUT = 3.0


def _snapshot(paused: bool = True, waiting: int = 2, processing: int = 0, executing: int = 0,
              transitions: int = 10) -> dict:
    workers = {"tcp://a:1": {"name": "a", "memory": 2**29, "memory_limit": 2**30}} if paused else {}
    return {"transitions": transitions, "waiting": waiting, "processing": processing, "executing": executing,
            "paused": workers}


def test_a_cluster_is_stalled_only_when_paused_idle_and_awaited():
    stalled = _snapshot()
    assert list(stalled_workers(stalled, _snapshot(), waiting=3)) == ["tcp://a:1"]
    assert stalled_workers(stalled, None, waiting=3) == {}  # the first poll: no progress measured yet
    assert stalled_workers(stalled, _snapshot(transitions=9), waiting=3) == {}  # tasks changed state
    assert stalled_workers(stalled, _snapshot(), waiting=0) == {}  # the flow is not waiting for the cluster
    assert stalled_workers(_snapshot(processing=1), _snapshot(), waiting=3) == {}  # work goes on elsewhere
    assert stalled_workers(_snapshot(executing=1), _snapshot(), waiting=3) == {}  # its running task may free memory
    assert stalled_workers(_snapshot(waiting=0), _snapshot(), waiting=3) == {}  # no task waits for it
    assert stalled_workers(_snapshot(paused=False), _snapshot(), waiting=3) == {}


def test_only_the_watch_s_cancellations_become_cluster_memory_errors():
    from distributed.client import CancelledFuturesGroup, FutureCancelledError, FuturesCancelledError

    ours, other = FutureCancelledError("k", CANCEL_REASON, "worker w paused"), FutureCancelledError("k", "user", "x")
    assert str(stall_error(ours)) == "worker w paused"  # from Future.result / Client.gather
    from_wait = FuturesCancelledError([CancelledFuturesGroup([other], "user"), CancelledFuturesGroup([ours], "x")])
    assert str(stall_error(from_wait)) == "worker w paused"  # from distributed.wait
    try:
        try:
            raise ours
        except FutureCancelledError as exc:
            raise RuntimeError("a stage failed") from exc
    except RuntimeError as wrapped:
        assert isinstance(stall_error(wrapped), ClusterMemoryError)
    assert stall_error(other) is None and stall_error(ValueError("x")) is None


def test_the_timeout_is_checked(monkeypatch):
    monkeypatch.delenv(PAUSED_TIMEOUT_ENV, raising=False)
    assert resolve_paused_timeout(None) == DEFAULT_PAUSED_TIMEOUT
    assert resolve_paused_timeout(2) == 2.0
    with pytest.raises(ParameterError, match=r"paused_timeout must be a real number in \(0.*got -1"):
        resolve_paused_timeout(-1)
    monkeypatch.setenv(PAUSED_TIMEOUT_ENV, "soon")
    with pytest.raises(ParameterError, match=rf"{PAUSED_TIMEOUT_ENV} must be a real number.*'soon'"):
        resolve_paused_timeout(None)
    monkeypatch.setenv(PAUSED_TIMEOUT_ENV, "7.5")
    assert resolve_paused_timeout(None) == 7.5


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("paused")
    X = make_swiss_roll_lifted(2000, n_features=32, random_state=0)[0]
    np.save(d / "X.npy", X.astype(np.float32))
    return d


@pytest.fixture(scope="module")
def cluster_with_a_paused_worker():
    """``(scheduler address, paused worker address)``: one healthy worker, one paused worker process."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        env = dict(os.environ, DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE="0.01")
        proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
                                 "--nthreads", "1", "--memory-limit", "2GB", "--name", "paused-worker",
                                 "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            with Client(cluster.scheduler_address, set_as_default=False) as client:
                client.wait_for_workers(2, timeout=60)
                deadline = time.monotonic() + 30
                while True:
                    workers = client.scheduler_info(n_workers=-1)["workers"]
                    paused = [a for a, w in workers.items() if w["status"] == "paused"]
                    if paused or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                assert paused, "the worker with a 1 % pause threshold never paused"
            yield cluster.scheduler_address, paused[0]
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _set_pause_fraction(fraction: float, dask_worker) -> None:
    dask_worker.memory_manager.memory_pause_fraction = fraction


@pytest.mark.slow
def test_a_run_stalled_on_a_paused_worker_fails_naming_it(prefect_api, data, monkeypatch):
    from distributed import Client, LocalCluster

    from eigenflow.flows.run import stage_events
    from eigenflow.flows.embed import embed

    monkeypatch.setenv(PAUSED_TIMEOUT_ENV, str(TIMEOUT))
    store = str(data / "stalled.zarr")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster.scheduler_address, set_as_default=False) as client:
        address, paused = cluster.scheduler_address, []

        def pause_a_worker_holding_an_operator_shard() -> None:
            while not paused:
                held = client.has_what()
                holders = [w for w, keys in held.items() if any(str(k).startswith("shard_build-") for k in keys)]
                if holders:
                    client.run(_set_pause_fraction, 0.01, workers=holders[:1])
                    paused.append(holders[0])
                time.sleep(0.05)

        def pause_at_the_eigensolve(event: str, stage: str, payload) -> None:
            if (event, stage) == ("start", "eigensolve"):
                threading.Thread(target=pause_a_worker_holding_an_operator_shard, daemon=True).start()

        t0 = time.perf_counter()
        with stage_events(pause_at_the_eigensolve), pytest.raises(ClusterMemoryError) as caught:
            embed(str(data / "X.npy"), store, params=PARAMS, random_state=0, scheduler=address, sharded=True)
        seconds = time.perf_counter() - t0
        (paused,) = paused
        name = client.scheduler_info(n_workers=-1)["workers"][paused]["name"]
    message = str(caught.value)
    print(f"\nstalled run failed after {seconds:.1f} s: {message}")
    assert f"{name} at {paused}" in message
    assert "memory limit" in message and "pause threshold 1% of the limit" in message
    assert "--memory-limit" in message and PAUSED_TIMEOUT_ENV in message
    (run,) = [p.stem for p in (data / "stalled.zarr" / "runs").glob("*.json")]
    manifest = read_manifest(store, run)
    assert manifest.status == "failed"
    assert "ClusterMemoryError" in manifest.error and paused in manifest.error
    assert seconds < 120


@pytest.mark.parametrize("sharded", [pytest.param(True, marks=pytest.mark.slow), False])  # sharded: 11 s, slow
def test_a_paused_worker_that_others_work_around_does_not_fail_the_run(prefect_api, data, sharded,
                                                                      cluster_with_a_paused_worker, monkeypatch):
    from eigenflow.flows.embed import embed

    address, _ = cluster_with_a_paused_worker
    monkeypatch.setenv(PAUSED_TIMEOUT_ENV, str(TIMEOUT))
    result = embed(str(data / "X.npy"), str(data / f"fine-{sharded}.zarr"), params=PARAMS, random_state=0,
                   scheduler=address, sharded=sharded)
    assert result["status"] == "completed"
