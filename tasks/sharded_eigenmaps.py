"""The sharded fit of Laplacian eigenmaps (``embed(..., sharded=True)``, issue 16): no process holds X, the kNN
graph or the Laplacian; every heavy object is split by rows over the Dask workers.

The shards are the ``P`` parts of a locality partition of the rows (:data:`PARTITION`,
:func:`spectral.partition.bisection_partition_dask`: recursive bisection along principal directions,
computed from the store's row chunks on the workers; the flow process receives one projection per row and
per level, never a row of X), the same parts for the kNN build and for the Laplacian, so that most edges lie
inside a shard and the per-shard preconditioner is strong. The partition draws nothing from ``random_state``.

Two stages (:func:`tasks.fitting.fit_stages`), with the random sequence of the single-process stages (the kNN
build draws one seed from ``random_state`` first, the eigensolver uses what follows):

- ``knn``: :func:`spectral.knn_sharded.sharded_knn_graph_futures` (``partition="bisection"``) on the store's X
  as a Dask array (row chunks read on the workers): one pynndescent index per part, shard-pair queries,
  multi-way merge. Every row chunk of ``graph/knn`` is then written by a worker, in the original row order,
  from the pieces of the shard blocks that hold its rows (:func:`write_knn_chunk`; each shard block is split
  by chunk on its own worker first). ``graph/knn`` records the partition (:func:`partition_record`: sizes and
  a digest). :func:`sharded_knn` runs in the flow process and holds futures and the (n,) partition.
- ``eigensolve`` (weights included): :func:`solve_sharded_eigenmaps` drives the distributed solver from the flow
  process: it recomputes the partition (deterministic; refused if its digest differs from the kNN stage's),
  each part's kNN rows are read from the store by a task on a worker, the weights, their symmetrization and
  the normalized Laplacian are built per shard on the workers
  (:meth:`spectral.eigen.distributed.DistributedLaplacian.from_knn_blocks` with ``perm``), and LOBPCG with
  the per-shard two-level AMG preconditioner finds the eigenvectors
  (:func:`spectral.eigen.distributed.laplacian_eigenmaps_distributed`), returned in the original row order.
  The driver holds the (n, k + 1) LOBPCG blocks and the n degrees, not the graph. It is not a worker task: a
  driver on a worker whose memory crossed Dask's pause threshold (80 % of its limit) waits forever for the
  tasks pinned to its own shard (measured: 4 workers x 1.5 GB at 1e6 points hung in the preconditioner). It
  writes the same model as the single-process stages (:class:`spectral.embedding.LaplacianEigenmapsModel`),
  so ``embed-points`` and ``extend`` are unchanged.

Measured (``benchmarks/results/sharded_partition.md``, 1e6 x 32 lifted Swiss roll, 4 workers x 1.5 GB on 2
cores, 2026-12-01): 99.5 % of the kNN edges inside a shard, eigensolve 44.4 s in 18 LOBPCG iterations (58.7 MB
per iteration), kNN stage 156.0 s, wall 213.2 s, workers' peaks 1.28-1.42 GB, recall 0.9998, 0.17 degree
from the single-process embedding. With contiguous row ranges as shards (before) 25 % of the edges were
inside a shard and the eigensolve stopped at its 300-iteration cap after 261.6 s (wall 392.0 s).

Scope (refused or stated, not silently changed): every point is fitted (``holdout`` must be 0: the held-out
queries against a sharded index are not written); exact duplicate rows are not collapsed; the graph must be
connected (several components are refused, naming the remedy); ``extend`` of a sharded model rebuilds one
NN-descent index of the fit rows (one process must hold it).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from spectral._validation import check_random_state, seed_int
from spectral.embedding import LaplacianEigenmapsModel
from spectral.errors import InputDataError
from spectral.weights import WeightParams, scales_of
from storage import layout
from storage.arrays import X_as_dask, row_chunks, x_shape
from storage.checksums import record_checksums
from storage.embedding_io import write_point_array
from storage.graph_io import create_knn, read_knn_attrs, read_knn_rows, write_knn_block
from storage.models import write_model

from tasks._fit_rows import FIT_ROWS, IN_FIT
from tasks.laplacian_eigenmaps import KNN_ARRAYS, METHOD, MODEL_STATE



#: What the sharded path supports (:func:`check_sharded`): Laplacian eigenmaps of a kNN graph, symmetric
#: normalization, every point fitted.
SHARDED_METHOD = METHOD


def check_sharded(method: str, params: dict, holdout: float) -> None:
    """Refuse a sharded run the sharded path cannot do, naming the parameter (before any work)."""
    from spectral.errors import ParameterError

    if method != SHARDED_METHOD:
        raise ParameterError(f"sharded=True is for method {SHARDED_METHOD!r}; got method {method!r}")
    if params.get("affinity", "knn") != "knn":
        raise ParameterError(f"sharded=True needs affinity='knn'; got affinity={params.get('affinity')!r}")
    if params.get("normalization") != "symmetric":
        raise ParameterError("sharded=True needs normalization='symmetric' (the distributed solver's); got "
                             f"normalization={params.get('normalization')!r}")
    if holdout != 0:
        raise ParameterError(f"sharded=True needs holdout=0 (held-out queries against a sharded index are not "
                             f"written); got holdout={holdout}")


def single_process_knn_bytes(n: int, d: int, k: int, itemsize: int = 4) -> int:
    """Memory of the single-process kNN stage: X (n, d) read, an NN-descent index of it
    (:func:`spectral.knn.nndescent_index_bytes`) and the graph written (n, k) int64 + float32."""
    from spectral.knn import nndescent_index_bytes

    return n * d * itemsize + nndescent_index_bytes(n, d, k, itemsize) + n * k * 12


#: The row partition of the sharded path (:data:`spectral.knn_sharded.SHARD_PARTITIONS`): the kNN shards and the
#: Laplacian shards are its parts.
PARTITION = "bisection"


def partition_record(perm: np.ndarray, bounds: np.ndarray) -> dict[str, Any]:
    """What ``graph/knn`` records of the row partition (its attribute ``partition``): method, part sizes and a
    BLAKE2b digest of ``perm`` (n,) and ``bounds`` (P + 1,) (the eigensolve stage recomputes the partition and
    refuses one that differs)."""
    digest = hashlib.blake2b(np.asarray(perm, dtype=np.int64).tobytes(), digest_size=16)
    digest.update(np.asarray(bounds, dtype=np.int64).tobytes())
    return {"method": PARTITION, "sizes": [int(s) for s in np.diff(bounds)], "digest": digest.hexdigest()}


def sharded_knn(store_url: str, run: str, client: Any, *, n_neighbors: int, metric: str, n_shards: int | None,
                random_state: int | None) -> dict[str, Any]:
    """The ``knn`` stage: the sharded kNN graph of every row of X, written chunk by chunk by the workers.

    The shards are the parts of the row partition (:data:`PARTITION`); the graph is written in the original row
    order. Runs in the flow process and holds only futures and the partition (perm (n,) int64). Returns the
    number of shards, sizes, the partition record and the fraction of the directed kNN edges inside a shard.
    """
    from spectral.knn_sharded import sharded_knn_graph_futures

    n, _ = x_shape(store_url)
    t0 = time.perf_counter()
    blocks, perm, bounds = sharded_knn_graph_futures(
        X_as_dask(store_url), n_neighbors, n_shards=n_shards, metric=metric,
        random_state=check_random_state(random_state), partition=PARTITION, client=client)
    record = partition_record(perm, bounds)
    index_params = {"method": "nndescent", "metric": metric, "n_neighbors": n_neighbors,
                    "seed": seed_int(check_random_state(random_state))}
    create_knn(store_url, n_neighbors, {"run": run, "metric": metric, "n_fit": n, "sharded": True,
                                        "n_shards": len(blocks), "partition": record,
                                        "index_params": index_params}, overwrite=True)
    shard_rows = [perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])]  # ascending inside each shard
    chunks = row_chunks(store_url)
    chunk_bounds = np.array([start for start, _ in chunks] + [n], dtype=np.int64)
    pieces = []  # per shard: its rows of every row chunk, split on the shard's worker (only those move)
    for block, rows in zip(blocks, shard_rows):
        split = client.submit(_split_rows, block, np.searchsorted(rows, chunk_bounds), pure=False)
        pieces.append([client.submit(_item, split, j, pure=False) for j in range(len(chunks))])
    writes = []
    for j, (start, stop) in enumerate(chunks):
        parts = []
        for p, rows in enumerate(shard_rows):
            lo, hi = (int(i) for i in np.searchsorted(rows, [start, stop]))
            if hi > lo:
                parts.append((pieces[p][j], rows[lo:hi] - start))
        writes.append(client.submit(write_knn_chunk, store_url, start, stop - start, parts, pure=False))
    inside = client.gather([client.submit(_inside_counts, block, rows, pure=False)
                            for block, rows in zip(blocks, shard_rows)])
    client.gather(writes)
    build_seconds = time.perf_counter() - t0
    del blocks, pieces, writes
    client.submit(record_checksums, store_url, KNN_ARRAYS, pure=False).result()
    write_point_array(store_url, layout.output_path(run, IN_FIT), np.ones(n, dtype=bool), overwrite=True)
    return {"k": n_neighbors, "method": "sharded", "n_shards": int(bounds.size - 1), "n_fit": n, "n_heldout": 0,
            "n_duplicates": 0, "build_seconds": build_seconds, "partition": record["method"],
            "shard_sizes": record["sizes"],
            "knn_inside_fraction": sum(i for i, _ in inside) / max(sum(t for _, t in inside), 1)}


def write_knn_chunk(store_url: str, start: int, size: int,
                    parts: list[tuple[tuple[np.ndarray, np.ndarray], np.ndarray]]) -> int:
    """Write the kNN rows of the row chunk ``start:start + size`` from ``parts``: ``((indices, distances) (m, k)
    of one shard's rows in the chunk, positions (m,))``, those rows going to the chunk's rows ``positions``. The
    parts must cover every row of the chunk once. Runs on a worker; returns the rows written."""
    k = parts[0][0][0].shape[1]
    indices = np.empty((size, k), dtype=np.int64)
    distances = np.empty((size, k), dtype=np.float32)
    covered = np.zeros(size, dtype=np.int64)
    for (idx, dist), positions in parts:
        indices[positions] = idx
        distances[positions] = dist
        np.add.at(covered, positions, 1)
    if not np.all(covered == 1):
        raise RuntimeError(f"the shards must cover every row of the chunk at {start} once; got cover counts in "
                           f"[{covered.min()}, {covered.max()}]")
    write_knn_block(store_url, start, indices, distances)
    return size


def _split_rows(block: tuple[np.ndarray, np.ndarray], cuts: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Task: a shard's kNN block ``(indices, distances)`` (n_p, k) cut into the runs ``cuts[j]:cuts[j + 1]``."""
    return [(block[0][a:b], block[1][a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def _item(items: list | tuple, j: int) -> Any:
    """Task: ``items[j]`` (a piece of another task's result, left on its worker)."""
    return items[j]


def _inside_counts(block: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> tuple[int, int]:
    """Task: ``(inside, total)`` neighbours of a shard's kNN block that lie in the shard (rows ``rows``)."""
    from spectral.partition import inside_counts

    return inside_counts(block[0], rows)


def read_knn_shard(store_url: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kNN lists of the rows ``rows`` (ascending) of ``graph/knn`` (indices int64, distances float64), read on
    a worker."""
    indices, distances = read_knn_rows(store_url, rows)
    return indices, distances.astype(np.float64)


def _shard_scales(distances: np.ndarray, params: dict) -> np.ndarray:
    """``(m, 2)``: per point its weight scale and its k-th neighbour distance (the model's scales and radii)."""
    return np.column_stack([scales_of(distances, WeightParams.from_attrs(params)), distances[:, -1]])


def solve_sharded_eigenmaps(store_url: str, run: str, client: Any, *, n_components: int, weighting: str,
                            symmetrize: str, n_shards: int, tol: float | None,
                            random_state: int | None) -> dict[str, Any]:
    """The ``eigensolve`` stage of the sharded path (weights included), driven from the calling process with
    ``client`` (see the module docstring). Writes ``models/<run>``."""
    from spectral.eigen.distributed import DistributedLaplacian, laplacian_eigenmaps_distributed

    from spectral.partition import bisection_partition_dask

    n, _ = x_shape(store_url)
    knn_attrs = read_knn_attrs(store_url)
    built_with = knn_attrs.get("partition")
    if not built_with or built_with.get("method") != PARTITION:
        raise InputDataError(f"graph/knn records no {PARTITION!r} row partition (partition={built_with!r}): it was "
                             "built by an older sharded stage; rerun the knn stage (overwrite=True)")
    rng = check_random_state(random_state)
    seed_int(rng)  # the draw the kNN stage made (LaplacianEigenmaps.fit order)
    t0 = time.perf_counter()
    parts = bisection_partition_dask(X_as_dask(store_url), n_shards, client)  # no random draws
    perm, bounds = parts.perm, parts.bounds
    partition_seconds = time.perf_counter() - t0
    if partition_record(perm, bounds) != built_with:
        raise InputDataError(f"the row partition recomputed from X ({partition_record(perm, bounds)}) differs from "
                             f"the one graph/knn was built with ({built_with}); rerun the knn stage")
    rows = client.scatter([perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])], hash=False)
    blocks = [client.submit(read_knn_shard, store_url, r, pure=False) for r in rows]
    indices = [client.submit(_item, b, 0, pure=False) for b in blocks]
    distances = [client.submit(_item, b, 1, pure=False) for b in blocks]
    op = DistributedLaplacian.from_knn_blocks(indices, distances, weighting=weighting, symmetrize=symmetrize,
                                              normalization="symmetric", perm=perm, client=client)
    Z, values, res = laplacian_eigenmaps_distributed(op, n_components, tol=tol, random_state=rng)
    wparams = op.stats["weight_params"]
    per_point = op.to_original_order(np.vstack(client.gather([client.submit(_shard_scales, d, wparams, pure=False)
                                                               for d in distances])))
    degrees = op.to_original_order(op.degrees[:, None]).ravel()
    stats = dict(op.stats)
    solve_seconds = time.perf_counter() - t0
    model = LaplacianEigenmapsModel(Z, values[None, :], np.zeros(n, dtype=np.int64), degrees, per_point[:, 0],
                                    per_point[:, 1], WeightParams.from_attrs(wparams), "symmetric",
                                    knn_attrs["index_params"])
    arrays, model_attrs = model.to_state()
    write_model(store_url, run, {**arrays, FIT_ROWS: np.arange(n, dtype=np.int64)},
                {"method": METHOD, "state": MODEL_STATE, "state_attrs": model_attrs})
    traffic = res.info["traffic"]
    return {"eigen_solver": "distributed-lobpcg", "eigenvalues": [float(v) for v in values],
            "converged": bool(res.info.get("converged", True)), "n_iter": int(res.n_iter),
            "n_components_graph": 1, "n_shards": int(n_shards), "solve_seconds": solve_seconds,
            "partition": PARTITION, "partition_seconds": partition_seconds,
            "inside_fraction": float(stats["inside_fraction"]),
            "bytes_per_iteration": float(traffic["bytes_per_iteration"]),
            "max_iter": int(res.info["max_iter"])}
