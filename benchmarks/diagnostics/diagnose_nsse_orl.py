"""Diagnose why NSSE loses to LFDA on ORL at small training sizes.

Run pinned to one core from the repository root, e.g.
    taskset -c 1 env OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/diagnostics/diagnose_nsse_orl.py \
        oracle --size 3 --realizations 3 --prep max
Every hypothesis is evaluated on the same realizations as the reproduction script (its seeds): the NSSE test
error over a grid (an ORACLE: chosen with the test labels, a bound on what any CV could reach, never used for
the reported tables), and LFDA's error on the same splits and preprocessing. mu3 is given in units of s0^2
(s0 = median nearest-neighbour distance of the training images) so that one grid fits every image scaling:
mu3 / sigma^2 = m3 / (sigma / s0)^2.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository (spectral)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (reproduce_nsse)
import reproduce_nsse as R  # noqa: E402
from eigenflow.spectral.methods.nsse import NSSE  # noqa: E402
from eigenflow.spectral.methods.nsse._graphs import class_graphs  # noqa: E402

SEED_BASE = {("orl", 3): 3000, ("orl", 4): 4000, ("orl", 5): 5000, ("coil20", 5): 0, ("coil20", 10): 1000,
             ("coil20", 15): 2000}
DIMS = {"orl": [10, 15, 20, 30, 39], "coil20": [5, 8, 10, 15, 19]}


def preprocess(X, how):
    """``max``: X / max (the reproduction's [0, 1]); ``unit``: each image to unit norm; ``zmun``: each image
    centred (mean pixel 0) then unit norm."""
    X = X / X.max()
    if how == "unit":
        return X / np.linalg.norm(X, axis=1, keepdims=True)
    if how == "zmun":
        Xc = X - X.mean(axis=1, keepdims=True)
        return Xc / np.linalg.norm(Xc, axis=1, keepdims=True)
    return X


def s0_of(Xtr):
    D2 = R.squared_distances(Xtr, Xtr)
    np.fill_diagonal(D2, np.inf)
    return float(np.sqrt(np.median(D2.min(axis=1))))


def default_bandwidth(Xtr, ytr, k):
    return class_graphs(R.squared_distances(Xtr, Xtr), ytr, k, None)[2]


def nsse_err(X, y, tr, te, dims, mu1, mu2, m3, k=R.N_NEIGHBORS, bw=1.0, ridge=1e-8, max_iter=R.NSSE_MAX_ITER):
    """NSSE test error per d; mu3 = m3 * s0^2, graph bandwidth = bw x the default (median within-class edge)."""
    s0 = s0_of(X[tr])
    t = bw * default_bandwidth(X[tr], y[tr], k)
    out = []
    for d in dims:
        m = NSSE(d, mu1=mu1, mu2=mu2, mu3=m3 * s0**2, n_neighbors=k, graph_bandwidth=t, max_iter=max_iter,
                 ridge=ridge)
        m.fit(X[tr], y[tr])
        out.append(R.nn_error(m.embedding_, y[tr], m.transform(X[te]), y[te]))
    return out


def lfda_err(X, y, tr, te, dims, per_class):
    from eigenflow.spectral.methods.discriminant import LFDA

    est = LFDA(max(dims), n_neighbors=min(3, per_class - 1), mode="linear", regularization="pca", pca_variance=1.0).fit(X[tr], y[tr])
    return R.nested_errors(est, X, y, tr, te, dims)


def summarize(errs, axes, lfda):
    """errs (reals, *grid, D). Oracle figures: per-setting best-d-of-mean-curve (the table's metric)."""
    mean_curve = errs.mean(axis=0)                       # (*grid, D)
    best_setting = np.unravel_index(np.argmin(mean_curve), mean_curve.shape)
    per_real = errs.reshape(errs.shape[0], -1).min(axis=1)
    std_at = errs[(slice(None), *best_setting)].std()
    lf = np.array(lfda)                                  # (reals, D)
    lf_i = int(np.argmin(lf.mean(0)))
    res = {"oracle_one_setting": {"error_mean": float(mean_curve[best_setting]), "error_std": float(std_at),
                                  **{n: axes[n][i] for n, i in zip(axes, best_setting[:-1])},
                                  "d": axes["d"][best_setting[-1]]},
           "oracle_per_realization_mean": float(per_real.mean()),
           "LFDA": {"error_mean": float(lf.mean(0)[lf_i]), "error_std": float(lf[:, lf_i].std()), "d": axes["d"][lf_i]},
           "profiles": {}}
    for ax, name in enumerate(list(axes)[:-1]):          # best mean-curve error with one parameter fixed
        other = tuple(i for i in range(mean_curve.ndim) if i != ax)
        res["profiles"][name] = {str(v): round(float(e), 4) for v, e in zip(axes[name], mean_curve.min(axis=other))}
    return res


def cmd_oracle(a):
    X, y = R.load(a.dataset)
    X = preprocess(X, a.prep)
    dims = DIMS[a.dataset]
    axes = {"mu1": a.mu1, "mu2": a.mu2, "m3": a.m3, "k": a.k, "bw": a.bw, "ridge": a.ridge, "d": dims}
    shape = [len(v) for v in list(axes.values())[:-1]]
    errs, lfda = np.empty((a.realizations, *shape, len(dims))), []
    t0 = time.perf_counter()
    for r in range(a.realizations):
        tr, te = R.split(y, a.size, np.random.default_rng(SEED_BASE[(a.dataset, a.size)] + r))
        lfda.append(lfda_err(X, y, tr, te, dims, a.size))
        for idx in itertools.product(*[range(n) for n in shape]):
            p = [axes[n][i] for n, i in zip(axes, idx)]
            errs[(r, *idx)] = nsse_err(X, y, tr, te, dims, *p[:3], k=p[3], bw=p[4], ridge=p[5])
        print(f"realization {r} done, {time.perf_counter() - t0:.0f} s", flush=True)
    res = {"dataset": a.dataset, "size": a.size, "prep": a.prep, "realizations": a.realizations,
           "grid": {k: v for k, v in axes.items()}, **summarize(errs, axes, lfda),
           "seconds": time.perf_counter() - t0}
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        with a.json.open("a") as f:
            f.write(json.dumps(res) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["oracle"])
    ap.add_argument("--dataset", default="orl")
    ap.add_argument("--size", type=int, default=3)
    ap.add_argument("--realizations", type=int, default=3)
    ap.add_argument("--prep", default="max", choices=["max", "unit", "zmun"])
    ap.add_argument("--mu1", type=float, nargs="+", default=[0.0, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0])
    ap.add_argument("--mu2", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0])
    ap.add_argument("--m3", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5])
    ap.add_argument("--k", type=int, nargs="+", default=[R.N_NEIGHBORS])
    ap.add_argument("--bw", type=float, nargs="+", default=[1.0])
    ap.add_argument("--ridge", type=float, nargs="+", default=[1e-8],
                    help="NSSE ridge (Psi_r = Psi + ridge I); 1e-8 = the estimator default (near-exact interpolation)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    cmd_oracle(a)


if __name__ == "__main__":
    main()
