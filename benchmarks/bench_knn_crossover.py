"""Measure the exact-vs-NN-descent crossover that sets ``spectral.knn.EXACT_MAX_SAMPLES``.

Prints, for a 32-d Gaussian mixture of growing size and for USPS (256-d), the wall time of
``knn_graph(method="exact")`` and ``knn_graph(method="nndescent")`` (k = 15) after one warm-up call that
absorbs numba's compile, plus the recall of NN-descent against the exact graph.
Run: ``NUMBA_CACHE_DIR=.eigenflow-home/numba .venv/bin/python benchmarks/bench_knn_crossover.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from spectral.knn import knn_graph

K = 15


def _mixture(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(20, d))
    return centres[rng.integers(0, 20, n)] + rng.normal(size=(n, d))


def _time(X: np.ndarray, method: str):
    t0 = time.perf_counter()
    out = knn_graph(X, K, method=method, random_state=0)
    return time.perf_counter() - t0, out


def _row(name: str, X: np.ndarray) -> None:
    te, (ie, _) = _time(X, "exact")
    ta, (ia, _) = _time(X, "nndescent")
    recall = np.mean([len(np.intersect1d(a, b)) / K for a, b in zip(ia, ie)])
    print(f"{name:>14s} n={X.shape[0]:>7d} exact {te:6.2f} s  nndescent {ta:6.2f} s  recall {recall:.4f}")


def main() -> None:
    knn_graph(_mixture(2000), K, method="nndescent", random_state=0)  # numba compile
    for n in (5_000, 10_000, 20_000, 40_000):
        _row("mixture d=32", _mixture(n))
    data = Path(__file__).resolve().parents[1] / "data" / "usps.npz"
    with np.load(data) as f:
        _row("usps d=256", f["X"].astype(np.float64))


if __name__ == "__main__":
    main()
