"""Exact kNN graph: eigenflow's ``knn_graph(method="exact")`` against scikit-learn's kd_tree, ball_tree and brute.

Every method runs in this process, interleaved (ours, kd_tree, ball_tree, brute, [cKDTree], ours, ...), and the
table shows the median of ``--repeats`` wall times. scikit-learn runs as a user would run it:
``NearestNeighbors(n_neighbors=k + 1, algorithm=..., n_jobs=-1).fit(X).kneighbors(X)`` (the point itself
dropped), on the same float64 X. Quality: recall of our graph against scikit-learn's float64 brute force (must be
1.0 on these tie-free data) and the largest absolute difference of the sorted distances of each row.

``--crossover`` instead times, for the ``method="auto"`` rule, eigenflow's exact index against NN-descent built warm
(pynndescent's numba kernels loaded by a first build and query in this process), each followed by a query of
``--query-fraction * n`` new points, over ``--sizes`` and ``--dims`` (``--crossover-data``: torus, mixture, roll,
or gauss, the exact search's worst case). Results: benchmarks/results/knn_exact.md.

    .venv/bin/python benchmarks/bench_knn_exact.py                      # the table, k = 15, 3 repeats
    .venv/bin/python benchmarks/bench_knn_exact.py --crossover --sizes 30000 100000 300000 --dims 8 32 128

Other scripts call :func:`run` (one row of the table) and :func:`crossover` (one n, d point).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_support import PeakMemory  # noqa: E402
from eigenflow.spectral.datasets import _random_orthonormal, make_swiss_roll_lifted  # noqa: E402
from eigenflow.spectral.neighbours.index import KNNIndex
from eigenflow.spectral.neighbours.knn import knn_graph  # noqa: E402

K = 15
SKLEARN_ALGORITHMS = ("kd_tree", "ball_tree", "brute")
#: (data, n, d) rows of the default table
TABLE = (("torus", 100_000, 24), ("mixture", 100_000, 32), ("torus", 100_000, 32), ("roll", 30_000, 16))
DATA = ("torus", "mixture", "roll", "gauss")


def make_data(name: str, n: int, d: int, seed: int = 0) -> np.ndarray:
    """float64 (n, d) test data: ``"torus"`` (a torus, radii 3 and 1, isometrically lifted into d dimensions plus
    N(0, 0.05^2) noise per coordinate), ``"mixture"`` (20 Gaussian clusters, centres N(0, 16 I), unit variance),
    ``"roll"`` (:func:`spectral.datasets.make_swiss_roll_lifted`, noise 0.05) or ``"gauss"`` (one standard
    Gaussian: no structure at all, the exact search's worst case)."""
    rng = np.random.default_rng(seed)
    if name == "torus":
        u, v = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * np.pi, n)
        P = np.column_stack([(3 + np.cos(v)) * np.cos(u), (3 + np.cos(v)) * np.sin(u), np.sin(v)])
        return P @ _random_orthonormal(d, 3, rng).T + rng.normal(scale=0.05, size=(n, d))
    if name == "mixture":
        centres = rng.normal(scale=4.0, size=(20, d))
        return centres[rng.integers(0, 20, n)] + rng.normal(size=(n, d))
    if name == "roll":
        return make_swiss_roll_lifted(n, n_features=d, random_state=seed)[0].astype(np.float64)
    if name == "gauss":
        return rng.normal(size=(n, d))
    raise ValueError(f"data must be one of {list(DATA)}; got {name!r}")


def _drop_self(indices: np.ndarray, distances: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, k + 1) answers of the training points themselves -> (n, k) without the point (else the last column)."""
    n = indices.shape[0]
    own = indices == np.arange(n)[:, None]
    drop = np.where(own.any(axis=1), own.argmax(axis=1), k)
    keep = np.ones_like(own)
    keep[np.arange(n), drop] = False
    return indices[keep].reshape(n, k), distances[keep].reshape(n, k)


def _sklearn(X: np.ndarray, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.neighbors import NearestNeighbors

    dist, ind = NearestNeighbors(n_neighbors=K + 1, algorithm=algorithm, n_jobs=-1).fit(X).kneighbors(X)
    return _drop_self(ind, dist, K)


def _ckdtree(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy.spatial import cKDTree

    dist, ind = cKDTree(X).query(X, K + 1, workers=-1)
    return _drop_self(ind, dist, K)


def _ours(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return knn_graph(X, K, method="exact")


def _timed(fn, X):
    gc.collect()
    t0 = time.perf_counter()
    out = fn(X)
    return time.perf_counter() - t0, out


def _peak_growth(fn, X) -> int:
    """Peak RSS above the RSS before ``fn(X)`` (bytes; sampled every 10 ms)."""
    import psutil

    gc.collect()
    before = psutil.Process().memory_info().rss
    with PeakMemory(interval=0.01, tree=False) as peak:
        fn(X)
    return peak.peak_bytes - before


def run(n: int, d: int, repeats: int = 3, data: str | None = None, ckdtree: bool = True) -> dict:
    """One row of the table: ``data`` (default "roll" for d <= 16, else "torus") of n x d points, k = 15.

    Returns a dict: ``n``, ``d``, ``data``, ``seconds`` (method -> the ``repeats`` wall times, interleaved),
    ``median`` (method -> seconds), ``fastest_sklearn``, ``ratio`` (ours / fastest scikit-learn), ``recall`` (ours
    against scikit-learn's float64 brute force), ``max_abs_distance_diff``, ``peak_rss_growth`` (bytes, our first
    full run in this process), ``x_bytes`` and ``first_call`` (seconds of our untimed first call, on 2,000 of the
    points: the kernels' load from the compiled-code cache, or their compile).
    """
    data = data or ("roll" if d <= 16 else "torus")
    X = make_data(data, n, d)
    first, _ = _timed(_ours, X[:2000])  # the kernels are loaded (or compiled) once per process
    peak = _peak_growth(_ours, X)
    methods = {"ours": _ours, **{a: (lambda Z, a=a: _sklearn(Z, a)) for a in SKLEARN_ALGORITHMS}}
    if ckdtree:
        methods["cKDTree"] = _ckdtree
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    answers = {}
    for _ in range(repeats):
        for name, fn in methods.items():
            elapsed, answers[name] = _timed(fn, X)
            seconds[name].append(elapsed)
    median = {name: float(np.median(v)) for name, v in seconds.items()}
    fastest = min(SKLEARN_ALGORITHMS, key=median.get)
    (ours_i, ours_d), (ref_i, ref_d) = answers["ours"], answers["brute"]
    recall = float(np.mean([np.intersect1d(a, b).size / K for a, b in zip(ours_i, ref_i)]))
    diff = float(np.max(np.abs(np.sort(ours_d.astype(np.float64), axis=1) - np.sort(ref_d, axis=1))))
    return {"n": n, "d": d, "data": data, "k": K, "seconds": seconds, "median": median, "fastest_sklearn": fastest,
            "ratio": median["ours"] / median[fastest], "recall": recall, "max_abs_distance_diff": diff,
            "peak_rss_growth": int(peak), "x_bytes": int(X.nbytes), "first_call": first}


def crossover(n: int, d: int, repeats: int = 3, data: str = "torus", query_fraction: float = 0.1) -> dict:
    """Exact index vs warm NN-descent at one (n, d): ``KNNIndex.build`` (graph included) and a query of
    ``query_fraction * n`` new points, interleaved, ``repeats`` times.

    Returns a dict: ``n``, ``d``, ``data``, ``build`` / ``query`` (method -> median seconds), ``samples`` (method ->
    [(build, query) ...]) and ``nndescent_recall`` (graph recall of NN-descent against the exact graph).
    """
    X = make_data(data, n, d)
    Q = make_data(data, max(1, int(query_fraction * n)), d, seed=1)
    for method in ("exact", "nndescent"):  # compile / load both, outside the timings
        KNNIndex.build(X[:2000], K, method=method, random_state=0).query(Q[:10], K)
    samples: dict[str, list[tuple[float, float]]] = {"exact": [], "nndescent": []}
    graphs = {}
    for _ in range(repeats):
        for method in samples:
            gc.collect()
            t0 = time.perf_counter()
            index = KNNIndex.build(X, K, method=method, random_state=0)
            t1 = time.perf_counter()
            if query_fraction > 0:
                index.query(Q, K)
            samples[method].append((t1 - t0, time.perf_counter() - t1))
            graphs[method] = index.neighbor_graph()[0]
            del index
    recall = float(np.mean([np.intersect1d(a, b).size / K for a, b in zip(graphs["nndescent"], graphs["exact"])]))
    return {"n": n, "d": d, "data": data, "samples": samples,
            "build": {m: float(np.median([s[0] for s in v])) for m, v in samples.items()},
            "query": {m: float(np.median([s[1] for s in v])) for m, v in samples.items()},
            "nndescent_recall": recall}


def _print_row(r: dict) -> None:
    m = r["median"]
    extra = f" {m['cKDTree']:8.2f}" if "cKDTree" in m else ""
    print(f"{r['data']:>8s} {r['n']:>7d} {r['d']:>3d} | {m['ours']:7.2f} | {m['kd_tree']:7.2f} {m['ball_tree']:9.2f} "
          f"{m['brute']:7.2f}{extra} | {r['fastest_sklearn']:>9s} {r['ratio']:5.2f} | {r['recall']:.4f} "
          f"{r['max_abs_distance_diff']:.1e} | {r['peak_rss_growth'] / 1e6:6.0f} MB ({r['x_bytes'] / 1e6:.0f} MB X)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (median reported)")
    parser.add_argument("--rows", nargs="+", default=None, metavar="DATA:N:D",
                        help="table rows, e.g. torus:100000:24 (default: the four of TABLE)")
    parser.add_argument("--no-ckdtree", action="store_true", help="leave scipy's cKDTree out of the table")
    parser.add_argument("--crossover", action="store_true", help="exact vs warm NN-descent (the auto rule)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 300_000])
    parser.add_argument("--dims", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--crossover-data", default="torus", choices=DATA)
    parser.add_argument("--query-fraction", type=float, default=0.1,
                        help="crossover: new points queried, as a fraction of n (0: builds only)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    args = parser.parse_args()
    results = []
    if args.crossover:
        print(f"{'data':>8s} {'n':>7s} {'d':>3s} | exact build query | nndescent build query | NN-descent recall")
        for n in args.sizes:
            for d in args.dims:
                r = crossover(n, d, args.repeats, args.crossover_data, args.query_fraction)
                b, q = r["build"], r["query"]
                print(f"{r['data']:>8s} {n:>7d} {d:>3d} | {b['exact']:11.2f} {q['exact']:5.2f} | "
                      f"{b['nndescent']:15.2f} {q['nndescent']:5.2f} | {r['nndescent_recall']:.4f}", flush=True)
                results.append(r)
    else:
        rows = [(r.split(":")[0], int(r.split(":")[1]), int(r.split(":")[2])) for r in args.rows] if args.rows \
            else TABLE
        print(f"k = {K}, median of {args.repeats} interleaved runs (s); ratio = ours / fastest scikit-learn")
        print(f"{'data':>8s} {'n':>7s} {'d':>3s} | {'ours':>7s} | {'kd_tree':>7s} {'ball_tree':>9s} {'brute':>7s}"
              f"{'' if args.no_ckdtree else ' cKDTree':>9s} | {'fastest':>9s} ratio | recall  max|dd| | peak RSS")
        for data, n, d in rows:
            r = run(n, d, args.repeats, data, ckdtree=not args.no_ckdtree)
            _print_row(r)
            results.append(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
