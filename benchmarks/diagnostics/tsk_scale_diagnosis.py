"""Why TSK loses at scale: the hypotheses of ``benchmarks/results/tsk.md`` ("TSK at scale") measured in memory.

Data: the lifted Swiss roll of ``bench_tsk_scale.py`` (``spectral.datasets.make_swiss_roll_lifted(n, n_features=32,
random_state=0)``, 6 bands), ``--labeled`` random labeled points drawn as that script does (every class present),
accuracy = fraction of the unlabeled points labeled correctly. For each labeled draw:

- references on the same points: 1-NN on the labeled points in the input space, scikit-learn ``LabelSpreading``
  (kNN kernel, the graph's k, alpha 0.99);
- the graph: connected components of the Hein-Maier kNN graph at k = 6 (the paper's) and at
  ``resolve_n_neighbors("auto", n)``;
- on one basis (the m smallest eigenpairs of the normalized Laplacian at the auto k, trivial pair kept), the
  spectrum: the LP of eq. 14 without eq. 8 ("none"), with eq. 8 at eta = 2 (the paper's, trivial pair kept or
  not) and at eta = 1 (the default), Zhou et al.'s spectrum theta_t = (1 - a) / (1 - a + a lambda_t) (RSK, no
  learning), each with eq. 5 as printed and class-balanced; the number of nonzero mu; the largest / smallest
  predicted class count; 1-NN in the eigenvector coordinates D^-1/2 V (is the basis itself sufficient?).

Usage: python benchmarks/diagnostics/tsk_scale_diagnosis.py [--n 20000] [--labeled 200] [--seeds 0,1,2] [--m 10,30,100]
       [--json benchmarks/results/tsk_scale_diagnosis.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from scipy.sparse.csgraph import connected_components  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.semi_supervised import LabelSpreading  # noqa: E402

from eigenflow.spectral.datasets import make_swiss_roll_lifted  # noqa: E402
from eigenflow.spectral.errors import ParameterError  # noqa: E402
from eigenflow.spectral.neighbours.index import KNNIndex  # noqa: E402
from eigenflow.spectral.methods.spectral_kernels import resolve_n_neighbors, spectral_basis  # noqa: E402
from eigenflow.spectral.methods.spectral_kernels.scores import class_matrix  # noqa: E402
from eigenflow.spectral.methods.spectral_kernels.lp import solve_spectrum_lp  # noqa: E402
from eigenflow.spectral.graph.weights import fit_weight_params, weights_from_params  # noqa: E402

ALPHA = 0.99
#: (name, constraint, eta, trivial pair kept)
LP_VARIANTS = [("LP none", "none", 2.0, True), ("LP decay eta=2", "decay", 2.0, True),
               ("LP decay eta=2, no trivial", "decay", 2.0, False), ("LP decay eta=1 (default)", "decay", 1.0, True)]


def labeled_draw(y: np.ndarray, n_labeled: int, seed: int) -> np.ndarray:
    """As ``bench_tsk_scale.semi_labels``: random points until every class is present."""
    rng = np.random.default_rng(seed)
    while True:
        lab = rng.choice(y.size, n_labeled, replace=False)
        if np.unique(y[lab]).size == np.unique(y).size:
            return lab


def hein_maier_graph(X: np.ndarray, k: int):
    index = KNNIndex.build(X, k, method="exact", random_state=0)
    idx, dist = index.neighbor_graph()
    params, scales, _ = fit_weight_params(dist, weighting="hein_maier", symmetrize="or")  # eq. 2
    return weights_from_params(idx, dist, params, scales)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--labeled", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--m", default="10,30,100")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    ms = [int(s) for s in args.m.split(",")]
    X, y, _ = make_swiss_roll_lifted(args.n, n_features=32, random_state=0)
    X = X.astype(np.float64)
    n, c = y.size, int(y.max()) + 1
    k_auto = resolve_n_neighbors("auto", n)
    rec: dict = {"n": n, "labeled": args.labeled, "seeds": seeds, "k_auto": k_auto, "m": ms, "graph": {}, "runs": []}
    t0 = time.perf_counter()
    for k in sorted({6, k_auto}):
        ncomp, comp = connected_components(hein_maier_graph(X, k), directed=False)
        rec["graph"][k] = {"components": int(ncomp), "sizes": np.sort(np.bincount(comp))[::-1][:4].tolist()}
        print(f"k={k}: {ncomp} connected component(s), largest sizes {rec['graph'][k]['sizes']}")
    W = hein_maier_graph(X, k_auto)
    basis = spectral_basis(W, max(ms), include_trivial=True, eigen_solver="auto", random_state=0)
    V, lam = basis.vectors, basis.values
    E = V[:, 1:] / np.sqrt(basis.degrees)[:, None]  # Laplacian-eigenmaps coordinates
    print(f"basis: {max(ms)} eigenpairs at k={k_auto}, lambda_2 = {lam[1]:.2e}, lambda_{max(ms)} = {lam[-1]:.2e} "
          f"({time.perf_counter() - t0:.1f} s)")
    for seed in seeds:
        lab = labeled_draw(y, args.labeled, seed)
        unl = np.ones(n, bool)
        unl[lab] = False
        semi = -np.ones(n, dtype=np.int64)
        semi[lab] = y[lab]

        def acc(pred):
            return float(np.mean(pred[unl] == y[unl]))

        row = {"seed": seed, "labeled_counts": np.bincount(y[lab], minlength=c).tolist(),
               "1-NN (input space)": acc(KNeighborsClassifier(1).fit(X[lab], y[lab]).predict(X)),
               "LabelSpreading": acc(LabelSpreading(kernel="knn", n_neighbors=k_auto, alpha=ALPHA,
                                                    max_iter=1000).fit(X, semi).transduction_)}
        for m in ms:
            Vm, lm = V[:, :m], lam[:m]
            row[f"m={m} 1-NN on eigenvector coordinates"] = acc(
                KNeighborsClassifier(1).fit(E[lab, :m - 1], y[lab]).predict(E[:, :m - 1]))
            spectra = {"RSK spectrum (no LP)": ((1 - ALPHA) / (1 - ALPHA + ALPHA * lm), Vm)}
            for name, constraint, eta, trivial in LP_VARIANTS:
                Vt, lt = (Vm, lm) if trivial else (V[:, 1:m], lam[1:m])
                try:
                    lp = solve_spectrum_lp(lt, Vt[lab], y[lab], eta=eta, beta=n / args.labeled, constraint=constraint)
                    spectra[name] = (lp.mu, Vt)
                except ParameterError:
                    spectra[name] = None
            for name, sv in spectra.items():
                key = f"m={m} {name}"
                if sv is None:
                    row[key] = "mu = 0"
                    continue
                mu, Vt = sv
                for cw in (None, "balanced"):
                    pred = np.argmax(Vt @ class_matrix(Vt[lab], y[lab], mu, c, cw), axis=1)
                    row[key + ("" if cw is None else ", balanced eq. 5")] = acc(pred)
                    if cw is None:
                        counts = np.bincount(pred[unl], minlength=c)
                        row[key + " nnz mu"] = int(np.sum(mu > 1e-9 * mu.max()))
                        row[key + " max/min predicted class"] = float(counts.max() / max(counts.min(), 1))
        rec["runs"].append(row)
        print(f"seed {seed} done ({time.perf_counter() - t0:.1f} s)")
    keys = [k for k in rec["runs"][0] if k not in ("seed", "labeled_counts")]
    rec["summary"] = {}
    print(f"\nn={n}, {args.labeled} labeled, k={k_auto}, mean over {len(seeds)} labeled draws (unlabeled accuracy):")
    for key in keys:
        vals = [r[key] for r in rec["runs"]]
        if all(isinstance(v, (int, float)) for v in vals):
            rec["summary"][key] = [float(np.mean(vals)), float(np.std(vals))]
            print(f"  {key:62s} {np.mean(vals):8.3f} +- {np.std(vals):.3f}")
        else:
            rec["summary"][key] = vals
            print(f"  {key:62s} {vals}")
    rec["seconds"] = time.perf_counter() - t0
    if args.json:
        args.json.write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
