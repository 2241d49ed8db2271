"""TSK at scale: the ``tsk`` flow on a lifted Swiss roll of n points with 1,000 labeled points, timed end to end.

Ingest -> kNN graph (k = 6, NN-descent) -> Hein-Maier weights -> m = 30 smallest eigenpairs of the normalized
Laplacian (lobpcg + AMG) -> LP of eq. 14 (m + l variables) -> eq. 5 labels and scores of all n points written
chunk by chunk to the store. Prints the stage times, the peak RSS of the process tree (flow + Dask workers)
and the accuracy of the transductive labels on the unlabeled points (classes = bands of the roll).

Usage: python benchmarks/bench_tsk_scale.py [--n 1000000] [--labeled 1000] [--m 30] [--constraint none]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOME = REPO / ".eigenflow-home"
for key, value in {"PREFECT_HOME": str(HOME / "prefect-bench"), "NUMBA_CACHE_DIR": str(HOME / "numba"),
                   "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_UI_ENABLED": "false",
                   "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90", "PREFECT_LOGGING_LEVEL": "WARNING",
                   "DASK_LOGGING__DISTRIBUTED": "warning"}.items():
    os.environ.setdefault(key, value)
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import numpy as np  # noqa: E402

from common import DATA_CACHE, PeakMemory, manifold_npy  # noqa: E402


def semi_labels(y_path: Path, n_labeled: int, seed: int) -> Path:
    """``.npy`` of labels with ``n_labeled`` random labeled points (every class present), -1 elsewhere."""
    out = y_path.with_name(y_path.name.replace(".y.npy", f".semi{n_labeled}_s{seed}.npy"))
    if not out.exists():
        y = np.load(y_path)
        rng = np.random.default_rng(seed)
        while True:
            lab = rng.choice(y.size, n_labeled, replace=False)
            if np.unique(y[lab]).size == np.unique(y).size:
                break
        semi = -np.ones_like(y)
        semi[lab] = y[lab]
        np.save(out, semi)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--labeled", type=int, default=1000)
    parser.add_argument("--m", type=int, default=30)
    parser.add_argument("--constraint", default="decay", choices=["decay", "none"])
    parser.add_argument("--eigen-solver", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--eigen-tol", type=float, default=None)
    parser.add_argument("--k", type=int, default=6, help="n_neighbors of the kNN graph (the paper's 6 by default)")
    args = parser.parse_args(argv)

    from flows.paper002 import tsk
    from storage.embedding_io import read_output

    x_path, y_path = manifold_npy(args.n)
    semi_path = semi_labels(y_path, args.labeled, seed=0)
    store = str(DATA_CACHE / f"tsk_n{args.n}.zarr")
    t0 = time.perf_counter()
    with PeakMemory() as peak:
        out = tsk(str(x_path), store, labels=str(semi_path), n_components=args.m, constraint=args.constraint,
                  n_neighbors=args.k, eigen_solver=args.eigen_solver, eigen_tol=args.eigen_tol, n_workers=args.workers, overwrite=True, random_state=0)
    total = time.perf_counter() - t0
    y, semi = np.load(y_path), np.load(semi_path)
    labels = read_output(store, out["run"], "labels")
    unl = semi < 0
    print(f"load average (1, 5, 15 min) at the end of the run: {os.getloadavg()}")
    print(f"n={args.n} k={args.k} labeled={args.labeled} m={args.m} constraint={args.constraint} status={out['status']}")
    print(f"total wall time (flow call, incl. Prefect start-up): {total:.1f} s; peak RSS {peak.peak_bytes / 2**30:.2f} GiB")
    for name, seconds in out["stages"].items():
        print(f"  {name:12s} {seconds:8.1f} s")
    print(f"  eigen_tol={args.eigen_tol} mu[:5]={np.round(out['results']['mu'][:5], 3)} "
          f"eigenvalues[:3]={np.round(out['results']['eigenvalues'][:3], 7)}")
    print(f"accuracy of the transductive labels on the {int(unl.sum())} unlabeled points: "
          f"{100 * np.mean(labels[unl] == y[unl]):.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
