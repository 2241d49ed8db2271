"""How the local workers start (:mod:`flows._local_workers`): forked from a server that imported their modules (a
fresh interpreter, as the fork server is process-global, then a real local cluster), and their Dask settings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eigenflow.flows._launch import names_a_scheduler
from tests.helpers import REPO_ROOT

CHILD = r"""
import json, os, sys
from eigenflow.flows import _local_workers
from eigenflow.flows._local_workers import worker_environ
launcher, preload = sys.argv[1], sys.argv[2]
before = dict(os.environ)
getattr(_local_workers, launcher)()
restored = dict(os.environ) == before
from distributed import Client
from eigenflow.flows.cluster import local_cluster

def inside():
    import os, sys
    from threadpoolctl import threadpool_info
    return {"parent": os.getppid(), "imported": preload in sys.modules,
            "blas_threads": sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}),
            "pynndescent": "pynndescent" in sys.modules, "env": {k: os.environ.get(k) for k in sys.argv[3:]}}

with local_cluster(n_workers=1) as cluster, Client(cluster) as client:
    seen = client.submit(inside, pure=False).result()
import multiprocessing.forkserver as fs
print(json.dumps({"restored": restored, "here": os.getpid(), "server": fs._forkserver._forkserver_pid,
                  "expected_env": {k: str(v) for k, v in worker_environ().items()}, **seen}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multiprocessing's fork server is POSIX's")
@pytest.mark.parametrize(("launcher", "preload"), [("start_import_server", "eigenflow.tasks.worker_imports"),
                                                   ("fork_warm_workers", "eigenflow.tasks.worker_preload")])
def test_local_workers_are_forks_of_the_server_with_their_modules_and_environment(launcher, preload):
    """The CLI's server (imports only) and the test session's (NN-descent compiled) are launched alike."""
    from eigenflow.flows._local_workers import worker_environ

    names = sorted(worker_environ())
    out = subprocess.run([sys.executable, "-c", CHILD, launcher, preload, *names], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["restored"]  # the caller's environment is its own again
    assert seen["parent"] == seen["server"] != seen["here"]  # a fork of the server, not a child of the caller
    assert seen["imported"] and seen["pynndescent"]  # imported by the server before the fork
    assert seen["env"] == seen["expected_env"]  # what Dask sets before it spawns a worker (BLAS threads, ...)
    if "OPENBLAS_NUM_THREADS" in seen["expected_env"]:  # read when numpy loaded BLAS, in the server
        assert seen["blas_threads"] == [int(seen["expected_env"]["OPENBLAS_NUM_THREADS"])]


def test_a_named_scheduler_starts_no_import_server(monkeypatch):
    monkeypatch.delenv("EIGENFLOW_SCHEDULER", raising=False)
    assert not names_a_scheduler(["embed", "X.npy", "s.zarr"])
    assert names_a_scheduler(["embed", "X.npy", "s.zarr", "--scheduler", "tcp://127.0.0.1:8786"])
    assert names_a_scheduler(["embed", "X.npy", "s.zarr", "--scheduler=tcp://127.0.0.1:8786"])
    monkeypatch.setenv("EIGENFLOW_SCHEDULER", "tcp://127.0.0.1:8786")
    assert names_a_scheduler(["embed", "X.npy", "s.zarr"])


def test_local_workers_get_the_quiet_settings_unless_the_user_chose_others():
    """Dask's shipped profiler and tick settings are replaced in the cluster's workers and scheduler; a value the
    user set is kept."""
    import dask
    from distributed import Client

    from eigenflow.flows._local_workers import QUIET_WORKER_SETTINGS, worker_config
    from eigenflow.flows.cluster import local_cluster

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
