"""Growing data: a store fitted once, then batches of new rows placed by ``update``, against ``extend`` and a full fit.

A folder source of the 32-D lifted Swiss roll: the first partition (``--n`` rows) is fitted by ``embed`` (Laplacian
eigenmaps, NN-descent); ``--batches`` partitions of ``--batch`` rows each are added one at a time and placed by
``update`` (default policy: a refit when the rows mapped since the last fit reach 25 % of it, or when a batch
drifts). The first fit and the batches leave out the outer end of the roll (t in its top ``--left-out`` share); the
last batch comes from that end only, a region the fit never saw. Printed per batch:

- the update's wall time and stages, against ``extend`` of the same rows into a store of their own (every
  ``--extend-every`` batch) and against a full fit of all rows from scratch (once, at the end);
- the drift figures and the refit decision;
- for a refit: the eigensolver's iterations from the warm start against a cold start on the same graph (LOBPCG
  run again in this process on the refit's stored weights) and the old rows' movement aligned / unaligned;
- at the end: one result row per source row (``export``) and ``verify``.

With ``--keep-cluster`` every run uses one local cluster kept up for the whole benchmark, as ``eigenflow serve``
does (its address is passed as ``scheduler``): the model's kNN index then stays on the cluster between runs
(:mod:`tasks.model_index`), and the full fit runs there too. Without it each run starts a cluster of its own, as
the CLI does without ``--scheduler``, and every update rebuilds the index.

    python benchmarks/bench_growing.py --n 1000000 --batch 100000 --batches 10 [--keep-cluster]
        [--json benchmarks/results/growing.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PARAMS = {"n_components": 2, "n_neighbors": 15, "knn_method": "nndescent"}


def rolls(n: int, batch: int, batches: int, left_out: float, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The first partition and the batches: the last batch from the left-out outer end of the roll."""
    from eigenflow.spectral.datasets import make_swiss_roll_lifted

    total = int((n + batch * batches) / (1 - left_out) * 1.2)
    X, _, coords = make_swiss_roll_lifted(total, random_state=seed)
    outside = coords[:, 0] >= np.quantile(coords[:, 0], 1 - left_out)
    inside, edge = X[~outside], X[outside]
    parts = [inside[n + i * batch: n + (i + 1) * batch] for i in range(batches - 1)] + [edge[:batch]]
    return inside[:n], parts


def cold_iterations(store: str, n_components: int) -> int:
    """LOBPCG's iterations on the store's current weights from its default (cold, multilevel) start."""
    from eigenflow.spectral.embedding.eigenmaps import laplacian_eigenmaps_from_graph
    from eigenflow.storage import layout
    from eigenflow.storage.graph_io import read_csr

    _, _, info = laplacian_eigenmaps_from_graph(read_csr(store, layout.WEIGHTS), n_components,
                                                eigen_solver="lobpcg", random_state=0)
    return int(info["n_iter"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--left-out", type=float, default=0.1)
    parser.add_argument("--extend-every", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        scheduler = None
        if args.keep_cluster:
            from eigenflow.flows.serve import warm_cluster

            scheduler = stack.enter_context(warm_cluster(args.workers))
        run(args, scheduler)


def run(args: argparse.Namespace, scheduler: str | None) -> None:
    """The benchmark's runs, each on the cluster of ``scheduler`` or (None) on a cluster of its own."""

    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend
    from eigenflow.flows.update import update
    from eigenflow.storage.checksums import verify
    from eigenflow.storage.export import export_output
    from eigenflow.storage.manifest import read_manifest

    work = Path(tempfile.mkdtemp(prefix="bench-growing-"))
    results: dict = {"args": vars(args) | {"json": str(args.json)}, "batches": []}
    try:
        first, batches = rolls(args.n, args.batch, args.batches, args.left_out, args.seed)
        parts = work / "parts"
        parts.mkdir()
        np.save(parts / "part-000.npy", first)
        store = str(work / "store.zarr")
        t0 = time.perf_counter()
        fitted = embed(str(parts), store, params=PARAMS, n_workers=args.workers, random_state=args.seed,
                       scheduler=scheduler)
        results["first_fit"] = {"wall": time.perf_counter() - t0, "stages": fitted["stages"]}
        print(f"first fit of {args.n} rows: {results['first_fit']['wall']:.1f} s {fitted['stages']}", flush=True)
        for i, rows in enumerate(batches, start=1):
            name = f"part-{i:03d}.npy"
            np.save(parts / name, rows)
            t0 = time.perf_counter()
            done = update(str(parts), store, n_workers=args.workers, random_state=args.seed,
                          scheduler=scheduler)
            wall = time.perf_counter() - t0
            r = done["results"]
            index = {s.name: s.info for s in read_manifest(store, done["run"]).stages}["map-points"]["model_index"]
            row = {"batch": i, "rows": r["rows"], "wall": wall, "stages": done["stages"], "drift": r.get("drift"),
                   "refit": r["refit"], "model_index": index}
            if r["refit"]["decided"]:
                row["refit"]["cold_iterations"] = cold_iterations(store, PARAMS["n_components"])
            if i % args.extend_every == 1 or i == len(batches):
                t0 = time.perf_counter()
                extend(store, str(parts / name), str(work / f"extend-{i}.zarr"), n_workers=args.workers,
                       scheduler=scheduler)
                row["extend_wall"] = time.perf_counter() - t0
                shutil.rmtree(work / f"extend-{i}.zarr")
            if i == 1:  # the reference of an update: a full fit of the same rows from scratch
                np.save(work / "rows-1.npy", np.vstack([first, rows]))
                t0 = time.perf_counter()
                embed(str(work / "rows-1.npy"), str(work / "full-1.zarr"), params=PARAMS, n_workers=args.workers,
                      random_state=args.seed, scheduler=scheduler)
                row["full_fit_wall"] = time.perf_counter() - t0
                shutil.rmtree(work / "full-1.zarr")
                print(f"  full fit of the {first.shape[0] + rows.shape[0]} rows from scratch: "
                      f"{row['full_fit_wall']:.1f} s; the update took {wall / row['full_fit_wall']:.2f}x of it",
                      flush=True)
            results["batches"].append(row)
            d = r.get("drift") or {}
            refit = r["refit"]
            print(f"batch {i}: rows {r['rows']} update {wall:.1f} s {done['stages']} (model index: {index})"
                  + (f", extend {row['extend_wall']:.1f} s" if "extend_wall" in row else "")
                  + f"; drift share_beyond {d.get('share_beyond')} median_ratio {d.get('median_ratio')} "
                    f"preservation {d.get('preservation')} / fitted {d.get('preservation_fitted')} "
                    f"drifted {d.get('drifted')}; refit: {refit['reason']}", flush=True)
            if refit["decided"]:
                a, e = refit.get("alignment") or {}, refit.get("eigensolve") or {}
                print(f"  refit {refit['run']}: stages {refit['stages']}; iterations warm {e.get('n_iter')} "
                      f"({e.get('warm_start')}) vs cold {refit['cold_iterations']}; old rows moved "
                      f"{a.get('residual')} aligned vs {a.get('unaligned_residual')} unaligned (of the spread)",
                      flush=True)
        total = args.n + sum(b.shape[0] for b in batches)
        out = export_output(store, str(work / "all.npy"))
        results["final"] = {"rows": out["shape"][0], "source_rows": total, "verify_bad": len(verify(store)["bad"])}
        print(f"final: {out['shape'][0]} result rows for {total} source rows; verify: "
              f"{results['final']['verify_bad']} damaged chunks", flush=True)
        np.save(work / "all-rows.npy", np.vstack([first, *batches]))
        t0 = time.perf_counter()
        full = embed(str(work / "all-rows.npy"), str(work / "full.zarr"), params=PARAMS, n_workers=args.workers,
                     random_state=args.seed, scheduler=scheduler)
        results["full_fit"] = {"wall": time.perf_counter() - t0, "stages": full["stages"], "rows": total}
        print(f"full fit of {total} rows from scratch: {results['full_fit']['wall']:.1f} s {full['stages']}",
              flush=True)
        walls = [b["wall"] for b in results["batches"] if not b["refit"]["decided"]]
        print("updates without a refit / full fit: " + ", ".join(f"{w / results['full_fit']['wall']:.2f}x"
                                                               for w in walls), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
