"""Reproduce the experiments of paper 003 (GRAD, Shen, Traganitis & Giannakis) on the bundled datasets.

Parts (``--parts``, default all):

* ``usps``  -- semi-supervised GRAD KPCA (eq. 24) vs plain KPCA on USPS digit pairs 5/6 and 7/8, 500
  images each per draw, labeled fraction p in {0.05, 0.1, 0.2, 0.3, 0.5}, gamma1 = gamma2 = 0.5,
  Gaussian kernel sigma^2 = 1 (k = exp(-||x - x'||^2 / (2 sigma^2))) on images scaled to unit l2 norm
  (with the stored [0, 1] pixels sigma^2 = 1 makes K ~ I), linear SVM (standardized features, C = 1),
  5-fold CV error over the 1000 images (the paper's protocol) and over the unlabeled images only
  (Figures 3-4).
* ``faces`` -- GKPCA vs KPCA vs PCA on ORL (400 x 1024, D >> N): error of a linear SVM (C by 5-fold CV
  on the 80 %) on a stratified 20 % test split, vs d, and fit time vs d (Figure 1).
* ``lne``   -- LNE / LNEG vs LLE vs PCA: Swiss roll (R^2 of the known arc parameter t and height h
  regressed on the 2-D embedding) and COIL-20 (leave-one-out 1-NN accuracy and k-means NMI of a 10-D
  embedding).

* ``scale`` (not in the default parts) -- the GraphKPCA Prefect flow on n x 32 points (default 1e6) with
  2,000 landmarks and a kNN graph: wall time and peak memory.

Usage: ``python benchmarks/reproduce_paper003.py --draws 10 --json out.json --out plots/``
       ``python benchmarks/reproduce_paper003.py --parts scale --scale-n 1000000``
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
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split  # noqa: E402
from sklearn.neighbors import NearestNeighbors  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

from spectral.grad import LNEG, GraphKPCA  # noqa: E402

DATA = ROOT / "data"
P_GRID = (0.05, 0.1, 0.2, 0.3, 0.5)
D_USPS = (1, 2, 4, 6, 8, 10)
PAIRS = ((5, 6), (7, 8))


def load(name):
    with np.load(DATA / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"].astype(np.int64)


def svm():
    return make_pipeline(StandardScaler(), LinearSVC(C=1.0, max_iter=20000))


def cv_errors(Z, y, unlabeled, seed):
    """5-fold CV error of a linear SVM over all points and over the unlabeled points of each test fold."""
    wrong_all = wrong_unl = n_unl = 0
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=seed).split(Z, y):
        pred = svm().fit(Z[tr], y[tr]).predict(Z[te])
        miss = pred != y[te]
        wrong_all += miss.sum()
        wrong_unl += miss[unlabeled[te]].sum()
        n_unl += unlabeled[te].sum()
    return wrong_all / len(y), wrong_unl / max(n_unl, 1)


# ------------------------------------------------------------------------------------------ USPS
def run_usps(draws, seed):
    X, y = load("usps")
    X = X / np.linalg.norm(X, axis=1, keepdims=True)  # unit-norm images, so sigma^2 = 1 is meaningful
    kp = {"gamma": 0.5}  # 1 / (2 sigma^2), sigma^2 = 1
    rows = []
    rng = np.random.default_rng(seed)
    for a, b in PAIRS:
        for draw in range(draws):
            idx = np.concatenate([rng.choice(np.flatnonzero(y == c), 500, replace=False) for c in (a, b)])
            Xs, ys = X[idx], (y[idx] == b).astype(int)
            kpca = GraphKPCA(max(D_USPS), kernel="rbf", kernel_params=kp, gamma=0.0, graph=None).fit(Xs)
            for p in P_GRID:
                lab = rng.choice(1000, int(round(p * 1000)), replace=False)
                yl = np.full(1000, -1)
                yl[lab] = ys[lab]
                unl = yl < 0
                t0 = time.perf_counter()
                gk = GraphKPCA(max(D_USPS), kernel="rbf", kernel_params=kp, graph=None, gamma_must=0.5,
                               gamma_cannot=0.5).fit(Xs, yl)
                t_fit = time.perf_counter() - t0
                for d in D_USPS:
                    for name, Z in (("GKPCA-SS", gk.embedding_[:, :d]), ("KPCA", kpca.embedding_[:, :d])):
                        e_all, e_unl = cv_errors(Z, ys, unl, seed + draw)
                        rows.append(dict(pair=f"{a}/{b}", draw=draw, p=p, d=d, method=name, err=e_all,
                                         err_unlabeled=e_unl, fit_s=t_fit if name != "KPCA" else None))
        print(f"  usps pair {a}/{b} done", flush=True)
    return rows


def table_usps(rows):
    out = {}
    for pair in sorted({r["pair"] for r in rows}):
        for d in (2, 6):
            for method in ("GKPCA-SS", "KPCA"):
                for key in ("err", "err_unlabeled"):
                    vals = [np.mean([r[key] for r in rows if r["pair"] == pair and r["d"] == d
                                     and r["method"] == method and r["p"] == p]) for p in P_GRID]
                    out[(pair, d, method, key)] = vals
    print("\nUSPS semi-supervised: 5-fold CV error of a linear SVM (mean over draws), vs labeled fraction p")
    print(f"{'pair':5} {'d':>2} {'method':9} {'metric':14} " + " ".join(f"p={p:<5}" for p in P_GRID))
    for (pair, d, method, key), vals in out.items():
        print(f"{pair:5} {d:>2} {method:9} {key:14} " + " ".join(f"{v:7.4f}" for v in vals))
    return {f"{k[0]}|d={k[1]}|{k[2]}|{k[3]}": v for k, v in out.items()}


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
def run_scale(n, landmarks, rank, workers, n_neighbors=10):
    """GraphKPCA through the Prefect flow on the lifted Swiss roll (n x 32): ingest -> NN-descent kNN graph
    -> Nystrom + implicit-operator fit -> per-chunk write-back of every point. Wall time and peak RSS of the
    process tree (Dask workers included)."""
    import os
    import shutil

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import DATA_CACHE, PeakMemory, gb, manifold_npy

    os.environ.setdefault("NUMBA_CACHE_DIR", str(DATA_CACHE.parent / "numba"))
    os.environ.setdefault("PREFECT_HOME", str(DATA_CACHE.parent / "prefect-bench"))
    from tasks._env import apply_env_defaults

    apply_env_defaults()  # STACK.md: no analytics, 90 s ephemeral-server startup on 2 busy cores
    from flows.paper003 import graph_kpca

    x_path, _ = manifold_npy(n, n_features=32)
    store = DATA_CACHE / f"paper003_{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    with PeakMemory() as mem:
        out = graph_kpca(str(x_path), str(store), n_components=2, n_landmarks=landmarks, nystrom_rank=rank,
                         n_neighbors=n_neighbors, n_workers=workers, random_state=0)
    total = time.perf_counter() - t0
    shutil.rmtree(store, ignore_errors=True)
    res = {"n": n, "landmarks": landmarks, "nystrom_rank": rank, "status": out["status"], "total_s": total,
           "flow_s": out["seconds"], "stages": out["stages"], "peak_rss_gb": mem.peak_bytes / 1e9}
    print(f"\nGraphKPCA flow n={n} x 32, {landmarks} landmarks (rank {rank}), kNN k={n_neighbors}: "
          f"{out['status']} in {total:.1f} s, peak RSS {gb(mem.peak_bytes)}; stages {out['stages']}")
    return res


# ------------------------------------------------------------------------------------------ plots
def plot_usps(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for col, pair in enumerate(sorted({r["pair"] for r in rows})):
        ax = axes[col]
        for p in P_GRID:
            e = [np.mean([r["err"] for r in rows if r["pair"] == pair and r["p"] == p and r["d"] == d
                          and r["method"] == "GKPCA-SS"]) for d in D_USPS]
            ax.plot(D_USPS, e, marker="o", label=f"p={p}")
        e = [np.mean([r["err"] for r in rows if r["pair"] == pair and r["d"] == d and r["method"] == "KPCA"])
             for d in D_USPS]
        ax.plot(D_USPS, e, "k--", label="KPCA")
        ax.set(title=f"USPS {pair}: error vs d (Fig. 3)", xlabel="d", ylabel="CV error")
        ax.legend(fontsize=7)
        for j, d in enumerate((2, 6)):
            ax = axes[2 + j]
            for method, style in (("GKPCA-SS", "-o"), ("KPCA", "--s")):
                e = [np.mean([r["err"] for r in rows if r["pair"] == pair and r["p"] == p and r["d"] == d
                              and r["method"] == method]) for p in P_GRID]
                ax.plot(P_GRID, e, style, label=f"{pair} {method}")
            ax.set(title=f"USPS: error vs p, d={d} (Fig. 4)", xlabel="labeled fraction p", ylabel="CV error")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "paper003_usps.png", dpi=110)


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
    fig.savefig(out / f"paper003_{name}.png", dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default="usps,faces,lne")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
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
        rows = run_usps(args.draws, args.seed)
        result["usps"] = table_usps(rows)
        plot_usps(rows, args.out)
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
