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

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"

_HOME = REPO_ROOT / ".eigenflow-home"
os.environ.setdefault("NUMBA_CACHE_DIR", str(_HOME / "numba"))
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


@pytest.fixture(scope="module")
def prefect_harness():
    """Prefect's temporary test server for the flows of one test module (logging quieted)."""
    from prefect.testing.utilities import prefect_test_harness

    from flows._runtime import quiet_prefect

    with prefect_test_harness(server_startup_timeout=90), quiet_prefect():
        yield
