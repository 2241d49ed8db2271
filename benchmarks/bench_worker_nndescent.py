"""pynndescent's build in a Dask worker of eigenflow's local cluster against the same build in this process,
interleaved: is a stage's NN-descent slower because it runs on a worker?

Run: ``python benchmarks/bench_worker_nndescent.py [--n 1000000] [--reps 3] [--workers 2] [--json PATH]``.
Each repetition builds ``NNDescent(X, k + 1 = 16, n_jobs=2)`` of the benchmark's lifted Swiss roll (32-D) once on
a worker (the task loads X from the cached ``.npy``, included) and once here; both compiled beforehand. Prints
wall and CPU seconds of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_support import manifold_npy  # noqa: E402


def build(path: str, n_jobs: int = 2) -> tuple[float, float]:
    """Wall and CPU seconds of one NN-descent build of the points in ``path``."""
    import numpy as np
    from pynndescent import NNDescent

    X = np.load(path)
    t0, c0 = time.perf_counter(), time.process_time()
    NNDescent(X, n_neighbors=16, random_state=0, n_jobs=n_jobs, compressed=False)
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from distributed import Client

    from eigenflow.flows.cluster import local_cluster
    from eigenflow.tasks.bodies.worker import warm_nndescent

    x_path, _ = manifold_npy(args.n)
    warm_nndescent()
    out = {"n": args.n, "workers": args.workers, "reps": []}
    with local_cluster(n_workers=args.workers) as cluster, Client(cluster) as client:
        client.run(warm_nndescent)
        for _ in range(args.reps):
            on_worker = client.submit(build, str(x_path), pure=False).result()
            here = build(str(x_path))
            out["reps"].append({"worker": on_worker, "process": here})
            print(f"worker {on_worker[0]:.1f} s (CPU {on_worker[1]:.1f} s)   this process {here[0]:.1f} s "
                  f"(CPU {here[1]:.1f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
