"""The embed flow's sharded path against its single-process path, on a local cluster of 4 worker processes.

For each N (default 1e6) of the 32-D lifted Swiss roll (:mod:`benchmarks.bench_support`), each mode (``--modes
single sharded``) runs in its own fresh process (so the peak memory of the flow process is its own): a
``LocalCluster`` of ``--workers`` single-threaded workers (``--memory-limit`` each for the sharded run, ``--single-memory-limit`` for the
single-process one; ``--single-at-limit`` also tries the single-process path at the sharded run's limit), then
``embed(X.npy, store, params={"n_neighbors": 15, "n_components": 2}, sharded=...)``. Reported per run: wall time and
the time of each stage, the peak RSS of every worker process (sampled every 0.2 s) and of the flow process
(``VmHWM``; the cluster, scheduler included, runs in another process, :data:`CLUSTER_PROCESS`, as on a real
cluster; the scheduler process's own peak RSS is reported beside it), whether a worker was restarted (killed for memory) and
the cluster log's lines about it (``worker_events``), the sharded run's partition (shard sizes, the
fraction of kNN edges and of weight entries inside a shard), eigensolver iterations and bytes per iteration,
and afterwards, from the stores: recall of each
graph against exact brute force on 1,000 sampled rows, the eigenvalues, and the principal angles between the
two embeddings.

``--holdout F`` holds out a fraction of the rows (searched in the shard indexes, mapped out of sample).
Run: ``python benchmarks/bench_sharded_flow.py [--n 1000000] [--memory-limit 2GB] [--holdout 0.1] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PREFECT_HOME", str(REPO / ".eigenflow-home" / "prefect"))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402

PARAMS = {"n_neighbors": 15, "n_components": 2}


#: The cluster of a run, in its own process (``python -c CLUSTER_PROCESS N_WORKERS MEMORY_LIMIT ENVIRON``): the
#: Dask scheduler and the Nannies live there, as on a real cluster, so the flow process's memory is its own. The
#: workers start with ENVIRON (JSON) as ``distributed.nanny.pre-spawn-environ``.
CLUSTER_PROCESS = """
import json, sys
import dask
from distributed import LocalCluster
dask.config.set({"distributed.nanny.pre-spawn-environ": json.loads(sys.argv[3])})
with LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True, dashboard_address=":0",
                  memory_limit=sys.argv[2]) as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()  # until the benchmark closes it
"""


#: Lines of the cluster's log kept in a run's figures (``worker_events``): a worker killed or restarted, and why.
WORKER_EVENTS = ("Restarting worker", "exceeded", "terminat", "Worker process", "KilledWorker", "Nanny")


def worker_environ(malloc_trim: str) -> dict:
    """The workers' ``pre-spawn-environ``: eigenflow's local workers' (:func:`flows.cluster.worker_environ`, no
    ``MALLOC_TRIM_THRESHOLD_``) for ``"eigenflow"``, Dask's default for ``"dask"``."""
    import dask

    from eigenflow.flows.cluster import worker_environ as eigenflow_environ

    if malloc_trim == "eigenflow":
        return eigenflow_environ()
    return dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})


def one_run(x_path: str, store: str, mode: str, n_workers: int, memory_limit: str, holdout: float = 0.0,
            malloc_trim: str = "eigenflow") -> dict:
    """One embed run in this (fresh) process against a cluster in another process; returns its figures."""
    from distributed import Client, get_task_stream

    from benchmarks.bench_support import PeakMemory
    from eigenflow.flows.embed import embed
    from eigenflow.storage.manifest import read_manifest

    cluster_log = tempfile.TemporaryFile(mode="w+")
    environ = worker_environ(malloc_trim)
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER_PROCESS, str(n_workers), memory_limit,
                                json.dumps(environ)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=cluster_log, text=True)
    try:
        address = cluster.stdout.readline().strip()
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(n_workers)
            pids = client.run(os.getpid)
            samplers = {w: PeakMemory(pid=p, timeline=True) for w, p in pids.items()}
            scheduler = PeakMemory(pid=cluster.pid, tree=False)
            for s in [*samplers.values(), scheduler]:
                s.__enter__()
            t0 = time.perf_counter()
            with get_task_stream(client=client) as stream:
                summary = embed(x_path, store, params=PARAMS, random_state=0, scheduler=address,
                                sharded=(mode == "sharded"), holdout=holdout, overwrite=True)
            wall = time.perf_counter() - t0
            for s in [*samplers.values(), scheduler]:
                s.__exit__(None, None, None)
            restarted = set(client.run(os.getpid).values()) != set(pids.values())
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=120)
    cluster_log.seek(0)
    events = [line.strip()[:300] for line in cluster_log if any(word in line for word in WORKER_EVENTS)]
    manifest = read_manifest(store, summary["run"])
    return {"mode": mode, "wall": wall, "stages": manifest.stage_seconds(), "run": summary["run"],
            "versions": manifest.versions,
            "worker_peaks_gb": sorted(round(s.peak_bytes / 1e9, 3) for s in samplers.values()),
            "worker_peaks_by_stage_gb": stage_peaks(manifest, samplers.values()),
            "task_memory": task_memory(stream.data, samplers),
            "worker_start_gb": sorted(round(s.samples[0][1] / 1e9, 3) for s in samplers.values() if s.samples),
            "flow_peak_gb": manifest.results.get("peak_rss_flow_process_gb"),
            "scheduler_peak_gb": round(scheduler.peak_bytes / 1e9, 3), "worker_restarted": restarted,
            "worker_events": events,
            "eigenvalues": manifest.results.get("eigenvalues"),
            "knn": {k: v for s in manifest.stages if s.name == "knn" for k, v in s.info.items()
                    if k in ("n_shards", "partition", "shard_sizes", "knn_inside_fraction", "build_seconds",
                             "n_heldout", "heldout_shards_searched")},
            "eigensolve": {k: v for s in manifest.stages if s.name == "eigensolve" for k, v in s.info.items()
                           if k in ("n_iter", "max_iter", "converged", "n_shards", "partition", "partition_seconds",
                                    "inside_fraction", "bytes_per_iteration", "eigen_solver", "solve_seconds")}}


def task_memory(stream: list, samplers: dict, top: int = 8) -> dict:
    """What ran when the workers' memory grew, from Dask's task stream and the RSS timelines: ``at_peak`` (per
    worker: the tasks computing within 0.5 s of its peak sample) and ``growth_gb`` (per task name, the largest
    rise of its worker's RSS between the task's start and its end, the ``top`` largest)."""
    from dask.utils import key_split

    def name(task):
        return key_split(task["key"])

    computes = [(t["worker"], name(t), s["start"], s["stop"]) for t in stream for s in t.get("startstops", ())
                if s.get("action") == "compute"]
    at_peak, growth = {}, {}
    for worker, sampler in samplers.items():
        if not sampler.samples:
            continue
        t_peak, _ = max(sampler.samples, key=lambda sample: sample[1])
        at_peak[worker] = sorted({n for w, n, a, b in computes if w == worker and a - 0.5 <= t_peak <= b + 0.5})
    for worker, task, start, stop in computes:
        sampler = samplers.get(worker)
        before = [rss for t, rss in (sampler.samples or []) if t <= start] if sampler else []
        if before:
            rise = sampler.peak_between(start, stop + 0.2) - before[-1]
            growth[task] = max(growth.get(task, 0.0), round(rise / 1e9, 3))
    return {"at_peak": at_peak, "growth_gb": dict(sorted(growth.items(), key=lambda kv: -kv[1])[:top])}


def stage_peaks(manifest, samplers) -> dict[str, list[float]]:
    """Per stage of the run, every worker's peak RSS (GB, sorted) while the stage ran."""
    from datetime import datetime

    out = {}
    for stage in manifest.stages:
        if stage.end is None:
            continue
        start, end = (datetime.fromisoformat(t).timestamp() for t in (stage.start, stage.end))
        out[stage.name] = sorted(round(s.peak_between(start, end) / 1e9, 3) for s in samplers)
    return out


def compare(x_path: Path, runs: dict, stores: dict) -> dict:
    """Recall of each stored graph against exact brute force on 1,000 sampled rows; angles between embeddings."""
    from scipy.linalg import subspace_angles

    from eigenflow.storage.embedding_io import read_embedding
    from eigenflow.storage.graph_io import read_knn

    from sklearn.neighbors import NearestNeighbors

    X = np.load(x_path)
    rows = np.sort(np.random.default_rng(1).choice(X.shape[0], 1000, replace=False))
    k = PARAMS["n_neighbors"]
    _, nn = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X).kneighbors(X[rows])
    exact = [e[e != r][:k] for r, e in zip(rows, nn)]  # brute force, the point itself dropped
    del X
    out = {}
    for mode, store in stores.items():
        idx, _ = read_knn(store)
        out[f"recall_{mode}"] = float(np.mean([np.intersect1d(idx[r], e).size for r, e in zip(rows, exact)]) / k)
    if len(stores) == 2:
        Z = [read_embedding(stores[m], runs[m]["run"]).astype(np.float64) for m in ("single", "sharded")]
        out["max_angle_deg"] = float(np.degrees(subspace_angles(Z[0], Z[1])).max())
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--modes", nargs="+", default=["single", "sharded"], choices=["single", "sharded"])
    parser.add_argument("--n-features", type=int, default=32, help="dimension of the lifted Swiss roll")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--memory-limit", default="1.5GB", help="per worker of the sharded run (Dask syntax)")
    parser.add_argument("--single-memory-limit", default="6GB", help="per worker of the single-process run")
    parser.add_argument("--single-at-limit", action="store_true",
                        help="also try the single-process path with --memory-limit (expected to fail)")
    parser.add_argument("--holdout", type=float, default=0.0, help="fraction of the rows held out (mapped out of sample)")
    parser.add_argument("--malloc-trim", choices=["eigenflow", "dask"], default="eigenflow",
                        help="the workers' environment: eigenflow's local workers' (no MALLOC_TRIM_THRESHOLD_) or "
                             "Dask's default (MALLOC_TRIM_THRESHOLD_=65536)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", nargs=3, metavar=("X", "STORE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(*args.one, args.workers, args.memory_limit, args.holdout, args.malloc_trim)))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="eigenflow-sharded-") as tmp:
        for n in args.n:
            subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); "
                            "from benchmarks.bench_support import manifold_npy; "
                            f"manifold_npy({n}, n_features={args.n_features})"], check=True)
            from benchmarks.bench_support import manifold_npy

            x_path, _ = manifold_npy(n, n_features=args.n_features)
            runs, stores = {}, {}
            plan = [(m, args.single_memory_limit if m == "single" else args.memory_limit) for m in args.modes]
            if args.single_at_limit:
                plan.append(("single-at-limit", args.memory_limit))
            for name, limit in plan:
                mode = "single" if name.startswith("single") else "sharded"
                store = str(Path(tmp) / f"{name}_{n}.zarr")
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, __file__, "--one", str(x_path), store, mode,
                                       "--workers", str(args.workers), "--memory-limit", limit,
                                       "--holdout", str(args.holdout), "--malloc-trim", args.malloc_trim],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    runs[name] = {"mode": mode, "memory_limit": limit, "seconds": time.perf_counter() - t0,
                                  "failed": [line for line in proc.stderr.splitlines()
                                             if "Error" in line or "Killed" in line][-3:]}
                else:
                    runs[name] = {**json.loads(proc.stdout.strip().splitlines()[-1]), "memory_limit": limit}
                    if name in ("single", "sharded"):
                        stores[name] = store
            res = {"n": n, "n_features": args.n_features, "x_gb": round(n * args.n_features * 4 / 1e9, 3),
                   "workers": args.workers, "holdout": args.holdout, "malloc_trim": args.malloc_trim,
                   "runs": runs,
                   **compare(x_path, runs, stores)}
            results.append(res)
            print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
