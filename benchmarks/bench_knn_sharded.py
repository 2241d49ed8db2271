"""Sharded kNN graph (``knn_graph(method="sharded")``) vs single-process NN-descent: recall and time vs P.

Data: the lifted Swiss roll (:func:`spectral.datasets.make_swiss_roll_lifted`, 2e5 x 32 by default), k = 15;
``--data mixture`` takes the 32-d Gaussian mixture of ``bench_knn_crossover.py`` instead, a harder case
where NN-descent's recall is well below 1.
Recall is measured against the exact neighbours of a random sample of query rows (brute force over all n
rows, scikit-learn). The sharded graph runs on a LocalCluster of ``--workers`` single-threaded worker
processes (NN-descent ``n_jobs=1`` per task); the single-process reference runs in this process with
``n_jobs=1`` and with all cores. A warm-up call on a small input absorbs numba's compile in every process
first (it is not in the times). Wall times; the load average is printed before each row because the machine
may be shared::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_knn_sharded.py
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _recall(indices: np.ndarray, rows: np.ndarray, truth: np.ndarray) -> float:
    from eigenflow.spectral.metrics import knn_recall

    return knn_recall(indices[rows], truth)


def _exact_sample(X: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Exact k nearest neighbours (point itself excluded) of ``X[rows]`` among all rows: (m, k) int64."""
    from sklearn.neighbors import NearestNeighbors

    idx = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X).kneighbors(X[rows], return_distance=False)
    return np.array([[j for j in row if j != r][:k] for r, row in zip(rows, idx)], dtype=np.int64)


def _warm(X: np.ndarray, k: int) -> None:
    """Compile pynndescent's build and query in the calling process (a worker: one task per worker)."""
    from eigenflow.spectral.neighbours.index import KNNIndex

    KNNIndex.build(X, k, method="nndescent", random_state=0, n_jobs=1).query(X[:100], k)


def _row(name: str, seconds: float, recall: float) -> None:
    load = os.getloadavg()[0]
    print(f"| {name:<32s} | {seconds:8.1f} | {recall:.4f} | {load:4.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--k", type=int, default=15)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample", type=int, default=2000, help="query rows of the recall estimate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", choices=["swissroll", "mixture"], default="swissroll")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from eigenflow.spectral.datasets import make_swiss_roll_lifted
    from eigenflow.spectral.neighbours.knn import knn_graph

    if args.data == "swissroll":
        X = make_swiss_roll_lifted(args.n, random_state=args.seed)[0]  # (n, 32) float32
    else:
        from bench_knn_crossover import _mixture  # this directory is on sys.path when run as a script

        X = _mixture(args.n, seed=args.seed).astype(np.float32)  # (n, 32)
    rows = np.sort(np.random.default_rng(args.seed).choice(args.n, args.sample, replace=False))
    t0 = time.perf_counter()
    truth = _exact_sample(X, rows, args.k)
    print(f"data={args.data} n={args.n} d={X.shape[1]} k={args.k}; exact neighbours of {args.sample} sampled rows in "
          f"{time.perf_counter() - t0:.1f} s; cores {os.cpu_count()}, load average {os.getloadavg()}", flush=True)
    small = X[:3000]
    print("| method | wall s | recall | load |\n|---|---|---|---|")

    _warm(small, args.k)  # compile in this process
    for n_jobs in (1, None):
        t0 = time.perf_counter()
        idx, _ = knn_graph(X, args.k, method="nndescent", random_state=args.seed, n_jobs=n_jobs)
        _row(f"single-process nndescent n_jobs={n_jobs or 'all'}", time.perf_counter() - t0,
             _recall(idx, rows, truth))

    cluster_kwargs = {"n_workers": args.workers, "threads_per_worker": 1, "processes": True, "dashboard_address": ":0"}
    with LocalCluster(**cluster_kwargs) as cluster, Client(cluster) as client:
        client.gather([client.submit(_warm, small, args.k, workers=[w], pure=False) for w in client.nthreads()])
        for P in args.shards:
            t0 = time.perf_counter()
            idx, _ = knn_graph(X, args.k, method="sharded", n_shards=P, random_state=args.seed)
            _row(f"sharded P={P} ({args.workers} workers)", time.perf_counter() - t0, _recall(idx, rows, truth))


if __name__ == "__main__":
    main()
