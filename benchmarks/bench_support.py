"""Shared benchmark helpers: generated manifold datasets on disk, a peak-memory sampler, a timer.

Datasets come from :func:`spectral.datasets.make_swiss_roll_lifted` (pure numpy) and are written here as
``.npy`` files so that the flow ingests them the way a user's file would be ingested.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil

from eigenflow.spectral.datasets import make_swiss_roll_lifted

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Where generated benchmark inputs are cached (git-ignored runtime directory).
DATA_CACHE = REPO_ROOT / ".eigenflow-home" / "bench-data"


def manifold_npy(n: int, *, n_features: int = 32, seed: int = 0, directory: Path = DATA_CACHE) -> tuple[Path, Path]:
    """Write (once) the lifted Swiss roll of ``n`` points and return ``(X.npy path, y.npy path)``."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"swissroll_n{n}_d{n_features}_s{seed}"
    x_path, y_path = stem.with_suffix(".X.npy"), stem.with_suffix(".y.npy")
    if not (x_path.exists() and y_path.exists()):
        X, y, _ = make_swiss_roll_lifted(n, n_features=n_features, random_state=seed)
        _save_atomic(x_path, X)
        _save_atomic(y_path, y)
    return x_path, y_path


def _save_atomic(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".partial.npy")
    np.save(tmp, array)
    tmp.replace(path)


class PeakMemory:
    """Sample the summed RSS of a process (default: this one) and all its descendants (e.g. Dask workers) in a
    thread.

    Use as a context manager; :attr:`peak_bytes` holds the maximum seen. ``interval`` seconds between
    samples (0.2 s catches every stage longer than that).
    """

    def __init__(self, interval: float = 0.2, pid: int | None = None, tree: bool = True, timeline: bool = False):
        self.interval = interval
        self.pid = pid  # whose process tree (default: this process)
        self.tree = tree  # False: the process alone, without its descendants
        self.peak_bytes = 0
        self.samples: list[tuple[float, int]] | None = [] if timeline else None  # (time.time(), bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def peak_between(self, start: float, end: float) -> int:
        """Largest sample taken between the epoch seconds ``start`` and ``end`` (needs ``timeline=True``)."""
        return max((rss for t, rss in self.samples if start <= t <= end), default=0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        try:
            rss = tree_rss(self.pid) if self.tree else psutil.Process(self.pid).memory_info().rss
            self.peak_bytes = max(self.peak_bytes, rss)
            if self.samples is not None:
                self.samples.append((time.time(), rss))
        except psutil.NoSuchProcess:  # the watched process has ended
            pass


def tree_rss(pid: int | None = None) -> int:
    """Summed resident set size (bytes) of process ``pid`` (default: this one) and its descendants."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


@contextmanager
def timed(results: dict, key: str):
    """Store the wall time of the ``with`` block in ``results[key]`` (seconds)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        results[key] = time.perf_counter() - t0


def gb(n_bytes: float) -> str:
    """Format bytes as GB with two decimals."""
    return f"{n_bytes / 1e9:.2f} GB"


# ------------------------------------------------------------------------------ quality beside simple baselines
def nn_accuracy(Z_ref: np.ndarray, y_ref: np.ndarray, Z_query: np.ndarray, y_query: np.ndarray,
                chunk: int = 20_000) -> float:
    """Accuracy of 1-NN (Euclidean) classification of ``Z_query`` with references ``Z_ref``, chunked."""
    from sklearn.neighbors import NearestNeighbors

    Z_ref = np.asarray(Z_ref, dtype=np.float64)
    nn = NearestNeighbors(n_neighbors=1, algorithm="brute").fit(Z_ref)
    hits = 0
    for i0 in range(0, len(Z_query), chunk):
        idx = nn.kneighbors(np.asarray(Z_query[i0:i0 + chunk], dtype=np.float64), return_distance=False)[:, 0]
        hits += int(np.sum(np.asarray(y_ref)[idx] == np.asarray(y_query[i0:i0 + chunk])))
    return hits / max(len(Z_query), 1)


def baselines(X, y: np.ndarray, labeled: np.ndarray, evaluate: np.ndarray, *, label_spreading: int = 20_000,
              n_neighbors: int = 10, seed: int = 0) -> dict[str, float]:
    """Simple references on the same points as a method's figure.

    ``labeled`` / ``evaluate``: index arrays into ``X`` (n, d) / ``y`` (n,) of the labeled points and of the
    points the method is scored on. Returns the accuracy on ``evaluate`` of 1-NN on the labeled points in the
    input space and, when ``label_spreading`` > 0, of scikit-learn's ``LabelSpreading`` (kNN kernel,
    ``n_neighbors``, alpha 0.2 default) fitted on the labeled points plus ``label_spreading`` random points of
    ``evaluate`` (a subsample: its kNN graph of all n points would not fit the benchmark's budget), scored on
    that subsample.
    """
    from sklearn.semi_supervised import LabelSpreading

    out = {"1-NN on the labeled points, input space": nn_accuracy(X[labeled], y[labeled], X[evaluate], y[evaluate])}
    if label_spreading > 0:
        rng = np.random.default_rng(seed)
        sub = np.sort(rng.choice(evaluate, min(label_spreading, len(evaluate)), replace=False))
        pts = np.r_[np.sort(labeled), sub]
        semi = np.r_[y[np.sort(labeled)], -np.ones(len(sub), dtype=np.int64)]
        ls = LabelSpreading(kernel="knn", n_neighbors=n_neighbors, max_iter=1000).fit(np.asarray(X[pts]), semi)
        out[f"LabelSpreading (k={n_neighbors}) on the labeled + {len(sub)} evaluated points"] = float(
            np.mean(ls.transduction_[len(labeled):] == y[sub]))
    return out


def print_quality(method: str, value: float, refs: dict[str, float]) -> None:
    """One block: the method's accuracy beside the references of :func:`baselines`."""
    print(f"quality (accuracy on the same points): {method}: {value:.4f}")
    for name, acc in refs.items():
        print(f"  {name}: {acc:.4f}")


def free_port() -> int:
    """A free TCP port on loopback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def prefect_server(home: Path, *, scheduler_loop_seconds: float = 1.0):
    """A real ``prefect server start`` on a free loopback port with its own ``PREFECT_HOME``; yields the API URL.

    ``scheduler_loop_seconds``: how often the server's scheduler creates runs of scheduled deployments (Prefect's
    default is 60 s). Stopped with SIGTERM to its process group at the end.
    """
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_UI_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": str(scheduler_loop_seconds)}
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host",
                               "127.0.0.1", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 180
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("prefect server did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
