"""Distributed eigensolver benchmark: ``spectral.eigen.sharded`` on a 2-worker LocalCluster
vs the single-process LOBPCG + AMG solver, on the kNN graph (k = 15, local scaling) of the lifted Swiss roll of
``benchmarks/bench_support.py``; the ``--pairs`` smallest eigenpairs of the symmetric normalized Laplacian.

For every n, P (shards) and preconditioner it prints: LOBPCG iterations, wall times (build = partition +
scatter + per-shard Laplacian; setup = per-shard AMG + coarse start; LOBPCG), the bytes moved per iteration
(measured by the operator's counters, and the model for a full block of b columns; ``--dense-work driver``:
products ``(sum_i |cols_i| + n) b 8``, two-level preconditioner ``2 (n + N_c) b 8``; ``row_blocks``: the halo
rows ``(sum_i |cols_i| - n) b 8`` between workers and the coarse block ``2 N_c b 8``), of which the bytes that
pass through the driver (``driver MB/iter``), the fraction of edges inside the
shards, the largest residual ``||L v - lambda v||`` (recomputed on the single-process L) and the largest
principal angle to the single-process subspace. Writes ``benchmarks/results/eigen_distributed.md`` with the
machine state (the machine is shared: wall times move with its load; iterations and bytes do not).

    python benchmarks/bench_eigen_distributed.py                       # 1e5 and 2e5, P = 1, 2, 4 (~ 5 min)
    python benchmarks/bench_eigen_distributed.py --n 100000 --blocks 2  # one configuration
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import scipy.linalg  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "eigen_distributed.md"
COLUMNS = ["n", "P", "partition", "precond", "dense work", "iters", "build s", "setup s", "LOBPCG s", "total s",
           "MB/iter measured", "MB/iter model", "driver MB/iter", "edges inside", "coarse n", "max residual",
           "max angle deg"]


def machine_state() -> str:
    load = os.getloadavg()
    mem = psutil.virtual_memory()
    import dask
    import scipy

    return (f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.processor() or platform.machine()}, "
            f"{psutil.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min), "
            f"memory {mem.available / 2**30:.1f} of {mem.total / 2**30:.1f} GiB available; "
            f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
            f"dask {dask.__version__}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")


def single_process(L, pairs: int, tol, seed: int):
    from eigenflow.spectral.eigen import eigensolve

    t = time.perf_counter()
    res = eigensolve(L, pairs, solver="lobpcg", tol=tol, random_state=seed)
    return res, time.perf_counter() - t


def distributed_run(W, X, L, ref, n_blocks: int, partition: str, precond: str, pairs: int, tol, seed: int, client,
                    dense_work: str = "row_blocks"):
    from eigenflow.spectral.eigen.sharded import FLOAT_BYTES, DistributedLaplacian
    from eigenflow.spectral.eigen.sharded_solve import distributed_eigensolve

    t = time.perf_counter()
    op = DistributedLaplacian.from_weights(W, n_blocks, partition=partition,
                                           coordinates=X if partition == "coordinates" else None, client=client)
    build = time.perf_counter() - t
    start = "coarse" if precond == "two_level" else "random"
    t = time.perf_counter()
    res = distributed_eigensolve(op, pairs, tol=tol, random_state=seed, preconditioner=precond, start=start,
                                 raise_on_failure=False, dense_work=dense_work)
    wall = time.perf_counter() - t
    seconds = res.info["distributed"]["seconds"]
    resid = np.linalg.norm(L @ res.vectors - res.vectors * res.values, axis=0)
    angle = float(np.degrees(scipy.linalg.subspace_angles(res.vectors, ref.vectors)).max())
    n, b = W.shape[0], pairs
    coarse = res.info["distributed"].get("coarse") or {}
    n_c = coarse.get("coarse_n", 0)
    if dense_work == "driver":  # V[cols_i] out and (n_i, b) back per product; R out and M R back per preconditioning
        model = (sum(c.size for c in op.cols) + n) * b * FLOAT_BYTES
        model += 2 * (n + n_c) * b * FLOAT_BYTES if precond == "two_level" else 2 * n * b * FLOAT_BYTES
    else:  # halo rows between workers per product; the coarse block to the coarse worker and back
        model = (sum(c.size for c in op.cols) - n) * b * FLOAT_BYTES
        model += 2 * n_c * b * FLOAT_BYTES if precond == "two_level" else 0
    row = {"n": n, "P": n_blocks, "partition": partition, "precond": precond, "dense work": dense_work,
           "iters": res.n_iter,
           "build s": build, "setup s": seconds["preconditioner_setup"] + seconds["start"],
           "LOBPCG s": seconds["solve"], "total s": build + wall,
           "MB/iter measured": res.info["traffic"]["bytes_per_iteration"] / 1e6, "MB/iter model": model / 1e6,
           "driver MB/iter": res.info["traffic"]["driver_bytes_per_iteration"] / 1e6,
           "edges inside": op.stats["inside_fraction"], "coarse n": n_c, "max residual": float(resid.max()),
           "max angle deg": angle, "converged": res.converged}
    del op
    return row


def _warm_up() -> None:
    import pyamg  # noqa: F401

    import eigenflow.spectral.graph.sharded  # noqa: F401


def fmt(row: dict) -> str:
    cells = []
    for c in COLUMNS:
        v = row[c]
        if isinstance(v, float):
            cells.append(f"{v:.2e}" if c == "max residual" else (f"{v:.3f}" if c in ("edges inside", "max angle deg")
                                                                 else f"{v:.1f}"))
        else:
            cells.append(str(v))
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 200_000])
    parser.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--partition", nargs="+", default=["rcm"], choices=["rcm", "coordinates", "none"])
    parser.add_argument("--precond", nargs="+", default=["two_level", "block_amg"],
                        choices=["two_level", "block_amg"])
    parser.add_argument("--dense-work", nargs="+", default=["row_blocks", "driver"], choices=["row_blocks", "driver"],
                        help="where LOBPCG's (n, b) blocks live")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--tol", type=float, default=None, help="absolute residual tolerance (default: 1e-6 ||L||)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--append", action="store_true", help="append this run's section to --out")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    from benchmarks.bench_solvers import load_graph
    from eigenflow.spectral.graph.laplacian import check_connected, laplacian

    state_before = machine_state()
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    print(lines[0], flush=True)
    singles = []
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.run(_warm_up)  # imports on the workers, outside the timings
        for n in args.n:
            X, W = load_graph(n, 15, args.seed)
            check_connected(W)
            L, _ = laplacian(W, "symmetric")
            ref, ref_time = single_process(L, args.pairs, args.tol, args.seed)
            ref_resid = float(np.max(ref.residuals))
            singles.append(f"| {n} | {ref.n_iter} | {ref_time:.1f} | {ref_resid:.2e} | {ref.info['start']} |")
            print(f"# single-process LOBPCG + AMG, n={n}: {ref.n_iter} iterations (after its multilevel start), "
                  f"{ref_time:.1f} s, max residual {ref_resid:.2e}", flush=True)
            for n_blocks in args.blocks:
                for partition in args.partition:
                    for precond in args.precond:
                        for dense_work in args.dense_work:
                            row = distributed_run(W, X, L, ref, n_blocks, partition, precond, args.pairs, args.tol,
                                                  args.seed, client, dense_work)
                            line = fmt(row) + ("" if row["converged"] else " (not converged)")
                            print(line, flush=True)
                            lines.append(line)
    state_after = machine_state()
    write_results(args, lines, singles, state_before, state_after)


def write_results(args, lines, singles, before: str, after: str) -> None:
    text = [] if args.append else ["# Distributed eigensolver", ""]
    text += [
        f"## `python benchmarks/bench_eigen_distributed.py --n {' '.join(map(str, args.n))} --blocks "
        f"{' '.join(map(str, args.blocks))} --partition {' '.join(args.partition)} "
        f"--precond {' '.join(args.precond)} --dense-work {' '.join(args.dense_work)}`",
        "",
        f"({args.pairs} smallest pairs of L_sym, kNN k = 15 of the lifted Swiss roll, LocalCluster of "
        f"{args.workers} single-threaded workers, tol "
        f"{'1e-6 ||L||_inf (default)' if args.tol is None else args.tol}).",
        "",
        f"Machine state before: {before}",
        "",
        f"Machine state after: {after}",
        "",
        "Single-process reference (`eigensolve(L, k, solver='lobpcg')`: RCM, AMG block V-cycle, multilevel start):",
        "",
        "| n | iters (level 0) | wall s | max residual | start |",
        "|---|---|---|---|---|",
        *singles,
        "",
        "Distributed (`DistributedLaplacian.from_weights` + `distributed_eigensolve`); `two_level` = block AMG "
        "per shard + coarse correction, coarse start; `block_amg` = block Jacobi only, random TSQR start. "
        "`dense work`: `row_blocks` = LOBPCG's blocks as row parts on the workers (halo products, Cholesky-QR2 / "
        "TSQR, per-shard Gram pieces), `driver` = scipy's lobpcg in the driver. MB/iter measured: the operator's "
        "byte counters (driver <-> workers and halo rows between workers) over the solve / iterations, including "
        "the final residual check and gather of the vectors; driver MB/iter: the part through the driver. Both "
        "solvers apply L and M to the still-active columns only; model: a full block of b = pairs columns. "
        "Residuals are recomputed on the single-process L; angles are to the single-process eigenvectors.",
        "",
        *lines,
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    previous = args.out.read_text() if args.append and args.out.exists() else ""
    args.out.write_text(previous + "\n".join(text))
    print(f"# written {args.out}", flush=True)


if __name__ == "__main__":
    main()
