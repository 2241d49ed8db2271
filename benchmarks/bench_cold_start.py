"""What a new user pays before the work: eigenflow in fresh processes and fresh Dask workers, against references.

Every eigenflow measurement runs in a fresh Python process (or a freshly started Dask worker) whose compiled-code
cache (``EIGENFLOW_CACHE_DIR``, ``NUMBA_CACHE_DIR`` inside it) is a directory of this benchmark, filled first by
one warm-up process (``eigenflow warm``); the first-ever compile is measured once as well, on an empty cache.
Fresh-process measurements alternate with their references (A, B, A, B, ...) and the medians of ``--repeats``
samples are printed, with the machine's load average before each group.

Groups (targets, as medians after the warm-up process):

- ``api``: ``LaplacianEigenmaps().fit(X)`` in a fresh process (interpreter + imports + data generation excluded
  from the fit time; the process's whole wall time is printed too) at 3e4 x 16 and 1e5 x 32 (lifted Swiss roll),
  against scikit-learn ``SpectralEmbedding(n_neighbors=15)`` fitted in a fresh process (target: at most 2x at
  3e4), and against the same fit repeated in a warm process (target: at most 1.5x at 1e5);
- ``cli``: ``eigenflow embed X.npy STORE`` wall time at 3e4, 1e5 and 1e6 (``--cli-sizes``), against
  pynndescent + eigensolver in a warm process (targets: at most 10 s more at 3e4 and 1e5, at most 1.3x at 1e6);
- ``flow``: the Python flow API, ``embed(X.npy, STORE)`` (``eigenflow.flows.embed``, as README's quick start
  shows) as the first call of a fresh process, at 1e5 x 32: its wall time against the CLI's and the same warm
  reference (target: inside the CLI's budget);
- ``worker``: a freshly started Dask worker's first NN-descent build of 1e5 x 32 points (the task's time:
  imports and cache loads included) against the same build on the same worker afterwards (target: at most 3 s
  more);
- ``light``: ``eigenflow --help``, ``eigenflow methods``, ``eigenflow info STORE`` of a small store (targets:
  1.5, 1.5 and 3 s);
- ``exact``: the exact kNN graph against scikit-learn's kd-tree and brute force at 1e5 x 24 and 1e5 x 32
  (``benchmarks/bench_knn_exact.py`` in a fresh process; target: at least as fast as the faster one);
- ``empty``: the API fit at 3e4 and ``eigenflow embed`` at 3e4 on an empty cache (the first-ever compile).

Run: ``python benchmarks/bench_cold_start.py [--groups api cli flow worker light exact empty] [--repeats 3]
[--cli-sizes 30000 100000 1000000] [--json PATH] [--cache DIR] [--eigenflow CMD] [--pythonpath DIR]``.
``--eigenflow`` / ``--pythonpath``: time another eigenflow (e.g. a checkout of an earlier commit, its console
script and its folder on ``PYTHONPATH``) in the ``cli``, ``flow`` and ``light`` groups, back to back with this one
on the same machine; the references stay this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_support import manifold_npy  # noqa: E402

BIN = Path(sys.executable).parent
N_NEIGHBORS = 15

#: Fits LaplacianEigenmaps (ef), SpectralEmbedding (sk), or ef twice in one process (warm: the second is timed).
API_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
which, path = sys.argv[1], sys.argv[2]
X = np.load(path)
loaded = time.perf_counter()
def fit():
    if which == "sk":
        from sklearn.manifold import SpectralEmbedding
        return SpectralEmbedding(n_neighbors=15, random_state=0).fit(X)
    from eigenflow.spectral import LaplacianEigenmaps
    return LaplacianEigenmaps(random_state=0).fit(X)
if which == "warm":
    fit()
    loaded = time.perf_counter()
fit()
end = time.perf_counter()
print(json.dumps({"fit": end - loaded, "process": end - start}))
"""

#: pynndescent + eigensolver in a warm process (the kernels loaded or compiled first, not timed).
REFERENCE_CHILD = r"""
import json, sys, time
import numba, numpy as np
from pynndescent import NNDescent
from eigenflow.spectral.embedding.eigenmaps import laplacian_eigenmaps_from_graph
from eigenflow.spectral.graph.weights import knn_weights
NNDescent(np.random.default_rng(0).normal(size=(500, 4)).astype(np.float32), n_neighbors=16, random_state=0)
X = np.load(sys.argv[1])
t0 = time.perf_counter()
index = NNDescent(X, n_neighbors=16, random_state=0, n_jobs=numba.config.NUMBA_NUM_THREADS, compressed=False)
idx, dist = index.neighbor_graph
knn = time.perf_counter() - t0
W = knn_weights(idx[:, 1:].astype(np.int64), dist[:, 1:])
t1 = time.perf_counter()
laplacian_eigenmaps_from_graph(W, 2, random_state=0)
solve = time.perf_counter() - t1
# the weights are outside the reference's total (reported beside it)
print(json.dumps({"knn": knn, "solve": solve, "total": knn + solve, "weights": t1 - t0 - knn}))
"""

#: The Python flow API's first call in a fresh process (the installed package's names, or an earlier checkout's).
FLOW_CHILD = r"""
import json, sys, time
start = time.perf_counter()
try:  # an earlier checkout on PYTHONPATH (--pythonpath), whose flows were a top-level package
    from flows.embed import embed
except ImportError:
    from eigenflow.flows.embed import embed
if __name__ == "__main__":
    embed(sys.argv[1], sys.argv[2])
    print(json.dumps({"process": time.perf_counter() - start}))
"""

#: A fresh worker's first NN-descent build and the next one on the same worker.
WORKER_CHILD = r"""
import json, sys, time
import numpy as np
from distributed import Client
from eigenflow.flows.cluster import local_cluster

def build(path):
    t0 = time.perf_counter()
    from eigenflow.spectral.neighbours.index import KNNIndex
    KNNIndex.build(np.load(path), 15, method="nndescent", random_state=0, n_jobs=1)
    return time.perf_counter() - t0

with local_cluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as client:
    first = client.submit(build, sys.argv[1], pure=False).result()
    second = client.submit(build, sys.argv[1], pure=False).result()
print(json.dumps({"first": first, "warm": second}))
"""


def env_with_cache(cache: Path) -> dict:
    """This environment with the compiled-code cache (eigenflow's and numba's) inside ``cache``."""
    return {**os.environ, "EIGENFLOW_CACHE_DIR": str(cache), "NUMBA_CACHE_DIR": str(cache / "numba"),
            "PYTHONPATH": str(REPO), "PREFECT_LOGGING_LEVEL": "CRITICAL"}


def run_json(args: list[str], env: dict, timeout: float = 3600) -> dict:
    """Run a child that prints one JSON line last; returns it, with the child's wall seconds as ``wall``."""
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


def run_wall(args: list[str], env: dict, timeout: float = 3600) -> float:
    """Wall seconds of a command that must succeed."""
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def data(n: int, d: int) -> str:
    return str(manifold_npy(n, n_features=d)[0])


def api_group(env: dict, repeats: int) -> list[dict]:
    rows = []
    for n, d in ((30_000, 16), (100_000, 32)):
        path = data(n, d)
        print(f"api {n} x {d}: {load()}", flush=True)
        samples: dict[str, list[dict]] = {"ef": [], "sk": [], "warm": []}
        for _ in range(repeats):
            for which in ("ef", "sk", "warm"):
                samples[which].append(run_json([sys.executable, "-c", API_CHILD, which, path], env))
        row = {"group": "api", "n": n, "d": d, "load": os.getloadavg()}
        for which, values in samples.items():
            row[which] = {"fit": [v["fit"] for v in values], "process": [v["process"] for v in values]}
        ef, sk, warm = (median(row[w]["fit"]) for w in ("ef", "sk", "warm"))
        row["ratio_sklearn"], row["ratio_warm"] = ef / sk, ef / warm
        print(f"  fit: eigenflow fresh {ef:.2f} s, scikit-learn fresh {sk:.2f} s ({ef / sk:.2f}x), eigenflow warm "
              f"{warm:.2f} s ({ef / warm:.2f}x); whole fresh process {median(row['ef']['process']):.2f} vs "
              f"{median(row['sk']['process']):.2f} s", flush=True)
        rows.append(row)
    return rows


def flow_group(env: dict, repeats: int, workdir: Path, eigenflow: list[str], child_env: dict) -> list[dict]:
    n, d = 100_000, 32
    path = data(n, d)
    script = workdir / "flow_child.py"
    script.write_text(FLOW_CHILD)
    print(f"flow API embed {n} x {d}: {load()}", flush=True)
    flows, clis, refs = [], [], []
    for i in range(repeats):
        flows.append(run_json([sys.executable, str(script), path, str(workdir / f"flow_{i}.zarr")], child_env)["process"])
        clis.append(run_wall([*eigenflow, "embed", path, str(workdir / f"flow_cli_{i}.zarr")], child_env))
        refs.append(run_json([sys.executable, "-c", REFERENCE_CHILD, path], env)["total"])
        for store in workdir.glob("flow*.zarr"):
            shutil.rmtree(store, ignore_errors=True)
    flow, cli, ref = median(flows), median(clis), median(refs)
    print(f"  embed(...) fresh process {flow:.1f} s (samples {', '.join(f'{w:.1f}' for w in flows)}); CLI "
          f"{cli:.1f} s; warm reference {ref:.1f} s: flow +{flow - ref:.1f} s, CLI +{cli - ref:.1f} s", flush=True)
    return [{"group": "flow", "n": n, "d": d, "flow": flows, "cli": clis, "reference": refs,
             "flow_excess_seconds": flow - ref, "cli_excess_seconds": cli - ref, "load": os.getloadavg()}]


def cli_group(env: dict, repeats: int, sizes: list[int], workdir: Path, eigenflow: list[str],
              child_env: dict) -> list[dict]:
    rows = []
    for n in sizes:
        d = 16 if n <= 30_000 else 32
        path = data(n, d)
        print(f"cli embed {n} x {d}: {load()}", flush=True)
        walls, refs, weights = [], [], []
        for i in range(repeats):
            store = workdir / f"embed_{n}_{i}.zarr"
            walls.append(run_wall([*eigenflow, "embed", path, str(store)], child_env))
            shutil.rmtree(store, ignore_errors=True)
            reference = run_json([sys.executable, "-c", REFERENCE_CHILD, path], env)
            refs.append(reference["total"])
            weights.append(reference["weights"])
        wall, ref = median(walls), median(refs)
        row = {"group": "cli", "n": n, "d": d, "embed": walls, "reference": refs, "reference_weights": weights,
               "load": os.getloadavg(),
               "excess_seconds": wall - ref, "ratio": wall / ref}
        print(f"  eigenflow embed {wall:.1f} s (samples {', '.join(f'{w:.1f}' for w in walls)}); pynndescent + "
              f"eigensolver warm {ref:.1f} s (its kNN weights, not in it: {median(weights):.1f} s); "
              f"+{wall - ref:.1f} s, {wall / ref:.2f}x", flush=True)
        rows.append(row)
    return rows


def worker_group(env: dict, repeats: int) -> list[dict]:
    path = data(100_000, 32)
    print(f"worker 1e5 x 32: {load()}", flush=True)
    samples = [run_json([sys.executable, "-c", WORKER_CHILD, path], env) for _ in range(repeats)]
    first, warm = median([s["first"] for s in samples]), median([s["warm"] for s in samples])
    print(f"  fresh worker's first build {first:.2f} s, warm worker {warm:.2f} s (+{first - warm:.2f} s)", flush=True)
    return [{"group": "worker", "first": [s["first"] for s in samples], "warm": [s["warm"] for s in samples],
             "excess_seconds": first - warm, "load": os.getloadavg()}]


def light_group(env: dict, repeats: int, workdir: Path, eigenflow: list[str], child_env: dict) -> list[dict]:
    store = workdir / "small.zarr"
    small = workdir / "small.npy"
    import numpy as np

    np.save(small, np.random.default_rng(0).normal(size=(2000, 8)).astype(np.float32))
    subprocess.run([str(BIN / "eigenflow"), "ingest", str(small), str(store)], env=env, check=True,
                   capture_output=True)
    print(f"light commands: {load()}", flush=True)
    commands = {"--help": ["--help"], "methods": ["methods"], "info": ["info", str(store)]}
    rows = []
    for name, args in commands.items():
        walls = [run_wall([*eigenflow, *args], child_env) for _ in range(repeats)]
        print(f"  eigenflow {name}: {median(walls):.2f} s ({', '.join(f'{w:.2f}' for w in walls)})", flush=True)
        rows.append({"group": "light", "command": name, "wall": walls})
    return rows


def exact_group(env: dict, repeats: int) -> list[dict]:
    script = REPO / "benchmarks" / "bench_knn_exact.py"
    print(f"exact kNN: {load()}", flush=True)
    rows = []
    for n, d in ((100_000, 24), (100_000, 32)):
        child = (f"import json, sys; sys.path.insert(0, {str(REPO)!r}); "
                 f"from benchmarks.bench_knn_exact import run; print(json.dumps(run({n}, {d}, {repeats})))")
        result = run_json([sys.executable, "-c", child], env)
        print(f"  {n} x {d}: {json.dumps(result)}", flush=True)
        rows.append({"group": "exact", "n": n, "d": d, "result": result})
    return rows if script.exists() else []


def empty_group(root: Path) -> list[dict]:
    print(f"empty cache: {load()}", flush=True)
    api_env = env_with_cache(root / "empty-api")
    api = run_json([sys.executable, "-c", API_CHILD, "ef", data(30_000, 16)], api_env)
    cli_env = env_with_cache(root / "empty-cli")
    store = root / "empty_cli.zarr"
    wall = run_wall([str(BIN / "eigenflow"), "embed", data(30_000, 16), str(store)], cli_env)
    print(f"  API fit 3e4 on an empty cache: fit {api['fit']:.1f} s, process {api['process']:.1f} s; "
          f"eigenflow embed 3e4: {wall:.1f} s", flush=True)
    return [{"group": "empty", "api_fit": api["fit"], "api_process": api["process"], "cli_embed": wall}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", nargs="+", default=["api", "cli", "flow", "worker", "light", "exact", "empty"],
                        choices=["api", "cli", "flow", "worker", "light", "exact", "empty"])
    parser.add_argument("--eigenflow", default=str(BIN / "eigenflow"),
                        help="the eigenflow command to time (default: this environment's console script)")
    parser.add_argument("--pythonpath", default=None, help="PYTHONPATH of the timed eigenflow's processes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cli-sizes", type=int, nargs="+", default=[30_000, 100_000, 1_000_000])
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--cache", type=Path, default=None,
                        help="compiled-code cache to use and keep (default: a new, empty one, removed at the end)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1; got {args.repeats}")

    root = Path(tempfile.mkdtemp(prefix="eigenflow-cold-", dir=REPO / ".eigenflow-home"))
    cache = args.cache.absolute() if args.cache else root / "cache"
    env = env_with_cache(cache)
    eigenflow = args.eigenflow.split()
    child_env = {**env, "PYTHONPATH": args.pythonpath} if args.pythonpath else env
    print(f"machine: {os.cpu_count()} cores, {platform.python_version()}, {load()}; cache {cache}", flush=True)
    t0 = time.perf_counter()
    warm_up = run_wall([*eigenflow, "warm"], child_env)
    print(f"warm-up process (eigenflow warm{'' if args.cache else ', empty cache'}): {warm_up:.1f} s", flush=True)
    rows: list[dict] = [{"group": "warm-up", "seconds": warm_up}]
    try:
        for group in args.groups:
            if group == "api":
                rows += api_group(env, args.repeats)
            elif group == "cli":
                rows += cli_group(env, args.repeats, args.cli_sizes, root, eigenflow, child_env)
            elif group == "flow":
                rows += flow_group(env, args.repeats, root, eigenflow, child_env)
            elif group == "worker":
                rows += worker_group(env, args.repeats)
            elif group == "light":
                rows += light_group(env, args.repeats, root, eigenflow, child_env)
            elif group == "exact":
                rows += exact_group(env, args.repeats)
            elif group == "empty":
                rows += empty_group(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"done in {time.perf_counter() - t0:.0f} s, {load()}")
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
