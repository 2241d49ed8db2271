"""A flow refuses a Dask cluster whose workers run other eigenflow code (instead of waiting forever for tasks
those workers cannot load): real worker processes, one of them importing a modified copy of the packages."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from tests.helpers import REPO_ROOT, local_cluster


def test_workers_running_other_code_are_refused_and_the_same_code_is_accepted(tmp_path):
    from distributed import Client

    from eigenflow.flows.cluster import WorkerCodeError, dask_client
    from eigenflow.tasks.bodies.worker import code_digest

    other = tmp_path / "other"
    for package in ("spectral", "storage", "tasks"):
        shutil.copytree(REPO_ROOT / package, other / "eigenflow" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "eigenflow" / "tasks" / "task_options.py", "a") as f:
        f.write("\n# another eigenflow version\n")
    preload = tmp_path / "other_first.py"
    preload.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(other)!r})
    """))

    # spawned: a fresh interpreter per worker, whose imports the preload script redirects to the copy
    with local_cluster(n_workers=1, spawned=True, preload=(str(preload),)) as address:
        with Client(address) as client:  # the worker really imports the copy
            assert all(path.startswith(str(other))
                       for path in client.run(lambda: __import__("eigenflow.tasks", fromlist=["_"]).__file__).values())
        with pytest.raises(WorkerCodeError, match=r"1 of the 1 workers .* run other eigenflow code") as info:
            with dask_client(address):
                pytest.fail("the client was handed out")
        assert code_digest() in str(info.value)

    with local_cluster(n_workers=1, spawned=True) as address, dask_client(address) as client:
        assert set(client.run(code_digest).values()) == {code_digest()}
