"""Exact-copy detection on the workers (:func:`spectral.neighbours.sharded_duplicates.repeated_positions`, the sharded
kNN stage's collapse of duplicate rows) against :func:`spectral._arrays.distinct_rows` in one process.

The 32-D lifted Swiss roll (:mod:`benchmarks.bench_support`), float32, as a dask array of 65,536-row chunks read
from the ``.npy`` on the workers of a ``LocalCluster`` (``--workers`` single-threaded processes); once as it is (no copies)
and once with ``--copy-fraction`` of its rows overwritten by copies of other rows. Reported: seconds of each, the
number of copies found (they must agree) and the bytes of the dropped positions returned (best of 3 passes on the
workers). Run: ``python benchmarks/bench_distinct_blocks.py [--n 1000000] [--workers 2] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

CHUNK_ROWS = 65536


def _load_rows(path: str, start: int, stop: int) -> np.ndarray:
    return np.load(path, mmap_mode="r")[start:stop].copy()


def as_dask(path: str, n: int, d: int):
    """The ``.npy`` at ``path`` (n, d) as a dask array whose chunks are read on the workers."""
    import dask
    import dask.array as da

    parts = [da.from_delayed(dask.delayed(_load_rows)(path, a, min(a + CHUNK_ROWS, n)),
                             shape=(min(a + CHUNK_ROWS, n) - a, d), dtype=np.float32)
             for a in range(0, n, CHUNK_ROWS)]
    return da.concatenate(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--copy-fraction", type=float, default=0.01)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from benchmarks.bench_support import DATA_CACHE, manifold_npy
    from eigenflow.spectral._arrays import distinct_rows
    from eigenflow.spectral.neighbours.sharded_duplicates import repeated_positions

    x_path, _ = manifold_npy(args.n)
    X = np.load(x_path).astype(np.float32)
    rng = np.random.default_rng(0)
    n_copies = int(args.copy_fraction * args.n)
    X_copies = X.copy()
    X_copies[rng.choice(args.n, n_copies, replace=False)] = X[rng.integers(0, args.n, n_copies)]
    paths = {"no copies": DATA_CACHE / f"distinct_{args.n}_none.npy",
             f"{args.copy_fraction:g} copies": DATA_CACHE / f"distinct_{args.n}_copies.npy"}
    for path, data in zip(paths.values(), (X, X_copies)):
        np.save(path, data)
    report = {"n": args.n, "d": int(X.shape[1]), "workers": args.workers, "chunk_rows": CHUNK_ROWS, "cases": {}}
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        for name, path in paths.items():
            data = np.load(path)
            t0 = time.perf_counter()
            kept, n_dropped = distinct_rows(data, None, np.arange(args.n))
            one_process = time.perf_counter() - t0
            del data
            Xd = as_dask(str(path), args.n, X.shape[1])
            repeated_positions(Xd[:CHUNK_ROWS], client)  # warm the workers' imports
            times = []
            for _ in range(3):  # the first pass also reads the file into the page cache
                t0 = time.perf_counter()
                found = repeated_positions(Xd, client)
                times.append(time.perf_counter() - t0)
            on_workers = min(times)
            assert found.size == n_dropped and np.array_equal(np.setdiff1d(np.arange(args.n), kept), found)
            case = {"copies": int(found.size), "workers_seconds": round(on_workers, 3), "workers_seconds_all": [round(t, 3) for t in times],
                    "one_process_seconds": round(one_process, 3), "dropped_positions_bytes": int(found.nbytes)}
            report["cases"][name] = case
            print(f"{name}: {found.size} copies; on {args.workers} workers {on_workers:.2f} s (chunks read there), "
                  f"distinct_rows in one process {one_process:.2f} s (X in memory)")
    for path in paths.values():
        path.unlink()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
