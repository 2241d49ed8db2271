"""A local worker that has closed ends its process without the interpreter's teardown (:mod:`tasks.worker_exit`):
status 0, its buffered output written, the exit handlers registered before the worker started skipped; a worker
that did not close exits as Python does. Each case in a fresh process."""

from __future__ import annotations

import subprocess
import sys


def _exit_of(tmp_path, closed: bool) -> tuple[subprocess.CompletedProcess, bool]:
    marker = tmp_path / f"late-{closed}"
    code = (f"import atexit; atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
            "import sys, tasks.worker_exit as we\n"
            "we.dask_setup(None)\n"
            + ("we.dask_teardown(None)\n" if closed else "")
            + "sys.stdout.write('buffered output')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return done, marker.exists()


def test_a_closed_worker_ends_at_once_with_its_output_written(tmp_path):
    done, late_handler_ran = _exit_of(tmp_path, closed=True)
    assert done.returncode == 0 and done.stdout == "buffered output", done.stderr
    assert not late_handler_ran  # the teardown after the worker's own exit handler is skipped


def test_a_worker_that_did_not_close_exits_as_python_does(tmp_path):
    done, late_handler_ran = _exit_of(tmp_path, closed=False)
    assert done.returncode == 0 and done.stdout == "buffered output", done.stderr
    assert late_handler_ran


def test_a_local_cluster_closes_with_the_preload(tmp_path):
    """A real local cluster with the preload: its workers run a task, and the cluster closes (the nanny sees its
    worker's process end)."""
    from distributed import Client

    from eigenflow.flows.cluster import WORKER_PRELOADS, local_cluster

    assert "eigenflow.tasks.worker_exit" in WORKER_PRELOADS
    with local_cluster(n_workers=1, threads_per_worker=1) as cluster:
        with Client(cluster, set_as_default=False) as client:
            assert client.submit(sum, [1, 2], pure=False).result() == 3
            [nanny] = cluster.workers.values()
            process = nanny.process.process
    assert process.exitcode == 0
