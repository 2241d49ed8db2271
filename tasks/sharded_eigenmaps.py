"""The sharded fit of Laplacian eigenmaps (``embed(..., sharded=True)``, issue 16): no process holds X, the kNN
graph or the Laplacian; every heavy object is split by rows over the Dask workers.

Two stages (:func:`tasks.fitting.fit_stages`), with the random sequence of the single-process stages (the kNN
build draws one seed from ``random_state`` first, the eigensolver uses what follows):

- ``knn``: :func:`spectral.knn_sharded.sharded_knn_graph_futures` on the store's X as a Dask array (row chunks
  read on the workers): one pynndescent index per row shard, shard-pair queries, multi-way merge. Every row
  chunk of ``graph/knn`` is then written by a worker from the shard blocks that overlap it
  (:func:`write_knn_chunk`). :func:`sharded_knn` runs in the flow process and only holds futures.
- ``eigensolve`` (weights included): :func:`solve_sharded_eigenmaps` drives the distributed solver from the flow
  process: each shard's kNN rows are read from the store by a task on a worker, the weights,
  their symmetrization and the normalized Laplacian are built per shard on the workers
  (:meth:`spectral.eigen.distributed.DistributedLaplacian.from_knn_blocks`), and LOBPCG with the per-shard
  two-level AMG preconditioner finds the eigenvectors
  (:func:`spectral.eigen.distributed.laplacian_eigenmaps_distributed`). The driver holds the (n, k + 1)
  LOBPCG blocks and the n degrees, not the graph. It is not a worker task: a driver on a worker whose memory
  crossed Dask's pause threshold (80 % of its limit) waits forever for the tasks pinned to its own shard
  (measured: 4 workers x 1.5 GB at 1e6 points hung in the preconditioner). It writes the same model as the single-process stages
  (:class:`spectral.embedding.LaplacianEigenmapsModel`), so ``embed-points`` and ``extend`` are unchanged.

Scope (refused or stated, not silently changed): every point is fitted (``holdout`` must be 0: the held-out
queries against a sharded index are not written); exact duplicate rows are not collapsed; the graph must be
connected (several components are refused, naming the remedy); ``extend`` of a sharded model rebuilds one
NN-descent index of the fit rows (one process must hold it).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from spectral._validation import check_random_state, seed_int
from spectral.embedding import LaplacianEigenmapsModel
from spectral.weights import WeightParams, scales_of
from storage import layout
from storage.arrays import X_as_dask, row_chunks, x_shape
from storage.checksums import record_checksums
from storage.embedding_io import write_point_array
from storage.graph_io import create_knn, read_knn, read_knn_attrs, write_knn_block
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


def sharded_knn(store_url: str, run: str, client: Any, *, n_neighbors: int, metric: str, n_shards: int | None,
                random_state: int | None) -> dict[str, Any]:
    """The ``knn`` stage: the sharded kNN graph of every row of X, written chunk by chunk by the workers.

    Runs in the flow process and holds only futures. Returns the number of shards and sizes.
    """
    from spectral.knn_sharded import sharded_knn_graph_futures

    n, _ = x_shape(store_url)
    t0 = time.perf_counter()
    blocks, offsets = sharded_knn_graph_futures(X_as_dask(store_url), n_neighbors, n_shards=n_shards, metric=metric,
                                                random_state=check_random_state(random_state), client=client)
    index_params = {"method": "nndescent", "metric": metric, "n_neighbors": n_neighbors,
                    "seed": seed_int(check_random_state(random_state))}
    create_knn(store_url, n_neighbors, {"run": run, "metric": metric, "n_fit": n, "sharded": True,
                                        "n_shards": len(blocks), "index_params": index_params}, overwrite=True)
    writes = []
    for start, stop in row_chunks(store_url):
        parts = [(blocks[p], max(start, int(offsets[p])) - int(offsets[p]), min(stop, int(offsets[p + 1]))
                  - int(offsets[p])) for p in range(len(blocks)) if offsets[p] < stop and offsets[p + 1] > start]
        writes.append(client.submit(write_knn_chunk, store_url, start, parts, pure=False))
    client.gather(writes)
    build_seconds = time.perf_counter() - t0
    del blocks, writes
    client.submit(record_checksums, store_url, KNN_ARRAYS, pure=False).result()
    write_point_array(store_url, layout.output_path(run, IN_FIT), np.ones(n, dtype=bool), overwrite=True)
    return {"k": n_neighbors, "method": "sharded", "n_shards": int(offsets.size - 1), "n_fit": n, "n_heldout": 0,
            "n_duplicates": 0, "build_seconds": build_seconds}


def write_knn_chunk(store_url: str, start: int, parts: list[tuple[tuple[np.ndarray, np.ndarray], int, int]]) -> int:
    """Write the kNN rows of the row chunk at ``start`` from ``parts``: ``((indices, distances) of a shard, lo,
    hi)``, the rows ``lo:hi`` of each overlapping shard, in row order. Runs on a worker; returns the rows written."""
    indices = np.vstack([block[0][lo:hi] for block, lo, hi in parts])
    distances = np.vstack([block[1][lo:hi] for block, lo, hi in parts])
    write_knn_block(store_url, start, indices, distances)
    return int(indices.shape[0])


def read_knn_shard(store_url: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``lo:hi`` of ``graph/knn`` (indices int64, distances float64), read on a worker."""
    indices, distances = read_knn(store_url, lo, hi)
    return indices, distances.astype(np.float64)


def _first(pair: tuple) -> Any:
    return pair[0]


def _second(pair: tuple) -> Any:
    return pair[1]


def _shard_scales(distances: np.ndarray, params: dict) -> np.ndarray:
    """``(m, 2)``: per point its weight scale and its k-th neighbour distance (the model's scales and radii)."""
    return np.column_stack([scales_of(distances, WeightParams.from_attrs(params)), distances[:, -1]])


def solve_sharded_eigenmaps(store_url: str, run: str, client: Any, *, n_components: int, weighting: str,
                            symmetrize: str, n_shards: int, tol: float | None,
                            random_state: int | None) -> dict[str, Any]:
    """The ``eigensolve`` stage of the sharded path (weights included), driven from the calling process with
    ``client`` (see the module docstring). Writes ``models/<run>``."""
    from spectral.eigen.distributed import DistributedLaplacian, laplacian_eigenmaps_distributed

    n, _ = x_shape(store_url)
    knn_attrs = read_knn_attrs(store_url)
    bounds = (np.arange(n_shards + 1, dtype=np.int64) * n) // n_shards
    rng = check_random_state(random_state)
    seed_int(rng)  # the draw the kNN stage made (LaplacianEigenmaps.fit order)
    t0 = time.perf_counter()
    blocks = [client.submit(read_knn_shard, store_url, int(lo), int(hi), pure=False)
              for lo, hi in zip(bounds[:-1], bounds[1:])]
    indices = [client.submit(_first, b, pure=False) for b in blocks]
    distances = [client.submit(_second, b, pure=False) for b in blocks]
    op = DistributedLaplacian.from_knn_blocks(indices, distances, weighting=weighting, symmetrize=symmetrize,
                                              normalization="symmetric", client=client)
    Z, values, res = laplacian_eigenmaps_distributed(op, n_components, tol=tol, random_state=rng)
    wparams = op.stats["weight_params"]
    per_point = np.vstack(client.gather([client.submit(_shard_scales, d, wparams, pure=False)
                                         for d in distances]))
    degrees = op.to_original_order(op.degrees[:, None]).ravel()
    stats = dict(op.stats)
    solve_seconds = time.perf_counter() - t0
    model = LaplacianEigenmapsModel(Z, values[None, :], np.zeros(n, dtype=np.int64), degrees, per_point[:, 0],
                                    per_point[:, 1], WeightParams.from_attrs(wparams), "symmetric",
                                    knn_attrs["index_params"])
    arrays, model_attrs = model.to_state()
    write_model(store_url, run, {**arrays, FIT_ROWS: np.arange(n, dtype=np.int64)},
                {"method": METHOD, "state": MODEL_STATE, "state_attrs": model_attrs})
    traffic = res.info.get("traffic", {})
    return {"eigen_solver": "distributed-lobpcg", "eigenvalues": [float(v) for v in values],
            "converged": bool(res.info.get("converged", True)), "n_iter": int(res.n_iter),
            "n_components_graph": 1, "n_shards": int(n_shards), "solve_seconds": solve_seconds,
            "inside_fraction": float(stats.get("inside_fraction", 1.0)),
            "bytes_per_iteration": float(traffic.get("bytes_per_iteration", 0.0))}
