"""A local worker closed while its task runs (what a stopped run's close of its cluster does) does not print Dask's
note "Async instruction ... ended with CancelledError" (:class:`tasks.bodies.worker_preload.CancelledOnClose`); a worker
without eigenflow's preloads does. Real clusters in fresh processes, their workers' stderr read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

CHILD = r"""
import sys, time
from distributed import Client, LocalCluster
from eigenflow.flows.cluster import local_cluster

def busy():
    import time
    time.sleep(30)

def run(address):
    with Client(address) as client:
        future = client.submit(busy, pure=False)
        while not client.processing() or not any(client.processing().values()):
            time.sleep(0.05)
        time.sleep(0.3)

if sys.argv[1] == "eigenflow":
    with local_cluster(n_workers=1) as address:
        run(address)
else:
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster:
        run(cluster.scheduler_address)
print("closed")
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("cluster", "printed"), [("eigenflow", False), ("dask", True)])
def test_a_worker_closed_mid_task_prints_no_cancellation_note(cluster, printed):
    env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "warning"}  # Dask's note is a warning (the CLI's level hides it)
    done = subprocess.run([sys.executable, "-c", CHILD, cluster], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("closed"), done.stderr[-3000:]
    assert ("ended with CancelledError" in done.stderr) is printed, done.stderr[-3000:]


def test_the_filter_drops_only_that_note():
    import logging

    from eigenflow.tasks.bodies.worker_preload import CancelledOnClose

    def record(level, text):
        return logging.LogRecord("distributed.worker.state_machine", level, __file__, 1, text, None, None)

    note = "Async instruction for <Task cancelled name=\"execute('x')\"> ended with CancelledError"
    assert not CancelledOnClose().filter(record(logging.WARNING, note))
    assert CancelledOnClose().filter(record(logging.ERROR, note))
    assert CancelledOnClose().filter(record(logging.WARNING, "Async instruction for <Task> ended with ValueError"))
    assert CancelledOnClose().filter(record(logging.WARNING, "Compute Failed"))
