"""Session-wide test settings.

Environment variables are set before Prefect / numba are imported anywhere, so that tests never reach the
network, never write outside the checkout and never print telemetry tracebacks (see ARCHITECTURE.md).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# One BLAS thread per process in tests: Dask workers and pynndescent already use the cores, and
# oversubscribed OpenBLAS threads spin (measured: a 300 x 300 eigh took 2.1 s with 2 threads under load
# vs 0.04 s with 1). Must be set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"

_HOME = REPO_ROOT / ".eigenflow-home"
from spectral.neighbours.jit_cache import numba_cache_dir  # noqa: E402  (numba-free: only the cache's path)

os.environ.setdefault("NUMBA_CACHE_DIR", str(numba_cache_dir()))  # as the CLI: beside eigenflow's own kernels
os.environ.setdefault("PREFECT_HOME", str(_HOME / "prefect-tests"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_UI_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
for _dir in (os.environ["NUMBA_CACHE_DIR"], os.environ["PREFECT_HOME"]):
    os.makedirs(_dir, exist_ok=True)  # Prefect creates only the last component of PREFECT_HOME


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load a bundled benchmark dataset ``data/<name>.npz`` as ``(X float64 (n, d), y int64 (n,))``."""
    with np.load(DATA_DIR / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"].astype(np.int64)


@pytest.fixture(scope="session")
def dataset():
    """Fixture form of :func:`load_dataset`: ``dataset("usps") -> (X, y)``."""
    return load_dataset


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's temporary test server for the flows of the session (logging quieted): started when a test first
    asks for it (12-16 s on this machine), shared by every module after that instead of one server per module.
    The tests that read the server's records filter them by their own flow runs."""
    from prefect.testing.utilities import prefect_test_harness

    from flows._runtime import quiet_prefect

    with prefect_test_harness(server_startup_timeout=90), quiet_prefect():
        yield


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server (``prefect server start`` on a free loopback port, its own home), shared by the tests
    that run eigenflow's CLI or a served process against a server: ``(api_url, home)``. Its scheduler loop runs
    every second (Prefect's default: 60 s), so that a deployment's interval schedule creates runs at once."""
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    home = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_UI_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "1"}  # schedules runs within a second (default 60 s)
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            assert server.poll() is None and time.time() < deadline, "prefect server did not start"
            time.sleep(0.5)
    try:
        yield url, home
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


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
    inherit this process's environment as it is now; by default they are forks of the session's warm server
    (:func:`pytest_configure`), whose environment is the one of the session's start. ``preload``: scripts each
    worker runs at its start (Dask's ``preload``).
    """
    import dask
    from distributed import LocalCluster

    method = "spawn" if spawned else dask.config.get("distributed.worker.multiprocessing-method")
    with dask.config.set({"distributed.worker.multiprocessing-method": method}), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes, dashboard_address=":0",
                         preload=list(preload)) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def cluster():
    """Address of a LocalCluster shared by the test module (2 single-threaded worker processes)."""
    with local_cluster() as address:
        yield address


def gaussian_blobs(n_per_class: int, dim: int, seed: int, n_classes: int = 3):
    """``(X (n_classes * n_per_class, dim), y, centers (n_classes, dim), rng)``: unit-variance blobs around
    centers drawn with scale 3; ``rng`` continues the same stream (for new points)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, dim)) * 3
    y = np.repeat(np.arange(n_classes), n_per_class)
    return centers[y] + rng.standard_normal((y.size, dim)), y, centers, rng


@pytest.fixture
def thread_cluster():
    """A LocalCluster whose workers run in this process (``local_cluster(processes=False)``): a test's monkeypatch
    of a stage body (which runs on a worker) reaches it. Yields the scheduler address."""
    with local_cluster(processes=False) as address:
        yield address


def pytest_configure(config):
    """The local Dask workers of this test process are forks of one server that compiled pynndescent at the
    session's start (:func:`flows.cluster.fork_warm_workers`), instead of fresh processes that each compile it
    (35-80 s per worker on 2 cores; the 4-worker sharded cluster spent ~105 s of its first run compiling)."""
    from flows.cluster import fork_warm_workers

    fork_warm_workers()


#: Fixtures whose tests run on local Dask worker processes (forks of the session's warm server).
WORKER_FIXTURES = frozenset({"cluster", "client", "four_workers", "prefect_harness", "prefect_server"})


def _starts_workers(module_items) -> bool:
    """Whether a test module runs local Dask workers: one of its tests uses :data:`WORKER_FIXTURES`, or the module
    imports a local-cluster helper (``local_cluster`` of this file, ``LocalCluster``)."""
    module = module_items[0].module
    return any(WORKER_FIXTURES & set(item.fixturenames) for item in module_items) or \
        any(hasattr(module, name) for name in ("local_cluster", "LocalCluster"))


def pytest_collection_modifyitems(session, config, items):
    """Run the modules that start local Dask workers after the others (each module's tests stay together, in their
    order). Their workers are forks of a server that compiles pynndescent at the session's start
    (:func:`pytest_configure`): 60-150 s of one core with an empty numba cache, which the first such test waited
    for (165 s for the first test on a clean clone); the pure tests before them now overlap it on the other core."""
    modules: dict = {}
    for item in items:
        modules.setdefault(item.module.__name__, []).append(item)
    ordered = sorted(modules.values(), key=_starts_workers)  # stable: alphabetical within each group
    items[:] = [item for module_items in ordered for item in module_items]
