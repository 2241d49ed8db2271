"""Defaults vs tuned: each supervised / semi-supervised estimator with its defaults, with the previous defaults
and with the setting of its reproduction, beside 1-NN on the raw inputs, on two bundled datasets.

Protocol (fixed seeds, ``--splits`` random splits per dataset): USPS, 30 training images per class (300) and 2,000
random other images as the test set; COIL-20, 10 training images per class (200) and the other 1,240 as the test
set; Ionosphere, 20 training points per class and the other 311 as the test set; inputs as stored (pixels in
[0, 1], Ionosphere's features raw); d = max(c - 1, 2) where the estimator takes a dimension (DNE / MFA / LFDA
choose theirs). TSK / RSK refuse COIL-20: its kNN graph has 9 / 6 / 2 connected components at k = 6 / 10 / 30
(separate objects), and both need a connected graph. TSK's previous default eta = 2 makes the LP's optimum
mu = 0 on USPS: that row is TSK's fallback kernel (RSK's spectrum, ``fallback_kernel_``, with a warning).

- supervised embeddings (NSSE, SUPLAP, DNE, MFA, LFDA; linear mode): fit on the training set, ``transform`` the test
  set, accuracy of 1-NN in the embedding with the training points as references;
- semi-supervised classifiers (TSK, RSK): fit on training + test points with the test labels hidden, accuracy
  of their transductive labels (eq. 5) on the test points;
- GraphKPCA with the training labels as constraints (eq. 24), MultiGraphKPCA and LNEG (unsupervised): fit on
  training + test points, 1-NN in the embedding with the training points as references;
- references on the same points: 1-NN on the raw inputs, scikit-learn ``LabelSpreading`` (kNN kernel, k = 10).

"reproduction" = the setting of the estimator's reproduction script: NSSE / SUPLAP as chosen by the CV of
``reproduce_nsse.py`` for COIL-20 at 10 per class (NSSE mu1 0.01, mu2 0.01, mu3 1000; SUPLAP mu1 0.01, sigma 2 s0),
MFA / LFDA as the baselines of ``reproduce_nsse.py`` (PCA reduction keeping every direction, k = 3), DNE as
``reproduce_dne_mfa_lfda.py``'s linear variant (C + eps I, T = unit norm, k = 3), TSK / RSK as ``reproduce_tsk.py``
(k = 6, m = 30, TSK without eq. 8 - its TSK-nodecay row), GraphKPCA as ``graph_kpca_usps.py`` (RBF gamma 0.5,
no data graph, gamma_must = gamma_cannot = 0.5).

    python benchmarks/defaults_vs_tuned.py --splits 2 --json benchmarks/results/defaults_vs_tuned.json \
        --md benchmarks/results/defaults_vs_tuned.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.semi_supervised import LabelSpreading  # noqa: E402

from eigenflow.spectral.methods.discriminant import DNE, LFDA, MFA  # noqa: E402
from eigenflow.spectral.methods.graph_kpca import LNEG, GraphKPCA, MultiGraphKPCA  # noqa: E402
from eigenflow.spectral.methods.nsse import NSSE, SupervisedLaplacianEigenmaps  # noqa: E402
from eigenflow.spectral.methods.spectral_kernels import RSK, TSK  # noqa: E402

DATASETS = {"usps": (30, 2000), "coil20": (10, None), "ionosphere": (20, None)}  # training points per class, test
# points (None: the rest)

# (estimator, kind, {setting: factory(d)}); kinds: "supervised", "transductive", "constrained", "unsupervised"
SETTINGS = {
    "NSSE": ("supervised", {
        "defaults": lambda d: NSSE(d, random_state=0),
        "previous defaults": lambda d: NSSE(d, mu1=1.0, random_state=0),
        "reproduction": lambda d: NSSE(d, mu1=0.01, mu2=0.01, mu3=1000.0, max_iter=10, random_state=0)}),
    "SUPLAP": ("supervised", {
        "defaults": lambda d: SupervisedLaplacianEigenmaps(d),
        "previous defaults": lambda d: SupervisedLaplacianEigenmaps(d, mu1=1.0),
        "reproduction": lambda d: SupervisedLaplacianEigenmaps(d, mu1=0.01)}),
    "DNE": ("supervised", {
        "defaults": lambda d: DNE(),
        "previous defaults": lambda d: DNE(regularization="eps"),
        "reproduction": lambda d: DNE(regularization="eps", scaling="unit_norm")}),
    "MFA": ("supervised", {
        "defaults": lambda d: MFA(),
        "previous defaults": lambda d: MFA(regularization="eps"),
        "reproduction": lambda d: MFA(d + 1, regularization="pca", pca_variance=1.0)}),
    "LFDA": ("supervised", {
        "defaults": lambda d: LFDA(),
        "previous defaults": lambda d: LFDA(regularization="eps"),
        "reproduction": lambda d: LFDA(d + 1, regularization="pca", pca_variance=1.0)}),
    "TSK": ("transductive", {
        "defaults": lambda d: TSK(random_state=0),
        "previous defaults": lambda d: TSK(eta=2.0, n_neighbors=6, random_state=0),
        "reproduction": lambda d: TSK(30, n_neighbors=6, constraint="none", random_state=0)}),
    "RSK": ("transductive", {
        "defaults": lambda d: RSK(),
        "previous defaults": lambda d: RSK(n_components=None, n_neighbors=6),
        "reproduction": lambda d: RSK(0.99, n_components=None, n_neighbors=6)}),
    "GraphKPCA (labels as constraints)": ("constrained", {
        "defaults": lambda d: GraphKPCA(d),
        "previous defaults": lambda d: GraphKPCA(d, gamma_must=0.5, gamma_cannot=0.5),
        "reproduction": lambda d: GraphKPCA(d, kernel="rbf", kernel_params={"gamma": 0.5}, gamma=0.0, graph=None,
                                            gamma_must=0.5, gamma_cannot=0.5)}),
    "MultiGraphKPCA (unsupervised)": ("unsupervised", {
        "defaults": lambda d: MultiGraphKPCA(d),
        "previous defaults": None,  # raised ParameterError (no graph given)
        "reproduction": None}),
    "LNEG (unsupervised)": ("unsupervised", {
        "defaults": lambda d: LNEG(d),
        "previous defaults": None,  # unchanged
        "reproduction": None}),
}


def load(name):
    with np.load(REPO / "data" / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"].astype(np.int64)


def split(y, per_class, n_test, seed):
    rng = np.random.default_rng(seed)
    tr = np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in np.unique(y)])
    rest = np.setdiff1d(np.arange(len(y)), tr)
    te = rest if n_test is None else np.sort(rng.choice(rest, n_test, replace=False))
    return np.sort(tr), te


def nn_acc(Ztr, ytr, Zte, yte):
    return float(np.mean(KNeighborsClassifier(1).fit(Ztr, ytr).predict(Zte) == yte))


def score(kind, factory, d, X, y, tr, te):
    est = factory(d)
    if kind == "supervised":
        est.fit(X[tr], y[tr])
        return nn_acc(est.transform(X[tr]), y[tr], est.transform(X[te]), y[te])
    pts = np.r_[tr, te]
    Xs, ys = X[pts], y[pts]
    semi = ys.copy()
    semi[len(tr):] = -1
    if kind == "transductive":
        return float(np.mean(est.fit(Xs, semi).transduction_[len(tr):] == ys[len(tr):]))
    Z = est.fit(Xs, semi).embedding_ if kind == "constrained" else est.fit(Xs).embedding_
    return nn_acc(Z[:len(tr)], ys[:len(tr)], Z[len(tr):], ys[len(tr):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--estimators", default=",".join(SETTINGS))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    names = args.datasets.split(",")
    ests = [e for e in SETTINGS if e in args.estimators.split(",")]
    t0 = time.perf_counter()
    res: dict = {}
    for name in names:
        X, y = load(name)
        d = max(int(np.unique(y).size) - 1, 2)
        per_class, n_test = DATASETS[name]
        for s in range(args.splits):
            tr, te = split(y, per_class, n_test, seed=s)
            res.setdefault((name, "references", "1-NN on the raw inputs"), []).append(nn_acc(X[tr], y[tr], X[te], y[te]))
            semi = np.r_[y[tr], -np.ones(len(te), dtype=np.int64)]
            ls = LabelSpreading(kernel="knn", n_neighbors=10, max_iter=1000).fit(X[np.r_[tr, te]], semi)
            res.setdefault((name, "references", "LabelSpreading (kNN, k = 10)"), []).append(
                float(np.mean(ls.transduction_[len(tr):] == y[te])))
            for est in ests:
                kind, facs = SETTINGS[est]
                for setting, factory in facs.items():
                    if factory is None:
                        continue
                    t1 = time.perf_counter()
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            acc = score(kind, factory, d, X, y, tr, te)
                    except Exception as e:  # noqa: BLE001  (an error of a setting is a result: print it)
                        acc = f"{type(e).__name__}"
                    res.setdefault((name, est, setting), []).append(acc)
                    res.setdefault((name, est, setting + " seconds"), []).append(time.perf_counter() - t1)
            print(f"{name} split {s} done ({time.perf_counter() - t0:.0f} s)", flush=True)

    def fmt(vals):
        if all(isinstance(v, float) for v in vals):
            return f"{np.mean(vals):.3f}"
        return "/".join(sorted({v if isinstance(v, str) else f"{v:.3f}" for v in vals}))

    lines = [f"Held-out accuracy (mean over {args.splits} splits; USPS 30 per class + 2,000 test images, COIL-20 10 per "
             "class + 1,240 test images, Ionosphere 20 per class + 311 test points)", "",
             "| estimator | setting | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for est in ["references"] + ests:
        settings = (["1-NN on the raw inputs", "LabelSpreading (kNN, k = 10)"] if est == "references"
                    else [k for k, f in SETTINGS[est][1].items() if f is not None])
        for setting in settings:
            lines.append(f"| {est} | {setting} | " + " | ".join(fmt(res[(n, est, setting)]) for n in names) + " |")
    table = "\n".join(lines)
    print("\n" + table)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"splits": args.splits, "seconds": time.perf_counter() - t0,
                                         "records": [{"dataset": n, "estimator": e, "setting": s, "values": v}
                                                     for (n, e, s), v in res.items()]}, indent=1))
    if args.md:
        args.md.write_text("# Defaults vs tuned (`benchmarks/defaults_vs_tuned.py`)\n\n" + __doc__.split("\n\n", 1)[1]
                           + "\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
