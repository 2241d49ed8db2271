"""Plain helpers shared by the tests (fixtures are in ``tests/conftest.py``): the bundled datasets, generated
data, a free port and a local Dask cluster. ``from tests.helpers import ...``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load a bundled benchmark dataset ``data/<name>.npz`` as ``(X float64 (n, d), y int64 (n,))``."""
    with np.load(DATA_DIR / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"].astype(np.int64)


def usps_digits(n: int = 400, hidden_fraction: float = 0.5, seed: int = 0, dtype=np.float32):
    """``n`` USPS digits of classes 0-3 drawn with ``seed``: ``(X (n, 256) of dtype, y (n,), hidden (n,))`` where
    ``hidden`` is ``y`` with about ``hidden_fraction`` of the labels set to -1 (unlabeled)."""
    X, y = load_dataset("usps")
    rng = np.random.default_rng(seed)
    rows = rng.choice(np.flatnonzero(y < 4), n, replace=False)
    X, y = X[rows].astype(dtype), y[rows]
    hidden = y.copy()
    hidden[rng.random(y.size) < hidden_fraction] = -1
    return X, y, hidden


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_cluster(n_workers: int = 2, processes: bool = True, spawned: bool = False, preload: tuple[str, ...] = ()):
    """A LocalCluster of ``n_workers`` single-threaded workers; yields its scheduler address.

    ``processes=False``: the workers run in this process (then a test's monkeypatch reaches the stage bodies,
    which run on the workers). ``spawned=True``: worker processes started fresh (``spawn``), so that they
    inherit this process's environment as it is now; by default they are forks of Dask's fork server
    (``pytest_configure`` of ``tests/conftest.py``), whose environment is the one of its start. ``preload``: scripts each
    worker runs at its start (Dask's ``preload``).
    """
    import dask
    from distributed import LocalCluster

    method = "spawn" if spawned else dask.config.get("distributed.worker.multiprocessing-method")
    with dask.config.set({"distributed.worker.multiprocessing-method": method}), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes, dashboard_address=":0",
                         preload=list(preload)) as c:
        yield c.scheduler_address


def nice_of_thread(tid: int) -> int:
    """The nice value of thread ``tid`` (a native id) of this process, from /proc (field 19 of its stat; Linux)."""
    with open(f"/proc/self/task/{tid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[16])


def local_worker_processes(cli_pid: int) -> list:
    """The Dask worker processes of the local cluster of the CLI process ``cli_pid`` (psutil processes): spawned
    ones (``spawn_main`` in their command line) or forks of a ``multiprocessing.forkserver`` process."""
    import psutil

    workers = []
    for process in psutil.Process(cli_pid).children(recursive=True):
        try:
            parent = process.parent()
            if "spawn_main" in " ".join(process.cmdline()) or (
                    parent is not None and parent.pid != cli_pid and "forkserver" in " ".join(parent.cmdline())):
                workers.append(process)
        except psutil.NoSuchProcess:
            continue
    return workers


def gaussian_blobs(n_per_class: int, dim: int, seed: int, n_classes: int = 3):
    """``(X (n_classes * n_per_class, dim), y, centers (n_classes, dim), rng)``: unit-variance blobs around
    centers drawn with scale 3; ``rng`` continues the same stream (for new points)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, dim)) * 3
    y = np.repeat(np.arange(n_classes), n_per_class)
    return centers[y] + rng.standard_normal((y.size, dim)), y, centers, rng


@contextlib.contextmanager
def prefect_server_process(home: Path, *, scheduler_loop_seconds: float | None = None):
    """A real ``prefect server start`` on a free loopback port with its own ``PREFECT_HOME`` (in its own session);
    yields ``(process, api_url)`` once it answers ``/health``. ``scheduler_loop_seconds``: how often its
    scheduler creates runs of scheduled deployments (Prefect's default: 60 s). Stopped at the end (SIGTERM to its
    group, SIGKILL after 60 s) unless it has exited already (a test may kill it)."""
    import os
    import subprocess
    import sys
    import time

    from eigenflow.flows.prefect_api import api_answers

    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_UI_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}
    if scheduler_loop_seconds is not None:
        env["PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS"] = str(scheduler_loop_seconds)
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "server", "start", "--host",
                               "127.0.0.1", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 120
    try:
        while not api_answers(url, timeout=2):
            assert server.poll() is None and time.time() < deadline, "prefect server did not start"
            time.sleep(0.5)
        yield server, url
    finally:
        stop_process_group(server)


def stop_process_group(process, timeout: float = 60) -> None:
    """End a process started with ``start_new_session=True`` and everything in its group: SIGTERM (a graceful
    stop), SIGKILL if it is still running after ``timeout`` seconds; returns once it has exited."""
    import os
    import signal
    import subprocess

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
