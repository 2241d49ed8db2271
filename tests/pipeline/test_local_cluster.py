"""eigenflow's local Dask cluster (:func:`flows.cluster.local_cluster`): its workers run without Dask's default
``MALLOC_TRIM_THRESHOLD_`` (which turns off glibc's dynamic mmap threshold: the 1e6 eigensolve took 16.6-17.6 s
on such a worker against 14.0-15.5 s without it), and keep a value the user configured."""

from __future__ import annotations

import os

import dask
from distributed import Client

from eigenflow.flows.cluster import DASK_DEFAULT_MALLOC_TRIM_THRESHOLD, local_cluster, worker_environ


def test_worker_environ_drops_only_dasks_default_trim_threshold():
    default = dask.config.get("distributed.nanny.pre-spawn-environ")
    assert str(default["MALLOC_TRIM_THRESHOLD_"]) == str(DASK_DEFAULT_MALLOC_TRIM_THRESHOLD)  # Dask's default today
    env = worker_environ()
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    assert env == {k: v for k, v in default.items() if k != "MALLOC_TRIM_THRESHOLD_"}  # the thread caps stay
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {**default, "MALLOC_TRIM_THRESHOLD_": 131072}}):
        assert worker_environ()["MALLOC_TRIM_THRESHOLD_"] == 131072  # a user's own value is theirs


def _environ(*names):
    return {name: os.environ.get(name) for name in names}


def test_local_cluster_workers_start_without_the_trim_threshold(monkeypatch):
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)  # an earlier Dask cluster of this process sets it
    with local_cluster(1, 1) as cluster, Client(cluster, set_as_default=False) as client:
        [seen] = client.run(_environ, "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS").values()
    assert seen == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}


def test_a_cluster_closing_in_the_background_is_closed_when_its_block_ends():
    """A flow's client started in the background (:func:`flows.cluster.dask_client_in_background`): the flow begins
    its close once its work on the cluster has ended (``begin_close`` returns at once); at the block's exit the
    client and its local cluster are closed."""
    import time

    from eigenflow.flows.cluster import dask_client_in_background

    with dask_client_in_background(n_workers=1) as pending:
        client = pending.result()
        assert client.submit(sum, [1, 2]).result() == 3
        t0 = time.perf_counter()
        pending.begin_close()
        assert time.perf_counter() - t0 < 0.5  # returns at once; the workers stop in the holding thread
    assert client.status == "closed"
    assert client.cluster.status.name == "closed"
