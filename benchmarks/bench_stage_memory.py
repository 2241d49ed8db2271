"""Time and peak memory of each stage body of the single-process Laplacian-eigenmaps path, in one process.

The stage bodies of :mod:`tasks.bodies.laplacian_eigenmaps` (what the flow's Dask workers run) are called one after the
other on a local store of the 32-D lifted Swiss roll (:mod:`benchmarks.bench_support`), k = 15, 2 components, no
hold-out: ingest, ``build_fit_index`` (read X, duplicate check, NN-descent, float64 re-ranking),
``write_knn_graph``, ``compute_weights``, ``solve_eigenmaps`` (Laplacian, RCM, AMG hierarchy, LOBPCG, model
write). Before each stage the process's peak RSS (``VmHWM``) is reset (``/proc/self/clear_refs``, Linux), so
each stage's figure is its own peak: what one worker needs for it. Prefect, Dask and the flow are left out: this
sizes the workers for a given N (the flow's overhead is measured by ``bench_embed.py``).

Run: ``python benchmarks/bench_stage_memory.py --n 10000000 [--stop-after build_fit_index] [--json PATH]``
(NN-descent uses every core numba may use).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_support import manifold_npy  # noqa: E402

STAGES = ("ingest", "build_fit_index", "write_knn_graph", "compute_weights", "solve_eigenmaps")


def _status_gb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1e6
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak() -> None:
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def run(n: int, work: Path, stop_after: str) -> dict:
    from eigenflow.storage.ingest import ingest
    from eigenflow.storage.store import Store
    from eigenflow.tasks.bodies import laplacian_eigenmaps as le
    from eigenflow.tasks.bodies.worker import warm_nndescent

    x_path, _ = manifold_npy(n)
    store = str(work / f"stages_{n}.zarr")
    warm_nndescent()
    out: dict = {"n": n, "cpus": os.cpu_count(), "stages": {}}
    held: dict = {}

    def opened() -> Store:
        """The store's handle, opened (validated) once after the ingest, as a run does."""
        if "store" not in held:
            held["store"] = Store.open(store, "r+")
        return held["store"]

    calls = {
        "ingest": lambda: ingest(str(x_path), store, overwrite=True),
        "build_fit_index": lambda: held.setdefault("built", le.build_fit_index(
            opened(), n_neighbors=15, knn_method="auto", metric="euclidean", holdout=0.0, random_state=0)),
        "write_knn_graph": lambda: le.write_knn_graph(opened(), "r1", held.pop("built"), n_neighbors=15),
        "compute_weights": lambda: le.compute_weights(opened(), "r1", weighting="local_scaling", symmetrize="or"),
        "solve_eigenmaps": lambda: le.solve_eigenmaps(
            opened(), "r1", n_components=2, normalization="symmetric", eigen_solver="auto", on_disconnected="raise",
            tol=None, random_state=0, weighting="local_scaling", symmetrize="or"),
    }
    for name in STAGES:
        _reset_peak()
        before = _status_gb("VmRSS")
        t0 = time.perf_counter()
        calls[name]()
        out["stages"][name] = {"seconds": round(time.perf_counter() - t0, 1), "peak_gb": round(_status_gb("VmHWM"), 2),
                               "rss_before_gb": round(before, 2)}
        print(f"{name:<16} {out['stages'][name]['seconds']:8.1f} s   peak RSS {out['stages'][name]['peak_gb']:6.2f} GB "
              f"(before the stage {before:.2f} GB)", flush=True)
        if name == stop_after:
            break
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--stop-after", choices=STAGES, default=STAGES[-1])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="eigenflow-stages-") as tmp:
        res = run(args.n, Path(tmp), args.stop_after)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
