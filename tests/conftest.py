"""Session-wide test settings.

Environment variables are set before Prefect / numba are imported anywhere, so that tests never reach the
network, never write outside the checkout and never print telemetry tracebacks (see ARCHITECTURE.md).
"""

from __future__ import annotations

import os
from pathlib import Path

# One BLAS thread per process in tests: Dask workers and pynndescent already use the cores, and
# oversubscribed OpenBLAS threads spin (measured: a 300 x 300 eigh took 2.1 s with 2 threads under load
# vs 0.04 s with 1). Must be set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

_HOME = Path(__file__).resolve().parents[1] / ".eigenflow-home"
from eigenflow.spectral.neighbours.jit_cache import numba_cache_dir  # noqa: E402  (numba-free: only the cache's path)

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

from tests.helpers import load_dataset, local_cluster  # noqa: E402


@pytest.fixture(scope="session")
def dataset():
    """Fixture form of :func:`load_dataset`: ``dataset("usps") -> (X, y)``."""
    return load_dataset


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server (``prefect server start`` on a free loopback port, its own home), shared by the tests
    that run eigenflow's CLI or a served process against a server: ``(api_url, home)``. Its scheduler loop runs
    every second (Prefect's default: 60 s), so that a deployment's interval schedule creates runs at once."""
    from tests.helpers import prefect_server_process

    home = tmp_path_factory.mktemp("prefect-server")
    with prefect_server_process(home, scheduler_loop_seconds=1) as (_, url):  # schedules runs within a second
        yield url, home


@pytest.fixture(scope="session")
def prefect_api(prefect_server):
    """The session's Prefect server as the Prefect API of the test process and of the CLI commands its tests start
    (``PREFECT_API_URL``, as a user's profile sets it): one real server for the whole session instead of a temporary
    server per process or per command. Tests of a CLI's own server remove the variable from the command's
    environment. The tests that read the server's records filter them by their own flow runs."""
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url, _ = prefect_server
    with pytest.MonkeyPatch.context() as patch, temporary_settings(updates={PREFECT_API_URL: url}):
        patch.setenv("PREFECT_API_URL", url)
        yield url
        APILogHandler().flush()  # the session's last logs reach the server before it stops


@pytest.fixture(scope="module")
def cluster():
    """Address of a LocalCluster shared by the test module (2 single-threaded worker processes)."""
    with local_cluster() as address:
        yield address


@pytest.fixture
def thread_cluster():
    """A LocalCluster whose workers run in this process (``local_cluster(processes=False)``): a test's monkeypatch
    of a stage body (which runs on a worker) reaches it. Yields the scheduler address."""
    with local_cluster(processes=False) as address:
        yield address


def pytest_configure(config):
    """The local Dask workers of this test process are forks of one fork server, launched as eigenflow's local
    clusters launch it (:func:`flows.cluster.launch_fork_server`: the workers' environment, Dask's worker imported),
    not fresh interpreters: the suite starts dozens of clusters."""
    import dask

    from eigenflow.flows.cluster import launch_fork_server

    dask.config.set({"distributed.worker.multiprocessing-method": launch_fork_server()})


#: Fixtures whose tests run on local Dask worker processes.
WORKER_FIXTURES = frozenset({"cluster", "client", "four_workers", "prefect_api", "prefect_server"})


def _starts_workers(module_items) -> bool:
    """Whether a test module runs local Dask workers: one of its tests uses :data:`WORKER_FIXTURES`, or the module
    imports a local-cluster helper (``local_cluster`` of ``tests/helpers.py``, ``LocalCluster``)."""
    module = module_items[0].module
    return any(WORKER_FIXTURES & set(item.fixturenames) for item in module_items) or \
        any(hasattr(module, name) for name in ("local_cluster", "LocalCluster"))


def pytest_collection_modifyitems(session, config, items):
    """Run the modules that start local Dask workers after the others (each module's tests stay together, in their
    order): the pure tests come first, and a failure of the plain math shows before the pipeline's."""
    modules: dict = {}
    for item in items:
        modules.setdefault(item.module.__name__, []).append(item)
    ordered = sorted(modules.values(), key=_starts_workers)  # stable: alphabetical within each group
    items[:] = [item for module_items in ordered for item in module_items]
