"""Measure the exact-vs-NN-descent crossover that sets ``spectral.neighbours.index.EXACT_MAX_SAMPLES``.

Prints, for a 32-d Gaussian mixture of growing size and for USPS (256-d), the wall time of
``knn_graph(method="exact")`` and ``knn_graph(method="nndescent")`` (k = 15) after one warm-up call that
absorbs numba's compile, plus the recall of NN-descent against the exact graph. Wall and CPU (process) times
are printed; on a shared, loaded machine compare CPU times of single-threaded runs:
``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_knn_crossover.py --n-jobs 1``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from eigenflow.spectral.neighbours.knn import knn_graph

K = 15


def _mixture(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(20, d))
    return centres[rng.integers(0, 20, n)] + rng.normal(size=(n, d))


def _time(X: np.ndarray, method: str, n_jobs):
    t0, c0 = time.perf_counter(), time.process_time()
    out = knn_graph(X, K, method=method, random_state=0, n_jobs=n_jobs)
    return (time.perf_counter() - t0, time.process_time() - c0), out


def _row(name: str, X: np.ndarray, n_jobs) -> None:
    te, (ie, _) = _time(X, "exact", n_jobs)
    ta, (ia, _) = _time(X, "nndescent", n_jobs)
    recall = np.mean([len(np.intersect1d(a, b)) / K for a, b in zip(ia, ie)])
    print(f"{name:>14s} n={X.shape[0]:>7d}  exact wall {te[0]:6.2f} s cpu {te[1]:6.2f} s  "
          f"nndescent wall {ta[0]:6.2f} s cpu {ta[1]:6.2f} s  recall {recall:.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-jobs", type=int, default=None, help="NN-descent threads (default: all cores)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 10_000, 20_000, 40_000])
    args = parser.parse_args()
    knn_graph(_mixture(2000), K, method="nndescent", random_state=0, n_jobs=args.n_jobs)  # numba compile
    for n in args.sizes:
        _row("mixture d=32", _mixture(n), args.n_jobs)
    data = Path(__file__).resolve().parents[1] / "data" / "usps.npz"
    with np.load(data) as f:
        _row("usps d=256", f["X"].astype(np.float64), args.n_jobs)


if __name__ == "__main__":
    main()
