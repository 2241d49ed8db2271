"""Sharded kNN graph on a Dask cluster: one index per row shard, every shard queried by every other, top-k merge.

The rows of ``X`` (n, d) are split into ``P`` shards of near-equal size: shard ``p`` holds the rows
``perm[bounds[p]:bounds[p + 1]]`` (ascending). ``partition="contiguous"`` makes them row ranges (``perm`` the
identity); ``partition="bisection"`` groups nearby points (:mod:`spectral.neighbours.partition`: recursive bisection
along principal directions, computed from row blocks where they live), so that most of a point's neighbours are in
its own shard (the distributed Laplacian built on the same shards then has a strong block preconditioner).
These Dask tasks run on the workers:

1. **build** (P tasks): a :class:`~spectral.neighbours.index.KNNIndex` of shard ``p`` (pynndescent NN-descent, or the exact
   search), seeded with the ``p``-th child of ``SeedSequence(seed).spawn(P)``. Its own graph gives every
   point of the shard its ``k`` nearest neighbours *inside* the shard. The index stays on the worker as a
   future; the scheduler copies it to another worker at most once.
2. **query** (at most P (P - 1) tasks, one per ordered shard pair ``q != p`` with rows to search): the points of
   shard ``q`` that may have a neighbour in shard ``p`` (with a locality partition, those whose distance bound to
   ``p`` from the partition's cuts is within their own-shard ``k``-th distance; chosen on ``q``'s worker, and
   only they move, read from ``q``'s index: a shard's own copy of its rows is dropped once its index is built)
   are searched in the index of shard ``p`` (``KNNIndex.query``: NN-descent search from the
   index's search graph), giving ``k`` candidates per point from shard ``p``, with exact float64 distances
   (float32 on output).
3. **merge** (P tasks): for each point of shard ``q``, the ``P`` sorted candidate lists (its own shard's graph
   and the ``P - 1`` query answers, all in global row numbers) are merged by distance into the ``k`` best,
   ties broken by the smaller global index (deterministic). Shards are disjoint, so a candidate appears in
   one list only and the point itself is in none (the own-shard graph already dropped it).
4. **reverse** (P (P - 1) tasks): each answer "row a of shard q found row b of shard p" also proposes ``a`` to
   ``b`` (:func:`reverse_candidates`; only pairs closer than ``b``'s own-shard ``k``-th neighbour move), and
   the merged lists take them in (:func:`add_candidates`). A point on the edge of its shard's cloud can be
   missed by its own search in the neighbouring shard's index (the search starts from that index's tree,
   which sends a query from outside the cloud to a far region) while the neighbours' searches find it.
5. **held-out queries** (:func:`spectral.neighbours.sharded_query.query_shard_indexes`): query points that are not
   indexed are searched in their home shard, then in the shards whose cut bound is within their ``k``-th home
   distance, and the answers merged as in step 3 (no reverse pairs: the indexed rows never searched for them).

Steps 1 and 2-4 are also separate calls (:func:`build_shard_indexes`, :func:`shard_graph_futures`), so that
the indexes built for the graph answer the held-out queries of step 5.

Only ``(n_q, k)`` blocks move between tasks besides the indexes; a numpy ``X`` is scattered shard by shard,
a dask ``X`` has its row chunks computed on the workers and each shard's rows taken from them there (never
gathered to the caller). The caller receives the merged ``(n, k)`` graph in the original row order.

Approach and references
-----------------------
Merging independently built kNN subgraphs follows the graph-merge line of work: W.-L. Zhao, H. Wang,
P.-C. Lin, C.-W. Ngo, "On the Merge of k-NN Graph" (arXiv:1908.00814; symmetric / two-way merge of two
subgraphs), and "Towards the Distributed Large-scale k-NN Graph Construction by Graph Merge"
(arXiv:2509.11697; Two-way Merge and Multi-way Merge of P subgraphs, a multi-node procedure). Where those
find the cross-subgraph neighbours by NN-descent local joins between subgraphs (W. Dong, M. Charikar, K. Li,
"Efficient k-nearest neighbor graph construction for generic similarity measures", WWW 2011), this module
finds them by *searching* each subgraph's NN-descent index with the other shards' points (pynndescent's
graph search), which is embarrassingly parallel over shard pairs, and then does the multi-way merge of the
``P`` sorted candidate lists per point, as sharded similarity search merges per-shard top-k results (J.
Johnson, M. Douze, H. Jegou, "Billion-scale similarity search with GPUs", IEEE Trans. Big Data 2019,
``IndexShards``). No neighbour-of-neighbour refinement round is run after the merge: every point gets ``P k``
candidates, each list from a search of a P times smaller index, so the merged recall already matches
single-process NN-descent's, and exceeds it on data where NN-descent is weak (``benchmarks/results/knn_sharded.md``).

Cost: the build work is that of one NN-descent over n points split P ways; the query work grows with
``P - 1`` searches per point, so P should be as small as the workers' memory allows (see
:func:`default_n_shards`; ``benchmarks/results/knn_sharded.md`` times P = 1 to 8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from eigenflow.spectral._arrays import row_chunk_futures
from eigenflow.spectral._validation import check_array_2d, check_choice, check_int, check_random_state, seed_int
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.index import METRICS, KNNIndex
from eigenflow.spectral.neighbours.merge import ShardAnswer, add_candidates, merge_candidates, reverse_candidates
from eigenflow.spectral.neighbours.sharded_assembly import assemble_parts
from eigenflow.spectral.neighbours.partition import (BlockPartition, RowPartition, bisection_partition_array,
                                           bisection_partition_blocks, part_distance_bounds)
from eigenflow.spectral.placement import smallest_memory_limit

#: Per-shard index methods (``KNNIndex`` methods): "nndescent" (the default) or "exact" (scikit-learn; an
#: oracle for tests and for shards small enough to search exhaustively).
SHARD_METHODS = ("nndescent", "exact")

#: Relative margin of the query pruning (:func:`_query_plan`): a row is searched in another shard when its
#: distance bound to it is within ``(1 + GAP_RTOL)`` times its own-shard k-th distance (rounding of the bound).
GAP_RTOL = 1e-6

#: Rows of a shard whose (rows, P) distance bounds :func:`_query_plan` makes at a time, fewer when their
#: coordinates (read from the shard's index, a copy) would take more than :data:`PLAN_CHUNK_BYTES`.
PLAN_CHUNK_ROWS = 65_536
PLAN_CHUNK_BYTES = 32 * 2**20

#: How the rows are split into shards: "contiguous" row ranges, or "bisection" (:mod:`spectral.neighbours.partition`:
#: nearby points in the same shard).
SHARD_PARTITIONS = ("contiguous", "bisection")

#: :func:`default_n_shards` adds shards when one would hold more rows than this. A worker holds its
#: shard's float64 rows plus its NN-descent index (about ``n_p * (8 d + 4 (d + 3 k))`` bytes, KNNIndex's size
#: formula) and, during a query task, one other shard's index: at d = 32, k = 15, 5e5 rows are ~0.3 GB per
#: shard, so ~0.6 GB per busy worker.
ROWS_PER_SHARD = 500_000


#: :func:`default_n_shards` adds shards when one shard's rows of X would take more than this share of the smallest
#: worker memory limit. Besides the rows of its shards' indexes (X / W per worker), a worker holds a second copy of
#: one shard while it assembles it and while it prepares its index (pynndescent reorders its points), plus its own
#: code and compiled functions, so a shard's rows must stay a small share of the limit (the worker peaks of
#: ``benchmarks/results/sharded_flow.md``). A smaller share is not safer: more shards move more boundary rows
#: between more pairs of shards.
SHARD_MEMORY_SHARE = 1 / 8


def default_n_shards(n_samples: int, n_threads: int, x_bytes: int = 0, worker_memory: int | None = None) -> int:
    """Default number of shards: ``max(n_threads, ceil(n_samples / ROWS_PER_SHARD), ceil(x_bytes /
    (SHARD_MEMORY_SHARE * worker_memory)))``, at most ``n_samples // 2``.

    ``n_threads`` is the number of worker threads of the cluster (one per worker with this project's
    single-threaded workers), so that every worker builds one index at a time; more shards when a shard would
    exceed :data:`ROWS_PER_SHARD` rows, or when its rows of X (``x_bytes`` for all n rows) would exceed
    :data:`SHARD_MEMORY_SHARE` of ``worker_memory`` (the smallest worker memory limit in bytes; None or 0: no
    limit). Every shard keeps at least 2 rows.
    """
    by_memory = math.ceil(x_bytes / (SHARD_MEMORY_SHARE * worker_memory)) if worker_memory else 1
    return max(1, min(n_samples // 2, max(n_threads, math.ceil(n_samples / ROWS_PER_SHARD), by_memory)))


def sharded_knn_graph(
    X: Any,
    n_neighbors: int,
    *,
    n_shards: int | None = None,
    metric: str = "euclidean",
    random_state: Any = None,
    shard_method: str = "nndescent",
    n_jobs: int | None = 1,
    partition: str = "contiguous",
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours of every row of ``X`` among the other rows, computed on the active Dask client.

    Parameters
    ----------
    X : ndarray or dask array, shape (n, d)
        Finite numeric data; a dask array must have known row chunks (it is rechunked to the shards on the
        workers; its values are validated there, so a NaN error names the row inside its shard).
    n_neighbors : int in [1, n - 1]
    n_shards : int in [1, n // 2] or None
        Number of row shards P; None is :func:`default_n_shards` of n, the client's worker threads, the size of X
        and the smallest worker memory limit.
    metric : {"euclidean", "manhattan", "cosine"}
    random_state : None, int, Generator or SeedSequence
        One integer seed is drawn from it; shard ``p`` is seeded by the ``p``-th child of
        ``numpy.random.SeedSequence(seed).spawn(P)``. The same ``random_state`` and ``n_shards`` (and
        ``n_jobs=1``) give the same graph whatever the worker assignment.
    shard_method : {"nndescent", "exact"}
        Index of each shard (:class:`~spectral.neighbours.index.KNNIndex` method). With "exact" the result is the exact
        kNN graph (up to the order of equal distances).
    n_jobs : int >= 1 or None
        NN-descent threads per task (None: all of the worker's numba threads). 1 by default: Dask runs one
        task per worker thread, and NN-descent is deterministic only single-threaded.
    partition : {"contiguous", "bisection"}
        Rows of each shard: row ranges, or the parts of :mod:`spectral.neighbours.partition`'s bisection (no random
        draws: the same ``X`` and ``n_shards`` give the same shards).

    Returns
    -------
    indices : ndarray of int64, shape (n, k)
        Global row numbers, sorted by increasing distance (ties: smaller index first); never the point itself.
    distances : ndarray of float32, shape (n, k)
        Recomputed in float64 from the coordinates (as every method of :mod:`spectral.neighbours.knn`).
    """
    futures, perm, _ = sharded_knn_graph_futures(
        X, n_neighbors, n_shards=n_shards, metric=metric, random_state=random_state, shard_method=shard_method,
        n_jobs=n_jobs, partition=partition,
    )
    blocks = futures[0].client.gather(futures)  # P x ((n_p, k), (n_p, k)): only the graph comes back
    indices = np.empty((perm.size, blocks[0][0].shape[1]), dtype=np.int64)
    distances = np.empty((perm.size, blocks[0][1].shape[1]), dtype=np.float32)
    indices[perm] = np.vstack([b[0] for b in blocks])  # back to the original row order
    distances[perm] = np.vstack([b[1] for b in blocks])
    return indices, distances


def sharded_knn_graph_futures(X: Any, n_neighbors: int, *, n_shards: int | None = None, metric: str = "euclidean",
                              random_state: Any = None, shard_method: str = "nndescent", n_jobs: int | None = 1,
                              partition: str = "contiguous", client=None) -> tuple[list, np.ndarray, np.ndarray]:
    """The sharded graph left on the workers: ``(futures, perm, bounds)``.

    Shard ``p`` holds the rows ``perm[bounds[p]:bounds[p + 1]]`` (ascending; ``perm`` (n,) int64, ``bounds``
    (P + 1,) int64); ``futures[p]`` resolves to ``(indices int64 (n_p, k), distances float32 (n_p, k))`` of
    those rows in that order (global row numbers). ``client`` defaults to the active one (looked up after the
    parameters are checked); other parameters as :func:`sharded_knn_graph`.
    """
    sharded = build_shard_indexes(X, n_neighbors, n_shards=n_shards, metric=metric, random_state=random_state,
                                  shard_method=shard_method, n_jobs=n_jobs, partition=partition, client=client)
    parts = sharded.partition
    perm = parts.perm if isinstance(parts, RowPartition) else np.concatenate(sharded.client.gather(sharded.rows))
    return shard_graph_futures(sharded), perm, parts.bounds


@dataclass(frozen=True)
class ShardIndexes:
    """The per-shard indexes of :func:`build_shard_indexes`, left on the workers of ``client``.

    Shard ``p`` holds ``sizes[p]`` rows of X (ascending; the part ``p`` of ``partition``, a
    :class:`~spectral.neighbours.partition.RowPartition` for an in-memory X, a
    :class:`~spectral.neighbours.partition.BlockPartition` whose labels stay on the workers for a dask X):
    ``indexes[p]`` is the future of their :class:`~spectral.neighbours.index.KNNIndex` (``n_neighbors`` neighbours, its
    own graph included; the shard's coordinates are read from it, :meth:`~spectral.neighbours.index.KNNIndex.points`),
    ``rows[p]`` of their row numbers (n_p,).
    """

    indexes: list
    rows: list
    partition: RowPartition | BlockPartition
    n_neighbors: int
    n_features: int
    client: Any

    @property
    def n_samples(self) -> int:
        """Rows indexed over all shards."""
        return int(self.partition.bounds[-1])

    @property
    def sizes(self) -> np.ndarray:
        """``(P,)`` rows per shard."""
        return np.diff(self.partition.bounds)


def build_shard_indexes(X: Any, n_neighbors: int, *, n_shards: int | None = None, metric: str = "euclidean",
                        random_state: Any = None, shard_method: str = "nndescent", n_jobs: int | None = 1,
                        partition: str = "contiguous", queried: bool = False, client=None) -> ShardIndexes:
    """Step 1 of the module docstring: one index per shard, built on the workers (nothing comes back).

    Parameters as :func:`sharded_knn_graph`; ``queried``: other points than X's rows will be searched in the
    indexes (:func:`query_shard_indexes`), so even a single shard's index is prepared for queries
    (:meth:`~spectral.neighbours.index.KNNIndex.prepare`).
    """
    X, n, lazy = _check_X(X)
    k = check_int("n_neighbors", n_neighbors, low=1, high=n - 1)
    metric = check_choice("metric", metric, METRICS)
    shard_method = check_choice("shard_method", shard_method, SHARD_METHODS)
    partition = check_choice("partition", partition, SHARD_PARTITIONS)
    if n_jobs is not None:
        n_jobs = check_int("n_jobs", n_jobs, low=1)
    if n_shards is not None:
        n_shards = check_int("n_shards", n_shards, low=1, high=n // 2)
    client = _active_client() if client is None else client
    if n_shards is None:
        x_bytes = n * int(X.shape[1]) * np.dtype(X.dtype).itemsize
        P = default_n_shards(n, sum(client.nthreads().values()), x_bytes, smallest_memory_limit(client))
    else:
        P = n_shards
    if lazy:
        parts, shards, rows = _put_shards_lazy(client, X, P, partition)
    else:
        parts = (RowPartition(np.arange(n, dtype=np.int64), (np.arange(P + 1, dtype=np.int64) * n) // P)
                 if partition == "contiguous" else bisection_partition_array(X, P))
        perm, bounds = parts.perm, parts.bounds
        shards = client.scatter([X[perm[a:b]] for a, b in zip(bounds[:-1], bounds[1:])], hash=False)
        rows = client.scatter([perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])], hash=False)
    sizes = np.diff(parts.bounds)  # near-equal, each >= 2 rows (P <= n // 2)
    seeds = np.random.SeedSequence(seed_int(check_random_state(random_state))).spawn(P)
    indexes = [client.submit(_build_shard, shards[p], min(k, int(sizes[p]) - 1), shard_method, metric, seeds[p],
                             n_jobs, P > 1 or bool(queried), pure=False) for p in range(P)]
    # the shards' coordinates are dropped once their index is built (the index keeps one copy of them), so a
    # worker does not hold every row of its shards twice
    return ShardIndexes(indexes, rows, parts, k, int(X.shape[1]), client)


def shard_graph_futures(sharded: ShardIndexes) -> list:
    """Steps 2-4 of the module docstring: the kNN graph of the indexed rows, one future per shard resolving to
    ``(indices int64 (n_p, k), distances float32 (n_p, k))`` of its rows (global row numbers).

    Which rows of shard q are searched in shard p is decided on q's worker first (:func:`_query_plan`); only the
    pairs with rows to search get a query task, and only those rows of X move to the index's worker (submitting
    every pair would move a whole shard of X per pair, mostly rows that cannot find a neighbour there, and the
    copies would fill the workers' memory).
    """
    from distributed import as_completed

    client, parts, k = sharded.client, sharded.partition, sharded.n_neighbors
    indexes, rows, sizes = sharded.indexes, sharded.rows, sharded.sizes
    P = len(indexes)
    own = [client.submit(_own_graph, indexes[q], rows[q], pure=False) for q in range(P)]
    radius = [client.submit(_kth_distance, g, k, pure=False) for g in own]
    plans = [client.submit(_query_plan, indexes[q], radius[q], q, P, parts.splits, pure=False) for q in range(P)]
    counts = {client.submit(_plan_counts, plans[q], pure=False): q for q in range(P)}
    answers, merged = {}, {}
    for done in as_completed(list(counts)):  # a shard's queries start as soon as its plan is known
        q = counts[done]
        for p, count in done.result().items():
            if count:
                taken = client.submit(_take_planned, indexes[q], plans[q], p, pure=False)
                answers[q, p] = client.submit(_search_taken, indexes[p], taken, min(k, int(sizes[p])), rows[p],
                                              pure=False)
        merged[q] = client.submit(merge_candidates, k, own[q], *[answers[q, p] for p in range(P) if (q, p) in answers],
                                  pure=False)
    out = []
    for q in range(P):
        reverse = [client.submit(reverse_candidates, answers[p, q], rows[p], rows[q], radius[q], pure=False)
                   for p in range(P) if (p, q) in answers]
        out.append(client.submit(add_candidates, k, merged[q], *reverse, pure=False) if reverse else merged[q])
    return out


def _active_client():
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError) as exc:
        raise ParameterError(
            "method='sharded' runs on a Dask cluster and needs an active distributed.Client "
            f"(e.g. `with distributed.Client(address):`); none was found ({exc})"
        ) from exc


def _check_X(X: Any) -> tuple[Any, int, bool]:
    """``(X, n, lazy)``: a numpy ``X`` validated as :func:`~spectral._validation.check_array_2d` (float64), a dask
    ``X`` checked for shape only (``lazy=True``; its values are validated per shard on the workers)."""
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        da = None
    if da is not None and isinstance(X, da.Array):
        if X.ndim != 2 or any(math.isnan(s) for s in X.shape):
            raise InputDataError(f"X must be a 2-D dask array with known row chunks; got shape {X.shape}")
        if X.shape[0] < 2 or X.shape[1] < 1:
            raise InputDataError(f"X must have at least 2 rows and 1 column; got shape {X.shape}")
        return X, int(X.shape[0]), True
    X = check_array_2d(X, "X", min_rows=2)
    return X, X.shape[0], False


def _put_shards_lazy(client, X: Any, P: int, partition: str) -> tuple[BlockPartition, list, list]:
    """``(partition, shards, rows)`` of a dask ``X``: its row chunks are computed on the workers; the partition's
    labels stay there (:func:`~spectral.neighbours.partition.bisection_partition_blocks`; the contiguous one's labels
    are made here, per chunk), and each shard's rows of X and row numbers are assembled there
    (:func:`spectral.neighbours.sharded_assembly.assemble_parts`: every row moves once). The chunk futures are
    released as soon as the assembly is submitted."""
    chunks, block_bounds = row_chunk_futures(X, client)  # the partition's blocks are the same keys
    if partition == "bisection":
        parts = bisection_partition_blocks(X, P, client)
    else:
        n = int(block_bounds[-1])
        bounds = (np.arange(P + 1, dtype=np.int64) * n) // P
        labels = [np.searchsorted(bounds, np.arange(a, b), side="right").astype(np.int32) - 1
                  for a, b in zip(block_bounds[:-1], block_bounds[1:])]
        counts = np.array([np.bincount(lab, minlength=P) for lab in labels], dtype=np.int64)
        parts = BlockPartition(labels, block_bounds, bounds, (), counts)
    rows, shards = assemble_parts(client, parts, chunks)
    for future in chunks:  # the scheduler keeps each chunk until its split task has run, then frees it (peak
        future.release()  # per worker: its chunks or their pieces, plus the shard being joined)
    return parts, shards, rows


def _build_shard(X_p, k: int, method: str, metric: str, seed: np.random.SeedSequence, n_jobs, queried: bool):
    """Task: the :class:`~spectral.neighbours.index.KNNIndex` (with its own ``(n_p, k)`` graph) of one shard's rows.

    An index that other shards will query is prepared here, before query tasks use it while the worker
    pickles it for other workers (pynndescent's lazy preparation is not thread-safe, :meth:`KNNIndex.prepare`).
    """
    index = KNNIndex.build(X_p, k, method=method, metric=metric, random_state=seed, n_jobs=n_jobs)
    return index.prepare() if queried else index


def _own_graph(index, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Task: a shard's own kNN graph in global row numbers (``rows`` (n_p,): the shard's rows), ``(n_p, k_p)``
    int64 and float32."""
    indices, distances = index.neighbor_graph()
    return rows[indices], distances


def within_radius(bounds: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Boolean mask of the distance lower ``bounds`` (any shape) within ``radius`` (broadcast to it) times
    ``1 + GAP_RTOL`` (the bound's rounding): where a row may have a neighbour in the shard the bound is to."""
    return bounds <= radius * (1 + GAP_RTOL)


def _kth_distance(own: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """Task: ``(n_q,)`` distance of each row of a shard to its ``k``-th neighbour inside the shard (an upper bound
    of its final ``k``-th distance; infinite when the shard holds ``k`` rows or fewer)."""
    dist = own[1]
    # a copy of the last column: a view would keep the whole (n_q, k) list alive with this task's result
    return dist[:, -1].astype(np.float64) if dist.shape[1] >= k else np.full(dist.shape[0], np.inf)


def _query_plan(index_q, radius_q: np.ndarray, q: int, n_parts: int, splits: tuple) -> dict:
    """Task on shard q's worker: ``{p: rows (r_p,) or None}``, the rows of shard q (its index ``index_q``) to search
    in each other shard p; None (every row) without cuts.

    A row is searched in shard p when the lower bound of its distance to every row of p that the partition's cuts
    give (:func:`spectral.neighbours.partition.part_distance_bounds`: the largest gap over the cuts that bound p, not
    only the one that separates p from q) is within its own-shard ``k``-th distance ``radius_q`` (n_q,) (times ``1 +
    GAP_RTOL``, the bound's rounding): no other row can have a neighbour in p. The bounds are made for
    :data:`PLAN_CHUNK_ROWS` rows at a time ((rows, P) floats), fewer when their coordinates exceed
    :data:`PLAN_CHUNK_BYTES`."""
    others = [p for p in range(n_parts) if p != q]
    if not splits:
        return {p: None for p in others}
    selected = {p: [] for p in others}
    n_q = index_q.n_samples
    row_bytes = index_q.points(np.zeros(1, np.int64)).nbytes  # one row, in the dtype the index holds
    chunk = max(1, min(PLAN_CHUNK_ROWS, PLAN_CHUNK_BYTES // row_bytes))
    for start in range(0, n_q, chunk):
        stop = min(start + chunk, n_q)
        X_chunk = index_q.points(np.arange(start, stop))
        near = within_radius(part_distance_bounds(splits, n_parts, X_chunk), radius_q[start:stop, None])
        for p in others:
            selected[p].append(start + np.flatnonzero(near[:, p]))
    return {p: np.concatenate(parts).astype(np.int64) for p, parts in selected.items()}


def _plan_counts(plan: dict) -> dict:
    """Task: ``{p: number of rows to search in shard p}`` of a :func:`_query_plan` (-1: every row), what the
    caller gathers."""
    return {p: -1 if sel is None else int(sel.size) for p, sel in plan.items()}


def _take_planned(index_q, plan: dict, p: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Task on shard q's worker: ``(rows (r,), X_q[rows] (r, d), n_q)`` to search in shard ``p``, the coordinates
    read from shard q's index ``index_q``."""
    n_q = index_q.n_samples
    sel = np.arange(n_q, dtype=np.int64) if plan[p] is None else plan[p]
    return sel, index_q.points(sel), n_q


def _search_taken(index, taken: tuple[np.ndarray, np.ndarray, int], k: int, rows_p: np.ndarray) -> ShardAnswer:
    """Task on shard p's worker: the ``k`` nearest rows of shard p (``index``, rows ``rows_p`` (n_p,)) of the rows
    ``taken`` (:func:`_take_planned`) of another shard, in global row numbers."""
    sel, X_sel, n_q = taken
    if not sel.size:
        return ShardAnswer(sel, np.empty((0, k), dtype=np.int64), np.empty((0, k), dtype=np.float32), n_q)
    found, dist = index.query(X_sel, k)
    return ShardAnswer(sel, rows_p[found], dist, n_q)


def search_rows(index, X_q: np.ndarray, sel: np.ndarray, k: int, rows_p: np.ndarray) -> ShardAnswer:
    """The ``k`` nearest rows of one shard (``index`` over the rows ``rows_p`` (n_p,)) of the rows ``sel`` (r,)
    ascending of ``X_q`` (m, d), in global row numbers: a :class:`ShardAnswer` of those rows."""
    sel = np.asarray(sel, dtype=np.int64)
    return _search_taken(index, (sel, X_q[sel], X_q.shape[0]), k, rows_p)
