"""Search points that are not indexed (held-out and new points) in the shard indexes of
:mod:`spectral.neighbours.sharded`, pruned by the partition's cuts.

A query point's ``k`` nearest indexed rows may lie in any shard, but the cuts of a locality partition
(:class:`spectral.neighbours.partition.Split`) bound its distance to every row of a shard from below: along each cut
that separates the point from the shard, the distance of its projection to the shard's side (the direction is a unit
vector, so ``|x - y| >= |(x - y) . direction|``); the largest such bound over the shard's cuts holds for the
whole shard (:func:`spectral.neighbours.partition.part_distance_bounds`). So the search runs in two rounds:

1. **home** (B P tasks, each searching only its shard's home rows): each point is searched in its *home* shard,
   the one with the smallest bound (0 for the shard whose cells contain it), which gives ``k`` candidates and
   their ``k``-th distance ``r`` (infinite if the shard holds fewer than ``k`` rows);
2. **other shards** (B P tasks): each point is searched in every other shard whose bound is within ``r`` (times
   ``1 + GAP_RTOL``, the bound's rounding); a shard farther than ``r`` holds no row nearer than the point's
   ``k``-th home candidate, so it cannot change the answer;

then the ``2 P`` answers of a block (each listing the rows it searched) are merged
(:func:`~spectral.neighbours.merge.merge_candidates`). With
exact shard searches the result equals the unpruned search of every shard (tested); with NN-descent searches,
the pruned shards are those whose search could only return rows farther than ``r``. Without cuts (contiguous
shards, or one shard) every bound is 0 and the second round searches every shard, as without the pruning.

This is the shard-pair pruning of :func:`spectral.neighbours.sharded.shard_graph_futures` (where a shard's own rows know
their radius from the shard's own graph) given to points that belong to no shard: their radius comes from the
first round. It is the classic branch-and-bound of space-partitioning trees (J. H. Friedman, J. L. Bentley,
R. A. Finkel, "An algorithm for finding best matches in logarithmic expected time", ACM TOMS 1977), applied to
the top levels of the tree, whose leaves are the shards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_array_2d, check_int
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.merge import ShardAnswer, merge_candidates
from eigenflow.spectral.neighbours.partition import part_distance_bounds
from eigenflow.spectral.neighbours.sharded import ShardIndexes, search_rows, within_radius


def query_shard_indexes(sharded: ShardIndexes, Q_blocks: list, n_neighbors: int, *,
                        with_search_counts: bool = False) -> Any:
    """The ``n_neighbors`` nearest indexed rows of query points that are not indexed (held-out or new points),
    searched in the shard indexes, pruned by the partition's cuts (module docstring).

    Parameters
    ----------
    sharded : ShardIndexes
        From :func:`spectral.neighbours.sharded.build_shard_indexes` (with ``queried=True`` when it has one shard).
    Q_blocks : list of ndarray (m_b, d) or of futures of them
        Row blocks of query points; arrays are validated here (finite, ``d`` columns) and scattered, futures
        on the workers (:meth:`~spectral.neighbours.index.KNNIndex.query`'s errors).
    n_neighbors : int in [1, sharded.n_samples]
    with_search_counts : bool
        Also return, per block, a future of the number of (query row, shard) searches made (``m_b P`` without
        pruning).

    Returns
    -------
    list of futures, one per block, resolving to ``(indices int64 (m_b, k), distances float32 (m_b, k))``
        Indexed rows in the numbering of the indexed X, sorted by (distance, index); the distances recomputed
        in float64 from the coordinates (:func:`spectral.neighbours._refine.refine`) by each shard's query, so a row
        found in any shard has the distance a single index would give it. With ``with_search_counts``: a pair
        ``(answers, counts)``.
    """
    from eigenflow.spectral.placement import is_future

    if not isinstance(sharded, ShardIndexes):
        raise ParameterError(f"sharded must be the ShardIndexes of build_shard_indexes; got {type(sharded).__name__}")
    k = check_int("n_neighbors", n_neighbors, low=1, high=sharded.n_samples)
    if not isinstance(Q_blocks, (list, tuple)):
        raise ParameterError("Q_blocks must be a list of row blocks (arrays or futures); got "
                             f"{type(Q_blocks).__name__}")
    client, sizes, P = sharded.client, sharded.sizes, len(sharded.indexes)
    blocks = []
    for b, Q in enumerate(Q_blocks):
        if not is_future(Q):
            Q = check_array_2d(Q, f"Q_blocks[{b}]", min_rows=1)
            if Q.shape[1] != sharded.n_features:
                raise InputDataError(f"Q_blocks[{b}] must have {sharded.n_features} columns like the indexed X; got "
                                     f"{Q.shape[1]}")
            Q = client.scatter(Q, hash=False)
        blocks.append(Q)
    answers, counts = [], []
    for Q in blocks:
        plan = client.submit(_search_plan, Q, sharded.partition.splits, P, pure=False)
        searches = [[client.submit(_search_part, sharded.indexes[p], Q, min(k, int(sizes[p])), sharded.rows[p], plan,
                                   p, None, pure=False) for p in range(P)]]
        radius = client.submit(_home_radius, k, *searches[0], pure=False)
        searches.append([client.submit(_search_part, sharded.indexes[p], Q, min(k, int(sizes[p])), sharded.rows[p],
                                       plan, p, radius, pure=False) for p in range(P)])
        answers.append(client.submit(merge_candidates, k, None, *searches[0], *searches[1], pure=False))
        if with_search_counts:
            counts.append(client.submit(_count_searched, *searches[0], *searches[1], pure=False))
    return (answers, counts) if with_search_counts else answers


def _search_plan(Q: np.ndarray, splits: tuple, n_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Task: ``(home (m,) int64, bounds (m, P))`` of a query block: the distance bounds to every shard
    (:func:`part_distance_bounds`) and the shard with the smallest (the first on ties)."""
    bounds = part_distance_bounds(splits, n_parts, Q)
    return np.argmin(bounds, axis=1), bounds


def _search_part(index, Q: np.ndarray, k: int, rows_p: np.ndarray, plan: tuple[np.ndarray, np.ndarray], p: int,
                 radius: np.ndarray | None) -> ShardAnswer:
    """Task: the query rows' ``k`` nearest rows of shard ``p`` (global rows;
    :class:`~spectral.neighbours.merge.ShardAnswer` of the rows searched): with ``radius`` None the rows whose home is
    ``p``; else the others whose bound to ``p`` is within their ``radius`` (m,)."""
    home, bounds = plan
    if radius is None:
        sel = np.flatnonzero(home == p)
    else:
        sel = np.flatnonzero((home != p) & within_radius(bounds[:, p], radius))
    return search_rows(index, np.asarray(Q), sel, k, rows_p)


def _home_radius(k: int, *answers: ShardAnswer) -> np.ndarray:
    """Task: ``(m,)`` each row's ``k``-th smallest distance in its home answer (every row has one home shard; inf
    if that shard holds fewer than ``k`` rows): the radius that decides which other shards it is searched in."""
    radius = np.full(int(answers[0].n_rows), np.inf)
    for a in answers:
        if a.distances.shape[1] >= k:
            radius[a.rows] = np.asarray(a.distances, dtype=np.float64)[:, k - 1]
    return radius


def _count_searched(*answers: ShardAnswer) -> int:
    """Task: the number of (row, shard) searches behind the answers."""
    return int(sum(a.rows.size for a in answers))
