"""eigenflow's local Dask cluster (:func:`flows.cluster.local_cluster`): its workers run without Dask's default
``MALLOC_TRIM_THRESHOLD_`` (which turns off glibc's dynamic mmap threshold) and keep a value the user configured,
run without Dask's sampling profiler, and are not stopped by the signals of a Ctrl-C."""

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


def test_local_workers_get_the_quiet_settings_unless_the_user_chose_others():
    """Dask's shipped profiler and tick settings are replaced in the cluster's workers and scheduler; a value the
    user set is kept."""
    from eigenflow.flows.cluster import QUIET_WORKER_SETTINGS, worker_config

    assert worker_config() == {key: ours for key, (_, ours) in QUIET_WORKER_SETTINGS.items()}
    with dask.config.set({"distributed.worker.profile.enabled": True, "distributed.admin.tick.interval": "50ms"}):
        assert worker_config() == {"distributed.worker.profile.enabled": False}  # the user's 50 ms stays
    with local_cluster(n_workers=1) as cluster, Client(cluster) as client:
        seen = client.run(lambda dask_worker: (sorted(dask_worker.periodic_callbacks),
                                               dask_worker.periodic_callbacks["tick"].callback_time))
        scheduler_tick = cluster.scheduler.periodic_callbacks["tick"].callback_time
    [(callbacks, tick)] = seen.values()
    assert "profile" not in callbacks and "tick" in callbacks  # no sampling profiler; the tick, every second
    assert tick == scheduler_tick == 1000


def _blocked_signals(kind: str = "SigBlk") -> tuple[int, set[int]]:
    """``(pid, signal numbers blocked (``kind="SigBlk"``) or ignored (``"SigIgn"``) in this process's main
    thread)`` from ``/proc/self/status``."""
    import os

    mask = next(int(line.split()[1], 16) for line in open("/proc/self/status") if line.startswith(f"{kind}:"))
    return os.getpid(), {n for n in range(1, 65) if mask >> (n - 1) & 1}


def test_local_workers_are_not_stopped_by_the_signals_of_a_ctrl_c():
    """The workers ignore SIGINT and SIGTERM (a Ctrl-C reaches the CLI's whole process group; the flow process stops
    them): both real signals sent to a worker leave it running its tasks, and this process's own mask is as it
    was after the cluster's start."""
    import signal
    import sys
    import time

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    before = _blocked_signals()[1]
    with local_cluster(1, 1) as cluster, Client(cluster, set_as_default=False) as client:
        [(pid, ignored)] = client.run(_blocked_signals, "SigIgn").values()
        assert {signal.SIGINT, signal.SIGTERM} <= ignored
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.5)
        assert client.submit(sum, [1, 2], pure=False).result(timeout=30) == 3
        assert [p for p, _ in client.run(_blocked_signals).values()] == [pid]  # the same worker process
    assert _blocked_signals()[1] == before
