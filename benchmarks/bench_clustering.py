"""Spectral clustering: NMI (square-root and max normalizations), ARI, wall time and peak memory, one table per data set.

Real data (``real``): USPS and COIL-20 of ``data/`` and scikit-learn's digits. eigenflow's ``SpectralClustering`` with
its defaults (kNN graph), with the best ``n_neighbors`` of a small grid, and with ``affinity="landmarks"``, against
scikit-learn's ``SpectralClustering(affinity="nearest_neighbors")``, ``KMeans`` and dask-ml's ``SpectralClustering``
(the ``bench`` extra). Every job runs in a fresh process, so its peak memory (VmHWM) is its own.

Scale (``scale``): the pipeline end to end, ``eigenflow embed SOURCE STORE --method spectral_clustering`` (ingest,
fit, labels written for every row) on a generated 2-D set (:func:`spectral.datasets.make_cluster_shapes`) saved as
.npy, once on all rows and once with 10 % held out; the NMI of the exported labels, the wall time of the command, and
the share of held-out rows whose label (mapped by the model fitted without them) agrees with the fit on all rows,
after matching the two runs' cluster ids (Hungarian assignment).

    python benchmarks/bench_clustering.py real [--json benchmarks/results/clustering_real.json]
    python benchmarks/bench_clustering.py scale --shape rings_and_blobs --n 10000000 [--affinity landmarks]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GRID = (5, 10, 15, 20, 30)


def scores(y: np.ndarray, labels: np.ndarray) -> dict:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return {"nmi_sqrt": normalized_mutual_info_score(y, labels, average_method="geometric"),
            "nmi_max": normalized_mutual_info_score(y, labels, average_method="max"),
            "ari": adjusted_rand_score(y, labels)}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return X.astype(np.float64), y
    data = np.load(ROOT / "data" / f"{name}.npz")
    return data["X"].astype(np.float64), data["y"]


def run_job(data: str, method: str, params: dict) -> dict:
    """Fit one clusterer on one data set (in a fresh process): its scores, seconds and peak memory."""
    from eigenflow.tasks.bodies.worker import peak_rss_bytes

    X, y = load(data)
    k = len(np.unique(y))
    t0 = time.perf_counter()
    if method == "eigenflow":
        from eigenflow.spectral import SpectralClustering

        labels = SpectralClustering(n_clusters=k, random_state=0, **params).fit(X).labels_
    elif method == "sklearn_sc":
        from sklearn.cluster import SpectralClustering

        labels = SpectralClustering(n_clusters=k, affinity="nearest_neighbors", random_state=0, **params).fit(X).labels_
    elif method == "kmeans":
        from sklearn.cluster import KMeans

        labels = KMeans(n_clusters=k, n_init=10, random_state=0).fit(X).labels_
    else:
        import dask.array as da
        from dask_ml.cluster import SpectralClustering

        est = SpectralClustering(n_clusters=k, random_state=0, **params)
        labels = np.asarray(est.fit(da.from_array(X, chunks=(2000, X.shape[1]))).labels_)
    seconds = time.perf_counter() - t0
    return {"data": data, "method": method, "params": params, "seconds": seconds,
            "peak_gb": peak_rss_bytes() / 1e9, **scores(y, labels)}


def real(args: argparse.Namespace) -> list[dict]:
    jobs = []
    for data in ("usps", "coil20", "digits"):
        jobs += [(data, "eigenflow", {}), (data, "eigenflow", {"affinity": "landmarks"})]
        jobs += [(data, "eigenflow", {"n_neighbors": g}) for g in GRID if g != 10]
        jobs += [(data, "sklearn_sc", {"n_neighbors": 10}), (data, "kmeans", {}), (data, "dask_ml", {})]
    rows = []
    for data, method, params in jobs:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            try:
                rows.append(pool.submit(run_job, data, method, params).result())
            except Exception as exc:  # a reference that fails is reported, not hidden
                rows.append({"data": data, "method": method, "params": params, "error": f"{type(exc).__name__}: {exc}"})
        r = rows[-1]
        print(f"{data:7s} {method:10s} {json.dumps(params):28s} " + (r.get("error", "")[:120] or
              f"NMI {r['nmi_sqrt']:.3f} (max {r['nmi_max']:.3f})  ARI {r['ari']:.3f}  {r['seconds']:7.2f} s  "
              f"{r['peak_gb']:.2f} GB"), flush=True)
    return rows


def matched_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of rows whose labels agree once the ids of ``b`` are matched to those of ``a`` (Hungarian)."""
    from scipy.optimize import linear_sum_assignment

    k = int(max(a.max(), b.max())) + 1
    table = np.zeros((k, k), dtype=np.int64)
    np.add.at(table, (a, b), 1)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / a.size)


def cli_embed(source: str, store: str, params: list[str], holdout: float, workers: int) -> float:
    cmd = [sys.executable, "-m", "eigenflow.flows.cli", "embed", source, store, "--method", "spectral_clustering",
           "--holdout", str(holdout), "--overwrite", "--workers", str(workers)] + [x for p in params for x in ("-p", p)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"embed failed: {done.stderr.strip().splitlines()[-1:]}")
    return seconds


def scale(args: argparse.Namespace) -> dict:
    from eigenflow.spectral.datasets import CLUSTER_SHAPES, make_cluster_shapes
    from eigenflow.storage.embedding_io import read_output
    from eigenflow.storage.export import export_output
    from eigenflow.storage.manifest import list_runs, read_manifest

    k = CLUSTER_SHAPES[args.shape][1]
    X, y = make_cluster_shapes(args.shape, args.n, random_state=args.seed)
    out: dict = {"shape": args.shape, "n": args.n, "classes": k, "affinity": args.affinity, "workers": args.workers}
    params = [f"n_clusters={k}", f"affinity={args.affinity}"] + args.param
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        source = f"{tmp}/X.npy"
        np.save(source, X.astype(np.float32))
        del X
        for holdout in (0.0,) if args.skip_holdout else (0.0, 0.1):
            store = f"{tmp}/h{holdout}.zarr"
            seconds = cli_embed(source, store, params, holdout, args.workers)
            export_output(store, f"{tmp}/labels.npy", output="labels", overwrite=True)
            labels = np.load(f"{tmp}/labels.npy")
            manifest = read_manifest(store, list_runs(store)[-1])
            stages = {r.name: round(r.seconds or 0.0, 2) for r in manifest.stages}
            peaks = {r.name: r.info["worker_peak_rss_gb"] for r in manifest.stages
                     if "worker_peak_rss_gb" in r.info}  # the worker's peak up to the end of the stage
            out[f"holdout_{holdout}"] = {"seconds": seconds, "stages": stages, "worker_peak_gb": peaks,
                                         **scores(y, labels)}
            if holdout:
                held = read_output(store, manifest.run_id, "held_out").astype(bool)
                out["heldout_agreement"] = matched_agreement(out.pop("_labels_all")[held], labels[held])
            else:
                out["_labels_all"] = labels
            r = out[f"holdout_{holdout}"]
            print(f"{args.shape} n={args.n:,} {args.affinity} holdout {holdout}: {seconds:.1f} s "
                  f"NMI {r['nmi_sqrt']:.4f} (max {r['nmi_max']:.4f}) ARI {r['ari']:.4f}  stages {stages}  worker peak GB "
                  f"{r['worker_peak_gb']}", flush=True)
    out.pop("_labels_all", None)
    if "heldout_agreement" in out:
        print(f"held-out rows labelled as by the fit on all rows: {out['heldout_agreement']:.4f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    rl = sub.add_parser("real")
    sc = sub.add_parser("scale")
    sc.add_argument("--shape", default="rings_and_blobs", choices=["rings", "rings_and_blobs", "flower"])
    sc.add_argument("--n", type=int, default=1_000_000)
    sc.add_argument("--affinity", default="landmarks", choices=["landmarks", "knn"])
    sc.add_argument("--param", "-p", action="append", default=[], help="more method parameters NAME=VALUE")
    sc.add_argument("--seed", type=int, default=0)
    sc.add_argument("--workers", type=int, default=2, help="local Dask workers (each gets memory / workers)")
    sc.add_argument("--skip-holdout", action="store_true", help="only the run on all rows (no held-out agreement)")
    sc.add_argument("--tmp", default=None, help="directory of the temporary stores")
    for p in (rl, sc):
        p.add_argument("--json", default=None, help="append the figures to this JSON file")
    args = parser.parse_args()
    result = real(args) if args.mode == "real" else scale(args)
    if args.json:
        path = Path(args.json)
        history = json.loads(path.read_text()) if path.exists() else []
        history.append({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "mode": args.mode,
                        "result": result})
        path.write_text(json.dumps(history, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
