"""Benchmark of the embed flow against its two heavy parts alone and against scikit-learn / umap.

For each N (default 1e4 and 1e5; ``--n 1000000`` for the million-point run) on the lifted Swiss roll
(32-D, :mod:`benchmarks.bench_support`), in ONE process, in this order:

1. numba warm-up of pynndescent on tiny data (reported, excluded from everything below);
2. pynndescent alone: ``NNDescent(X, n_neighbors=k + 1)`` + its neighbour graph;
3. the eigensolver alone on that graph: ``laplacian_eigenmaps_from_graph(W)`` (Laplacian + eigensolve);
4. the whole ``embed`` flow (Prefect ephemeral server start included, a fresh LocalCluster of 2 x 1 workers,
   ingest from ``.npy``, kNN, weights, eigensolve + model, write-back), with its per-stage times and the peak
   RSS of the process tree (this process, the Prefect server, the Dask workers) sampled every 0.2 s;
5. scikit-learn ``spectral_embedding`` (amg, arpack) and ``umap.spectral.spectral_layout`` on the same W, each
   in a subprocess with a time limit (their load time excluded: the child times the call itself).

Printed: a table per N and the ratio ``flow / (pynndescent + eigensolver)`` (target <= 1.5). ``--flow-only``
runs step 4 alone (the 1e6 / 3e6 / 1e7 growth figures: stages, peak RSS of the tree, of the flow process
and of the busiest worker). ``--json PATH``
also writes the figures. Run: ``python benchmarks/bench_embed.py [--n 10000 100000] [--time-limit 300]``.

``--served`` replaces step 4 by the way the flow runs in production:

- **served**: a real ``prefect server`` on loopback and ``eigenflow serve X.npy STORE --interval I`` in its own
  process (a warm Dask cluster kept up between runs; Prefect's runner starts a flow subprocess per run). The first
  ``--runs`` scheduled runs are timed from the Prefect
  state history: from *Pending* (the serving process claimed the run) to *Completed*, from *Running* (the flow body
  starts) to *Completed*, and from the run's scheduled start time to *Completed* (adds the poll latency), with
  the stages of each run's manifest. Target: the 2nd and 3rd runs <= 1.3 x (pynndescent + eigensolver).
  This machine's speed drifts by 10-20 % over minutes (the same eigensolve took 17.6 and 21.4 s in two runs
  of this script 15 minutes apart), so after each served run completes, pynndescent + eigensolver alone are
  timed again in this process while the serving process waits for its next start, and each run is also
  compared with that reference (``--no-interleave`` turns it off; the interval must leave room: ~120 s at 1e6).
- **cold CLI**: one ``eigenflow embed X.npy STORE`` in a fresh process (ephemeral Prefect, a new local
  cluster), wall time split into its stages, the cluster start, the workers' pynndescent compile and the rest
  (interpreter and imports, Prefect's ephemeral server, teardown).
"""

from __future__ import annotations

import argparse
import gc
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

from benchmarks.bench_support import PeakMemory, gb, manifold_npy, prefect_server, timed  # noqa: E402

N_NEIGHBORS = 15
N_COMPONENTS = 2

_CHILD = r"""
import json, sys, time
import numpy as np, scipy.sparse as sp
W = sp.load_npz(sys.argv[2]).tocsr()
which = sys.argv[1]
t0 = time.perf_counter()
if which == "umap":
    from umap.spectral import spectral_layout
    Z = spectral_layout(None, W, 2, np.random.RandomState(0))
else:
    from sklearn.manifold import spectral_embedding
    Z = spectral_embedding(W, n_components=2, eigen_solver=which, random_state=0, drop_first=True)
print(json.dumps({"seconds": time.perf_counter() - t0, "finite": bool(np.isfinite(Z).all())}))
"""


def pynndescent_alone(X: np.ndarray, seed: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    """Seconds of ``NNDescent(X, k + 1)`` + neighbour graph; returns the graph without self-neighbours."""
    import numba
    from pynndescent import NNDescent

    t0 = time.perf_counter()  # the flow's thread count: numba's, which follows the CPU affinity
    index = NNDescent(X, n_neighbors=N_NEIGHBORS + 1, random_state=seed, n_jobs=numba.config.NUMBA_NUM_THREADS,
                      compressed=False)
    idx, dist = index.neighbor_graph
    seconds = time.perf_counter() - t0
    return seconds, idx[:, 1:].astype(np.int64), dist[:, 1:].astype(np.float32)


def warm_up() -> float:
    """Compile pynndescent's kernels in this process (tiny data); returns seconds."""
    from eigenflow.tasks.bodies.worker import warm_nndescent

    return warm_nndescent()


def eigensolver_alone(W) -> float:
    from eigenflow.spectral.embedding.eigenmaps import laplacian_eigenmaps_from_graph

    t0 = time.perf_counter()
    laplacian_eigenmaps_from_graph(W, N_COMPONENTS, random_state=0)
    return time.perf_counter() - t0


def run_flow(x_path: Path, store: Path) -> tuple[float, dict, int]:
    """Wall seconds of one embed flow call, its summary and the peak RSS of the process tree."""
    from eigenflow.flows.embed import embed

    with PeakMemory() as mem:
        t0 = time.perf_counter()
        summary = embed(str(x_path), str(store), params={"n_components": N_COMPONENTS, "n_neighbors": N_NEIGHBORS},
                        random_state=0, overwrite=True)
        seconds = time.perf_counter() - t0
    return seconds, summary, mem.peak_bytes


BIN = Path(sys.executable).parent
FLOW_PARAMS = ["-p", f"n_components={N_COMPONENTS}", "-p", f"n_neighbors={N_NEIGHBORS}"]


def _manifests(store: Path) -> list:
    """The completed embed runs of ``store``, oldest first."""
    from eigenflow.storage.manifest import list_runs, read_manifest

    done = [m for m in (read_manifest(str(store), r) for r in list_runs(str(store))) if m.status == "completed"]
    return sorted(done, key=lambda m: m.started)


def _flow_run_times(api_url: str, deployment: str) -> list[dict]:
    """Per completed flow run of ``deployment`` (oldest first): seconds Pending -> Completed, Running -> Completed."""
    import asyncio

    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    async def read() -> list[dict]:
        async with PrefectClient(api=api_url) as client:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))
            out = []
            for run in runs:
                if not (run.state and run.state.is_completed()):
                    continue
                states = {st.type.value: st.timestamp for st in await client.read_flow_run_states(run.id)}
                out.append({"pending": (states["COMPLETED"] - states["PENDING"]).total_seconds(),
                            "running": (states["COMPLETED"] - states["RUNNING"]).total_seconds(),
                            "scheduled": (states["COMPLETED"] - run.expected_start_time).total_seconds(),
                            "start": states["PENDING"]})
            return sorted(out, key=lambda r: r["start"])

    return asyncio.run(read())


def served_runs(x_path: Path, work: Path, n_runs: int, interval: float, mode: str = "isolated",
                between_runs=None) -> dict:
    """Time the first ``n_runs`` scheduled runs of ``eigenflow serve`` against a real Prefect server (``mode``:
    "isolated", Prefect's runner, a flow subprocess per run).

    ``between_runs()``, if given, is called as soon as each run has completed (while the serving process waits
    for the next scheduled start) and its result is kept with that run (the interleaved reference timing)."""
    import signal

    store, home = work / f"served-{mode}.zarr", work / f"prefect-served-{mode}"
    with prefect_server(home) as api_url:
        env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home),
               "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
        with open(work / "serve.log", "w") as log:
            serve = subprocess.Popen([str(BIN / "eigenflow"), "serve", str(x_path), str(store), *FLOW_PARAMS,
                                      "--interval", str(interval), "--name", "bench"],
                                     env=env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                with PeakMemory(pid=serve.pid) as mem:
                    deadline = time.time() + 600 + n_runs * (interval + 600)
                    references: list = []
                    while len(times := _flow_run_times(api_url, "bench")) < n_runs or len(references) < len(times):
                        if between_runs is not None and len(references) < len(times):
                            references.append(between_runs())
                            continue
                        if between_runs is None and len(references) < len(times):
                            references.append(None)
                            continue
                        if serve.poll() is not None or time.time() > deadline:
                            raise RuntimeError(f"served runs did not complete; see {work / 'serve.log'}:\n"
                                               + (work / "serve.log").read_text()[-3000:])
                        time.sleep(2)
            finally:
                os.killpg(serve.pid, signal.SIGTERM)
                serve.wait(timeout=120)
    manifests = _manifests(store)[:n_runs]
    starts = [t["start"].timestamp() for t in times]
    for i, ref in enumerate(references[:n_runs]):  # did the reference overlap the next run?
        if ref is not None:
            ref["overlaps_next_run"] = i + 1 < len(starts) and ref["end"] > starts[i + 1]
    return {"runs": [{**{k: v for k, v in t.items() if k != "start"}, "stages": m.stage_seconds(),
                      "reference_after": ref,
                      "peak_rss_flow_process_gb": m.results.get("peak_rss_flow_process_gb"),
                      "worker_peak_rss_gb": max((s.info.get("worker_peak_rss_gb") or 0) for s in m.stages),
                      # the worker-side parts of the two heavy stages: what a stage's time adds to them is overhead
                      "knn_build_seconds": next((s.info.get("build_seconds") for s in m.stages if s.name == "knn"),
                                                None),
                      "solve_seconds": next((s.info.get("solve_seconds") for s in m.stages if s.name == "eigensolve"),
                                            None),
                      "nndescent_compile_seconds": m.results.get("nndescent_compile_seconds"),
                      # where the weights / eigensolve stages took their input: the previous stage's memory or store
                      "handoff_sources": [s.info.get(key) for s in m.stages
                                          for key in ("graph_source", "weights_source") if key in s.info]}
                     for t, m, ref in zip(times[:n_runs], manifests, references)],
            "peak_rss_tree": mem.peak_bytes}


def cold_cli_run(x_path: Path, work: Path) -> dict:
    """One ``eigenflow embed`` in a fresh process: wall seconds split into its parts."""
    store = work / "cold.zarr"
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect-cold")}
    env.pop("PREFECT_API_URL", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(BIN / "eigenflow"), "embed", str(x_path), str(store), *FLOW_PARAMS], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with PeakMemory(pid=proc.pid) as mem:
        _, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"eigenflow embed failed: {err[-2000:]}")
    [m] = _manifests(store)
    stages = m.stage_seconds()
    return {"wall": wall, "stages": stages, "nndescent_compile_seconds": m.results.get("nndescent_compile_seconds"),
            "rest": wall - sum(v for k, v in stages.items() if k != "cluster"), "peak_rss_tree": mem.peak_bytes,
            "peak_rss_flow_process_gb": m.results.get("peak_rss_flow_process_gb")}


def baseline(which: str, w_path: Path, limit: float) -> str:
    """Seconds of a scikit-learn / umap spectral embedding of W in a subprocess, or why it has no figure."""
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD, which, str(w_path)], capture_output=True, text=True,
                           timeout=limit)
    except subprocess.TimeoutExpired:
        return f"timed out after {limit:.0f}s"
    if r.returncode != 0:
        return "failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:80]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return f"{out['seconds']:.1f}s" + ("" if out["finite"] else " (non-finite output)")


def bench_one(n: int, limit: float, work: Path, skip_baselines: bool, served: dict | None = None,
              flow_only: bool = False) -> dict:
    """Every figure for one N (module docstring); ``served``: ``{"runs", "interval", "modes"}`` or None;
    ``flow_only``: only the embed flow (step 4), for sizes where the references would double the run."""
    import scipy.sparse as sp

    from eigenflow.spectral.graph.weights import knn_weights

    x_path, _ = manifold_npy(n)
    res: dict = {"n": n}
    if flow_only:
        store = work / f"bench_{n}.zarr"
        res["flow"], summary, res["peak_rss"] = run_flow(x_path, store)
        res["stages"], res["flow_body"] = summary["stages"], summary["total_seconds"]
        [m] = _manifests(store)
        res["peak_rss_flow_process_gb"] = m.results.get("peak_rss_flow_process_gb")
        res["stage_worker_peak_rss_gb"] = {s.name: s.info.get("worker_peak_rss_gb") for s in m.stages}
        res["worker_peak_rss_gb"] = max((v or 0) for v in res["stage_worker_peak_rss_gb"].values())
        res["nndescent_compile_seconds"] = m.results.get("nndescent_compile_seconds")  # per worker, from its start
        return res
    X = np.load(x_path)
    with timed(res, "warmup"):
        warm_up()
    res["pynndescent"], idx, dist = pynndescent_alone(X)
    W = knn_weights(idx, dist)
    res["eigensolver"] = eigensolver_alone(W)
    w_path = work / f"W_{n}.npz"
    sp.save_npz(w_path, W)
    kept = {"X": X, "W": W} if served is not None and served.get("interleave") else {}
    del X, idx, dist, W
    gc.collect()
    if served is not None:
        alone = res["pynndescent"] + res["eigensolver"]

        def reference() -> dict:
            """pynndescent + eigensolver alone again, right after a served run (same machine state)."""
            start = time.time()
            knn_s, _, _ = pynndescent_alone(kept["X"])
            eig_s = eigensolver_alone(kept["W"])
            return {"pynndescent": knn_s, "eigensolver": eig_s, "start": start, "end": time.time()}

        res["served"] = {mode: served_runs(x_path, work, served["runs"], served["interval"], mode,
                                           reference if served.get("interleave") else None)
                         for mode in served["modes"]}
        for runs in res["served"].values():
            for r in runs["runs"]:
                r["ratio"], r["ratio_from_scheduled"] = r["pending"] / alone, r["scheduled"] / alone
                ref = r["reference_after"]
                if ref is not None:
                    r["ratio_to_reference_after"] = r["scheduled"] / (ref["pynndescent"] + ref["eigensolver"])
        kept.clear()
        gc.collect()
        res["cold_cli"] = cold_cli_run(x_path, work)
        res["amg"] = res["arpack"] = res["umap"] = "skipped"
        return res
    res["flow"], summary, res["peak_rss"] = run_flow(x_path, work / f"bench_{n}.zarr")
    res["stages"] = summary["stages"]
    res["flow_body"] = summary["total_seconds"]  # inside the flow function: the rest is Prefect's flow-run set-up
    res["ratio"] = res["flow"] / (res["pynndescent"] + res["eigensolver"])
    for which in ("amg", "arpack", "umap"):
        res[which] = "skipped" if skip_baselines else baseline(which, w_path, limit)
    return res


def report_served(res: dict) -> None:
    alone = res["pynndescent"] + res["eigensolver"]
    print(f"\n=== served mode, N = {res['n']:,} (k = {N_NEIGHBORS}, d_out = {N_COMPONENTS}, 32-D lifted Swiss roll) ===")
    print(f"numba warm-up of this process (excluded) {res['warmup']:8.1f} s")
    print(f"pynndescent alone                 {res['pynndescent']:8.1f} s")
    print(f"eigensolver alone (same graph)    {res['eigensolver']:8.1f} s")
    print(f"pynndescent + eigensolver         {alone:8.1f} s")
    for mode, served in res["served"].items():
        print(f"served runs, {mode} runner (peak RSS of the serving process tree {gb(served['peak_rss_tree'])}):")
        for i, r in enumerate(served["runs"], start=1):
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
            print(f"  run {i}: pending->completed {r['pending']:6.1f} s (ratio {r['ratio']:.2f}, target <= 1.3), "
                  f"scheduled start->completed {r['scheduled']:6.1f} s (ratio {r['ratio_from_scheduled']:.2f}), "
                  f"running->completed {r['running']:6.1f} s; flow process peak {r['peak_rss_flow_process_gb']} GB, "
                  f"worker peak {r['worker_peak_rss_gb']} GB, compile {r['nndescent_compile_seconds']}")
            print(f"         stages: {stages}; on the worker: NN-descent build {r['knn_build_seconds']:.1f} s, "
                  f"eigensolve {r['solve_seconds']:.1f} s")
            ref = r["reference_after"]
            if ref is not None:
                print(f"         pynndescent + eigensolver alone right after it: {ref['pynndescent']:.1f} + "
                      f"{ref['eigensolver']:.1f} s -> scheduled start->completed / that = "
                      f"{r['ratio_to_reference_after']:.2f}"
                      + (" (OVERLAPPED the next run: use a longer --interval)" if ref["overlaps_next_run"] else ""))
    c = res["cold_cli"]
    print(f"cold CLI `eigenflow embed`: {c['wall']:.1f} s wall (ratio {c['wall'] / alone:.2f}), peak RSS (tree) "
          f"{gb(c['peak_rss_tree'])}, flow process {c['peak_rss_flow_process_gb']} GB")
    print("    " + ", ".join(f"{k} {v:.1f}" for k, v in c["stages"].items())
          + f"; workers' pynndescent compile {c['nndescent_compile_seconds']} (inside the stages)"
          + f"; interpreter + imports + Prefect ephemeral start + teardown {c['rest']:.1f} s")


def report(res: dict) -> None:
    if "served" in res:
        report_served(res)
        return
    print(f"\n=== N = {res['n']:,} (k = {N_NEIGHBORS}, d_out = {N_COMPONENTS}, 32-D lifted Swiss roll) ===")
    if "pynndescent" not in res:  # --flow-only
        print(f"embed flow, whole call            {res['flow']:8.1f} s   peak RSS (tree) {gb(res['peak_rss'])}, "
              f"flow process {res['peak_rss_flow_process_gb']} GB, busiest worker {res['worker_peak_rss_gb']} GB")
        for name, seconds in res["stages"].items():
            peak = res["stage_worker_peak_rss_gb"].get(name)
            print(f"    {name:<28}  {seconds:8.1f} s" + ("" if peak is None else f"   worker peak so far {peak} GB"))
            if name == "knn" and res.get("nndescent_compile_seconds"):
                print(f"      the workers' pynndescent compile (from the cluster start, per worker): "
                      f"{res['nndescent_compile_seconds']} s")
        print(f"    {'outside the stages':<28}  {res['flow_body'] - sum(res['stages'].values()):8.1f} s")
        return
    print(f"numba warm-up (excluded)          {res['warmup']:8.1f} s")
    print(f"pynndescent alone                 {res['pynndescent']:8.1f} s")
    print(f"eigensolver alone (same graph)    {res['eigensolver']:8.1f} s")
    print(f"embed flow, whole call            {res['flow']:8.1f} s   peak RSS (tree) {gb(res['peak_rss'])}")
    for name, seconds in res["stages"].items():
        print(f"    {name:<28}  {seconds:8.1f} s")
    print(f"    {'outside the stages':<28}  {res['flow_body'] - sum(res['stages'].values()):8.1f} s"
          f"   (Prefect flow-run set-up outside the flow body: {res['flow'] - res['flow_body']:.1f} s)")
    print(f"ratio flow / (pynndescent + eigensolver) = {res['ratio']:.2f}   (target <= 1.5)")
    print(f"sklearn spectral_embedding amg    {res['amg']}")
    print(f"sklearn spectral_embedding arpack {res['arpack']}")
    print(f"umap spectral_layout              {res['umap']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per sklearn / umap baseline")
    parser.add_argument("--skip-baselines", action="store_true", help="no sklearn / umap runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--served", action="store_true", help="served mode: scheduled runs + a cold CLI run")
    parser.add_argument("--runs", type=int, default=3, help="served mode: scheduled runs to time")
    parser.add_argument("--interval", type=float, default=120.0, help="served mode: schedule interval, seconds")
    parser.add_argument("--serve-modes", nargs="+", choices=["isolated"], default=["isolated"],
                        help="served mode: the runners to time (Prefect's: a flow subprocess per run)")
    parser.add_argument("--no-interleave", action="store_true",
                        help="served mode: do not time pynndescent + eigensolver again after each served run")
    parser.add_argument("--flow-only", action="store_true",
                        help="only the embed flow with its stages and peak RSS (no references, no baselines)")
    args = parser.parse_args(argv)
    served = ({"runs": args.runs, "interval": args.interval, "modes": args.serve_modes,
               "interleave": not args.no_interleave} if args.served else None)
    results = []
    with tempfile.TemporaryDirectory(prefix="eigenflow-bench-") as tmp:
        for n in args.n:
            results.append(bench_one(n, args.time_limit, Path(tmp), args.skip_baselines, served, args.flow_only))
            report(results[-1])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
