"""A flow refuses a Dask cluster whose workers run other eigenflow code (instead of waiting forever for tasks
those workers cannot load): real worker processes, one of them importing a modified copy of the packages."""

from __future__ import annotations

import shutil
import sys
import textwrap

import pytest

from conftest import REPO_ROOT


def _spawned_cluster(preload: list[str] | None = None):
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):  # a fresh interpreter per worker
        return LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                            preload=preload or [])


def test_workers_running_other_code_are_refused_and_the_same_code_is_accepted(tmp_path):
    from distributed import Client

    from flows.cluster import WorkerCodeError, dask_client
    from tasks._worker import code_digest

    other = tmp_path / "other"
    for package in ("spectral", "storage", "tasks"):
        shutil.copytree(REPO_ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "tasks" / "common.py", "a") as f:
        f.write("\n# another eigenflow version\n")
    preload = tmp_path / "other_first.py"
    preload.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(other)!r})
    """))

    with _spawned_cluster([str(preload)]) as cluster:
        with Client(cluster) as client:  # the worker really imports the copy
            assert all(path.startswith(str(other)) for path in
                       client.run(lambda: sys.modules["tasks"].__file__ if "tasks" in sys.modules
                                  else __import__("tasks").__file__).values())
        with pytest.raises(WorkerCodeError, match=r"1 of the 1 workers .* run other eigenflow code") as info:
            with dask_client(cluster.scheduler_address):
                pytest.fail("the client was handed out")
        assert code_digest() in str(info.value)

    with _spawned_cluster() as cluster, dask_client(cluster.scheduler_address) as client:
        assert set(client.run(code_digest).values()) == {code_digest()}
