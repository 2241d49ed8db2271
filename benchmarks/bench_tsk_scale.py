"""TSK at scale: ``embed(method="tsk")`` on a lifted Swiss roll of n points with 1,000 labeled points, timed end to end.

Ingest -> kNN graph (NN-descent) -> Hein-Maier weights -> m = 30 smallest eigenpairs of the normalized Laplacian
(lobpcg + AMG) -> LP of eq. 14 (m + l variables) -> eq. 5 labels and scores of all n points written chunk by
chunk to the store. Prints the stage times, the peak RSS of the process tree (flow + Dask workers) and the
accuracy of the transductive labels on the unlabeled points (classes = bands of the roll) beside 1-NN on the
labeled points in the input space and scikit-learn's LabelSpreading on a subsample (``--ls-points``), on the
same unlabeled points.

The estimator's defaults (eta = 1, n_neighbors = max(6, ceil(ln n)) = 14 at 1e6) apply unless given; the
previous run (k = 10, ``--constraint none``) labeled 55.6 % of the unlabeled points correctly against 95.8 %
for 1-NN: see benchmarks/results/tsk.md, "TSK at scale". Uses ``flows.embed.embed`` (the generic flow).

Usage: python benchmarks/bench_tsk_scale.py [--n 1000000] [--labeled 1000] [--m 30] [--constraint decay]
       [--eta 1] [--k auto]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOME = REPO / ".eigenflow-home"
for key, value in {"PREFECT_HOME": str(HOME / "prefect-bench"),
                   "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_UI_ENABLED": "false",
                   "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90", "PREFECT_LOGGING_LEVEL": "WARNING",
                   "DASK_LOGGING__DISTRIBUTED": "warning"}.items():
    os.environ.setdefault(key, value)
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import numpy as np  # noqa: E402

from bench_support import DATA_CACHE, PeakMemory, baselines, manifold_npy, print_quality  # noqa: E402


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
    parser.add_argument("--eta", type=float, default=1.0, help="eq. 8 decay factor (the estimator's default 1)")
    parser.add_argument("--eigen-solver", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--k", default="auto",
                        help="n_neighbors of the kNN graph: an int, or 'auto' = max(6, ceil(ln n)) (the default)")
    parser.add_argument("--route", choices=["flow", "estimator"], default="flow",
                        help="flow: embed(method='tsk') end to end; estimator: spectral_kernels.TSK in memory "
                             "(same data, labels and parameters; for n up to ~1e5)")
    parser.add_argument("--ls-points", type=int, default=20_000,
                        help="unlabeled points of the LabelSpreading reference (0: skip it)")
    args = parser.parse_args(argv)

    from eigenflow.spectral.methods.spectral_kernels import TSK, resolve_n_neighbors

    x_path, y_path = manifold_npy(args.n)
    semi_path = semi_labels(y_path, args.labeled, seed=0)
    store = str(DATA_CACHE / f"tsk_n{args.n}.zarr")
    k = resolve_n_neighbors(args.k if args.k == "auto" else int(args.k), args.n)
    params = {"n_components": args.m, "constraint": args.constraint, "eta": args.eta, "n_neighbors": k,
              "eigen_solver": args.eigen_solver}
    y, semi = np.load(y_path), np.load(semi_path)
    t0 = time.perf_counter()
    with PeakMemory() as peak:
        if args.route == "flow":
            from eigenflow.flows.embed import embed
            from eigenflow.storage.embedding_io import read_output

            out = embed(str(x_path), store, method="tsk", params=params, labels=str(semi_path), random_state=0,
                        n_workers=args.workers, overwrite=True)
            labels = read_output(store, out["run"], "labels")
        else:
            est = TSK(**params, random_state=0).fit(np.load(x_path).astype(np.float64), semi)
            labels = est.transduction_
            out = {"status": "estimator (in memory)", "stages": {},
                   "results": {"mu": est.mu_, "eigenvalues": est.eigenvalues_}}
    total = time.perf_counter() - t0
    unl = semi < 0
    args.k = k
    print(f"load average (1, 5, 15 min) at the end of the run: {os.getloadavg()}")
    print(f"n={args.n} k={args.k} labeled={args.labeled} m={args.m} constraint={args.constraint} status={out['status']}")
    print(f"total wall time ({args.route}; the flow's includes Prefect start-up): {total:.1f} s; peak RSS {peak.peak_bytes / 2**30:.2f} GiB")
    for name, seconds in out["stages"].items():
        print(f"  {name:12s} {seconds:8.1f} s")
    results = out.get("results", {})
    if "mu" in results:
        mu = np.asarray(results["mu"])
        print(f"  mu[:5]={np.round(mu[:5], 3)} nonzero mu: {int(np.sum(mu > 0))} of "
              f"{mu.size}; eigenvalues[:3]={np.round(np.asarray(results['eigenvalues'][:3]), 7)}")
    X = np.load(x_path, mmap_mode="r")
    refs = baselines(X, y, np.flatnonzero(~unl), np.flatnonzero(unl), label_spreading=args.ls_points,
                     n_neighbors=k)
    print_quality(f"TSK transductive labels on the {int(unl.sum())} unlabeled points", float(np.mean(labels[unl] == y[unl])),
                  refs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
