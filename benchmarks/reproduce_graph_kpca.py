"""Reproduce the experiments of STG18 (GRAD, Shen, Traganitis & Giannakis 2018) on the bundled datasets.

Parts (``--parts``, default all):

* ``usps``  -- semi-supervised GRAD KPCA (eq. 22-24) vs plain KPCA on USPS digit pairs 5/6 and 7/8, 500
  images each per draw, labeled fraction p in {0.05, 0.1, 0.2, 0.3, 0.5}, gamma1 = gamma2 = 0.5,
  Gaussian kernel sigma^2 = 1 (k = exp(-||x - x'||^2 / (2 sigma^2))) on images scaled to unit l2 norm
  (with the stored [0, 1] pixels sigma^2 = 1 makes K ~ I), linear SVM (standardized features, C by an
  inner 5-fold CV; C = 1 reported too), 5-fold CV error over the 1000 images (the paper's protocol) and
  over the unlabeled images only (Figures 3-4). Code in ``benchmarks/graph_kpca_usps.py``.
* ``usps_ablation`` (not in the default parts) -- the hypotheses for the USPS results (constraint
  Laplacian sign / normalization, must- or cannot-link only, centering, pixel scaling, embedding scaling,
  SVM C), ``--ablation-draws`` draws, d in {2, 6}; ``usps_diag``: spectra and label correlations of the
  embedding on one draw per pair.
* ``faces`` -- GKPCA vs KPCA vs PCA on ORL (400 x 1024, D >> N): error of a linear SVM (C by 5-fold CV
  on the 80 %) on a stratified 20 % test split, vs d, and fit time vs d (Figure 1).
* ``lne``   -- LNE / LNEG vs LLE vs PCA: Swiss roll (R^2 of the known arc parameter t and height h
  regressed on the 2-D embedding) and COIL-20 (leave-one-out 1-NN accuracy and k-means NMI of a 10-D
  embedding).

* ``scale`` (not in the default parts) -- the GraphKPCA Prefect flow on n x 32 points (default 1e6) with
  2,000 landmarks and a kNN graph: wall time and peak memory.

Usage: ``python benchmarks/reproduce_graph_kpca.py --draws 10 --json out.json --out plots/``
       ``python benchmarks/reproduce_graph_kpca.py --parts scale --scale-n 1000000``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sklearn.cluster import KMeans  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.linear_model import LinearRegression  # noqa: E402
from sklearn.manifold import LocallyLinearEmbedding  # noqa: E402
from sklearn.metrics import normalized_mutual_info_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, train_test_split  # noqa: E402
from sklearn.neighbors import NearestNeighbors  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

from eigenflow.spectral.methods.graph_kpca import LNEG, GraphKPCA  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import graph_kpca_usps as usps  # noqa: E402

DATA = ROOT / "data"


def load(name):
    with np.load(DATA / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"].astype(np.int64)


def svm():
    return make_pipeline(StandardScaler(), LinearSVC(C=1.0, max_iter=20000))


# ------------------------------------------------------------------------------------------ faces
def run_faces(draws, seed, name="orl", d_grid=(5, 10, 20, 30, 40, 60, 80)):
    X, y = load(name)
    X = X / 255.0
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    kp = {"gamma": 1.0 / np.median(sq[sq > 0])}  # rbf bandwidth: median squared distance
    methods = {
        "PCA": lambda d: PCA(d, svd_solver="full"),
        "KPCA": lambda d: GraphKPCA(d, kernel="rbf", kernel_params=kp, gamma=0.0, graph=None),
        "GKPCA": lambda d: GraphKPCA(d, kernel="rbf", kernel_params=kp, gamma=1.0, graph="knn", n_neighbors=5,
                                     laplacian="symmetric"),
    }
    rows = []
    for draw in range(draws):
        tr, te = train_test_split(np.arange(len(y)), test_size=0.2, stratify=y, random_state=seed + draw)
        for d in d_grid:
            for mname, make in methods.items():
                t0 = time.perf_counter()
                Z = make(d).fit_transform(X)
                t_fit = time.perf_counter() - t0
                grid = GridSearchCV(svm(), {"linearsvc__C": [0.1, 1.0, 10.0]}, cv=5).fit(Z[tr], y[tr])
                rows.append(dict(draw=draw, d=d, method=mname, err=float(np.mean(grid.predict(Z[te]) != y[te])),
                                 fit_s=t_fit))
        print(f"  faces draw {draw} done", flush=True)
    print(f"\n{name.upper()}: test error of a linear SVM (80/20, C by 5-fold CV) and fit time, mean over draws")
    print(f"{'method':6} " + " ".join(f"d={d:<4}" for d in d_grid))
    summary = {}
    for mname in methods:
        errs = [np.mean([r["err"] for r in rows if r["method"] == mname and r["d"] == d]) for d in d_grid]
        times = [np.mean([r["fit_s"] for r in rows if r["method"] == mname and r["d"] == d]) for d in d_grid]
        summary[mname] = {"err": errs, "fit_s": times}
        print(f"{mname:6} " + " ".join(f"{e:6.3f}" for e in errs) + "   time " + " ".join(f"{t:5.2f}" for t in times))
    return rows, summary, list(d_grid)


# ------------------------------------------------------------------------------------------ LNE / LNEG
def lne_methods(k, d):
    return {
        "PCA": lambda: PCA(d),
        "LLE": lambda: LocallyLinearEmbedding(n_neighbors=k, n_components=d, eigen_solver="dense"),
        "LNE": lambda: LNEG(d, n_neighbors=k, degree=2, l1=0.01, gamma=0.0),
        "LNEG": lambda: LNEG(d, n_neighbors=k, degree=2, l1=0.01, gamma=0.1, graph="cosine"),
    }


def run_lne(draws, seed):
    from sklearn.datasets import make_swiss_roll

    rows = []
    for draw in range(draws):
        X, t = make_swiss_roll(800, noise=0.05, random_state=seed + draw)
        h = X[:, 1]
        for mname, make in lne_methods(10, 2).items():
            t0 = time.perf_counter()
            Z = make().fit_transform(X)
            fit_s = time.perf_counter() - t0
            r2 = [LinearRegression().fit(Z, v).score(Z, v) for v in (t, h)]
            rows.append(dict(data="swissroll", draw=draw, method=mname, r2_t=r2[0], r2_h=r2[1], fit_s=fit_s))
    X, y = load("coil20")
    for mname, make in lne_methods(10, 10).items():
        t0 = time.perf_counter()
        Z = make().fit_transform(X)
        fit_s = time.perf_counter() - t0
        nbr = NearestNeighbors(n_neighbors=2).fit(Z).kneighbors(Z, return_distance=False)[:, 1]
        acc = float(np.mean(y[nbr] == y))  # leave-one-out 1-NN: the nearest other point
        nmi = np.mean([normalized_mutual_info_score(y, KMeans(20, n_init=10, random_state=seed + s).fit_predict(Z))
                       for s in range(draws)])
        rows.append(dict(data="coil20", method=mname, loo_1nn=acc, nmi=float(nmi), fit_s=fit_s))
    print("\nSwiss roll (n = 800, noise 0.05, k = 10): R^2 of t and h on the 2-D embedding (mean over draws)")
    summary = {}
    for mname in lne_methods(10, 2):
        sub = [r for r in rows if r["data"] == "swissroll" and r["method"] == mname]
        summary[f"swissroll|{mname}"] = {k: float(np.mean([r[k] for r in sub])) for k in ("r2_t", "r2_h", "fit_s")}
        print(f"  {mname:5} R2(t) {summary[f'swissroll|{mname}']['r2_t']:.3f}  R2(h) "
              f"{summary[f'swissroll|{mname}']['r2_h']:.3f}  fit {summary[f'swissroll|{mname}']['fit_s']:.2f} s")
    print("COIL-20 (1440 x 1024, k = 10, d = 10): leave-one-out 1-NN accuracy, k-means NMI")
    for r in rows:
        if r["data"] == "coil20":
            summary[f"coil20|{r['method']}"] = {k: r[k] for k in ("loo_1nn", "nmi", "fit_s")}
            print(f"  {r['method']:5} 1-NN {r['loo_1nn']:.3f}  NMI {r['nmi']:.3f}  fit {r['fit_s']:.2f} s")
    return rows, summary


# ------------------------------------------------------------------------------------------ scale
def run_scale(n, landmarks, rank, workers, n_neighbors=10, n_labeled=1000, n_eval=100_000):
    """GraphKPCA through the generic flow ``embed(method="graph_kpca")`` on the lifted Swiss roll (n x 32):
    ingest -> NN-descent kNN graph -> Nystrom + implicit-operator fit -> per-chunk write-back of every point.
    Wall time and peak RSS of the process tree (Dask workers included). Quality (the embedding is unsupervised):
    1-NN band classification in the 2-D embedding with ``n_labeled`` random points as references, scored on
    ``n_eval`` other random points, beside 1-NN with the same references in the input space and LabelSpreading
    on a subsample (same points)."""
    import os
    import shutil

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_support import DATA_CACHE, PeakMemory, baselines, gb, manifold_npy, nn_accuracy, print_quality
    os.environ.setdefault("PREFECT_HOME", str(DATA_CACHE.parent / "prefect-bench"))
    from eigenflow.tasks._env import apply_env_defaults

    apply_env_defaults()  # no Prefect analytics, a longer ephemeral-server startup timeout for busy machines
    from eigenflow.flows.embed import embed
    from eigenflow.storage.embedding_io import read_embedding

    x_path, y_path = manifold_npy(n, n_features=32)
    store = DATA_CACHE / f"graph_kpca_{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    with PeakMemory() as mem:
        out = embed(str(x_path), str(store), method="graph_kpca",
                    params={"n_components": 2, "n_landmarks": landmarks, "nystrom_rank": rank,
                            "n_neighbors": n_neighbors, "solver": "nystrom"},
                    n_workers=workers, random_state=0)
    total = time.perf_counter() - t0
    Z = read_embedding(str(store), out["run"])
    shutil.rmtree(store, ignore_errors=True)
    res = {"n": n, "landmarks": landmarks, "nystrom_rank": rank, "status": out["status"], "total_s": total,
           "flow_s": out.get("seconds"), "stages": out.get("stages"), "peak_rss_gb": mem.peak_bytes / 1e9}
    print(f"\nGraphKPCA flow n={n} x 32, {landmarks} landmarks (rank {rank}), kNN k={n_neighbors}: "
          f"{out['status']} in {total:.1f} s, peak RSS {gb(mem.peak_bytes)}; stages {out.get('stages')}")
    y = np.load(y_path)
    pick = np.random.default_rng(0).permutation(n)
    lab, ev = pick[:n_labeled], np.sort(pick[n_labeled:n_labeled + n_eval])
    refs = baselines(np.load(x_path, mmap_mode="r"), y, lab, ev, n_neighbors=n_neighbors)
    res["quality"] = {"embedding_1nn": nn_accuracy(Z[lab], y[lab], Z[ev], y[ev]), **refs}
    print_quality(f"1-NN in the 2-D embedding, {n_labeled} random references, {ev.size} points",
                  res["quality"]["embedding_1nn"], refs)
    return res


# ------------------------------------------------------------------------------------------ plots
def plot_faces(summary, d_grid, out, name="orl"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for mname, s in summary.items():
        axes[0].plot(d_grid, s["err"], marker="o", label=mname)
        axes[1].plot(d_grid, s["fit_s"], marker="o", label=mname)
    axes[0].set(title=f"{name.upper()}: test error vs d (Fig. 1a)", xlabel="d", ylabel="error")
    axes[1].set(title="fit time vs d (Fig. 1b)", xlabel="d", ylabel="seconds")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default="usps,faces,lne")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--ablation-draws", type=int, default=3, help="draws of the 'usps_ablation' part")
    ap.add_argument("--scale-n", type=int, default=1_000_000, help="points of the 'scale' part")
    ap.add_argument("--scale-landmarks", type=int, default=2000)
    ap.add_argument("--scale-rank", type=int, default=256, help="Nystrom rank kept (Phi is n x rank)")
    ap.add_argument("--scale-workers", type=int, default=1)
    args = ap.parse_args(argv)
    if args.draws < 1:
        ap.error(f"--draws must be >= 1; got {args.draws}")
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    result = {"draws": args.draws, "seed": args.seed}
    t0 = time.perf_counter()
    if "usps" in parts:
        rows = usps.run_usps(*load("usps"), args.draws, args.seed)
        result["usps"] = usps.table_usps(rows)
        usps.plot_usps(rows, args.out)
    if "usps_diag" in parts:
        result["usps_diag"] = usps.spectrum_diagnostic(*load("usps"), args.seed)
    if "usps_ablation" in parts:
        rows = usps.run_usps_ablation(*load("usps"), args.ablation_draws, args.seed)
        result["usps_ablation"] = {"draws": args.ablation_draws, **usps.table_ablation(rows)}
    if "faces" in parts:
        _, summary, d_grid = run_faces(args.draws, args.seed)
        result["orl"] = {"d": d_grid, **summary}
        plot_faces(summary, d_grid, args.out)
    if "lne" in parts:
        _, summary = run_lne(args.draws, args.seed)
        result["lne"] = summary
    if "scale" in parts:
        result["scale"] = run_scale(args.scale_n, args.scale_landmarks, args.scale_rank, args.scale_workers)
    result["total_s"] = time.perf_counter() - t0
    print(f"\ntotal {result['total_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=float))


if __name__ == "__main__":
    main()
