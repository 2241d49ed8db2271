"""Row partitions that keep neighbouring points together: recursive bisection along principal directions.

The top ``ceil(log2 P)`` levels of a PCA tree (a random-projection tree whose directions are the principal
ones: S. Dasgupta, Y. Freund, "Random projection trees and low dimensional manifolds", STOC 2008, split at a
median of a random direction; N. Verma, S. Kpotufe, S. Dasgupta, "Which spatial partition trees are
adaptive to intrinsic dimension?", UAI 2009, show that the principal direction adapts at least as well).
A part that must end as ``t`` final parts is cut at the quantile ``floor(t / 2) / t`` of the projections of
its points on its principal direction (:func:`split_sizes`), so every final part has ``floor(n / P)`` or
``ceil(n / P)`` rows (the nested floors; checked in the tests). Points close in space fall on the same side
of every cut except near a cut, so a kNN graph of a manifold keeps most of its edges inside the parts. The
cuts are kept (:class:`Split` in :attr:`RowPartition.splits`): the distance of a point's projection to the
other side of a cut bounds its distance to every point there, which prunes the shard-pair kNN queries
(:mod:`spectral.neighbours.sharded`).

The computation is written over **row blocks** of ``X`` (n, d): :func:`bisection_blocks` drives it with a
``map_blocks`` callable that applies a function to every block where the block lives and brings the (small)
results back, and a ``keep`` callable that leaves them there (in this process for
:func:`bisection_partition_array`, on the Dask workers that hold the blocks for
:func:`bisection_partition_blocks`). Per level: each part's principal direction comes from the
per-part moments (up to :data:`SCATTER_MAX_FEATURES` columns, counts (c,), means (c, d) and centred scatter
matrices (c, d, d) per block, combined by the pairwise update of T. F. Chan, G. H. Golub, R. J. LeVeque,
"Algorithms for computing the sample variance", 1983; above it, the means and then one round per power
iteration of the products (c, d) per block, :func:`block_scatter_products`); the projections (m,) of each block's rows
on their part's direction stay with the block; each part's cut, the projection of a given rank, is found by a
distributed selection over value histograms (:func:`select_ranks`); and the new labels are computed with the
block and stay there. So the driver receives O(c d^2 + c * SELECT_BINS) numbers (O(c d + c * SELECT_BINS) above
:data:`SCATTER_MAX_FEATURES` columns) per block per round, never a
row of ``X`` nor one number per row: the labels of the rows of ``X`` stay per block (:class:`BlockPartition`),
and the parts' row lists can be assembled where they are used.

No random draws: the power iteration for each direction starts from the fixed vector ``1 / sqrt(d)``
(:func:`principal_direction`), and ties between equal projections go to the smaller row number, so the
partition is a function of ``X`` and ``P`` only (the same for any seed, block size or worker assignment, up
to the rounding of the moments' summation order).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from eigenflow.spectral._arrays import row_chunk_futures
from eigenflow.spectral._validation import check_int
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.partition_tasks import (SLICE_ROWS, _labels_of, block_assign, block_histograms,
                                                 block_interval_rows, block_moments, block_part_counts,
                                                 block_part_ranges, block_projections, block_right_min,
                                                 block_scatter_products, block_sums, block_tie_rows, combine_moments)

#: Power iterations for the principal direction of a part (a direction, not an eigenvector to precision: the
#: split only needs a long axis of the point cloud).
PCA_POWER_ITERATIONS = 20

#: Up to this many columns, :func:`bisection_blocks` forms each part's ``(d, d)`` scatter (one pass over the
#: blocks per level); above it, the power iterations run over the blocks (:func:`block_scatter_products`): the
#: scatters' ``O(n d^2)`` work and the ``c d^2`` moments sent to the driver grow too fast with d.
SCATTER_MAX_FEATURES = 2 * PCA_POWER_ITERATIONS



@dataclass(frozen=True)
class Split:
    """One cut of the tree: the rows of final parts ``[lo, hi)`` were split into ``[lo, mid)`` (projection
    ``(x - mean) . direction`` at most ``left_max``) and ``[mid, hi)`` (at least ``right_min``); ``mean``,
    ``direction`` (d,)."""

    lo: int
    mid: int
    hi: int
    mean: np.ndarray
    direction: np.ndarray
    left_max: float
    right_min: float

    def projections(self, Y: np.ndarray) -> np.ndarray:
        """``(m,)``: ``(y - mean) . direction`` for the rows of ``Y`` (m, d), in float64, :data:`SLICE_ROWS` rows
        at a time."""
        out = np.empty(Y.shape[0])
        for a in range(0, Y.shape[0], SLICE_ROWS):
            out[a:a + SLICE_ROWS] = (np.asarray(Y[a:a + SLICE_ROWS], dtype=np.float64) - self.mean) @ self.direction
        return out

    def gap(self, Y: np.ndarray, left: bool, projections: np.ndarray | None = None) -> np.ndarray:
        """``(m,)`` lower bound of the distance from each row of ``Y`` (m, d) (rows of the ``left`` side, or of
        the right one) to every row of the other side: the distance of its projection to that side's
        extreme projection (``direction`` is a unit vector, so ``|x - y| >= |(x - y) . direction|``).
        ``projections``: :meth:`projections` of ``Y`` when the caller has them."""
        s = self.projections(Y) if projections is None else projections
        return self.right_min - s if left else s - self.left_max


class _Cuts:
    """What both partition forms share: ``bounds`` (P + 1,) and the cuts ``splits``."""

    bounds: np.ndarray
    splits: tuple

    def separating(self, p: int, q: int) -> tuple[Split, bool]:
        """The cut that separated parts ``p`` and ``q`` (p != q), and whether ``q`` is on its left side."""
        for cut in self.splits:
            if cut.lo <= min(p, q) and max(p, q) < cut.hi and min(p, q) < cut.mid <= max(p, q):
                return cut, q < cut.mid
        raise ParameterError(f"parts p and q must be two different parts in [0, {self.bounds.size - 2}]; got "
                             f"p={p}, q={q}")


@dataclass(frozen=True)
class RowPartition(_Cuts):
    """``perm`` (n,) int64: the rows part by part, ascending inside each part; ``bounds`` (P + 1,) int64: part
    ``p`` holds ``perm[bounds[p]:bounds[p + 1]]``; ``splits``: the cuts of the tree (:class:`Split`), empty
    for one part."""

    perm: np.ndarray
    bounds: np.ndarray
    splits: tuple = field(default=())


@dataclass(frozen=True)
class BlockPartition(_Cuts):
    """The same partition with its labels left per row block (on the workers for a dask X: no (n,) array in the
    process that drives it).

    ``labels[j]``: the part of each row of block ``j`` ((m_j,) int32, or a future of it; rows
    ``block_bounds[j]:block_bounds[j + 1]``); ``counts`` (B, P) int64: rows of block ``j`` in part ``p``;
    ``bounds`` (P + 1,), ``splits`` as :class:`RowPartition`.
    """

    labels: list
    block_bounds: np.ndarray
    bounds: np.ndarray
    splits: tuple
    counts: np.ndarray

    def to_row_partition(self) -> RowPartition:
        """The :class:`RowPartition` (``perm`` (n,)), from labels that are arrays here."""
        labels = np.concatenate([_labels_of(lab, int(b - a)) for lab, a, b in
                                 zip(self.labels, self.block_bounds[:-1], self.block_bounds[1:])])
        return RowPartition(np.argsort(labels, kind="stable").astype(np.int64), self.bounds, self.splits)


def split_sizes(size: int, parts: int) -> tuple[int, int]:
    """``(left_parts, cut)``: a part of ``size`` rows that must end as ``parts`` parts sends its ``cut`` rows
    of smallest projection to ``left_parts = parts // 2`` final parts, the rest to ``parts - left_parts``."""
    left = parts // 2
    return left, (size * left) // parts


def principal_directions(products: Callable[[np.ndarray], np.ndarray], active: np.ndarray, d: int) -> np.ndarray:
    """``(c, d)``: for each part ``i`` with ``active[i]``, a unit vector from :data:`PCA_POWER_ITERATIONS` power
    iterations of its scatter ``C_i`` (d, d) from the fixed start ``1 / sqrt(d)``; zero rows for the others.

    ``products(V)`` returns the ``(c, d)`` rows ``C_i V[i]`` (one round over the blocks when the scatters are not
    formed, :func:`block_scatter_products`). A part whose product is zero (all its points equal) keeps its
    current vector."""
    c = active.size
    V = np.zeros((c, d))
    V[active] = np.ones(d) / np.sqrt(d)
    frozen = ~np.asarray(active, dtype=bool)
    for _ in range(PCA_POWER_ITERATIONS):
        if frozen.all():
            break
        W = products(V)
        for i in np.flatnonzero(~frozen):
            norm = np.linalg.norm(W[i])
            if norm == 0:
                frozen[i] = True
            else:
                V[i] = W[i] / norm
    return V


def principal_direction(apply: Callable[[np.ndarray], np.ndarray], d: int) -> np.ndarray:
    """Unit ``(d,)`` vector: :func:`principal_directions` of one part whose scatter operator is ``apply``
    (``v -> C v`` with ``C`` (d, d) positive semi-definite)."""
    return principal_directions(lambda V: apply(V[0])[None, :], np.array([True]), d)[0]


def bisection_blocks(map_blocks: Callable[[Callable, list], list], keep: Callable[[Callable, list], list],
                     block_bounds: np.ndarray, n_parts: int) -> BlockPartition:
    """Recursive principal-direction bisection of the rows of X given as row blocks (see the module docstring),
    with the part labels left where the blocks are.

    Parameters
    ----------
    map_blocks : callable
        ``map_blocks(fn, args)`` returns ``[fn(block_j, *args[j]) for every block j]`` (computed where the
        blocks live, results brought back: small ones only); ``args`` has one tuple per block, whose items may
        be what ``keep`` returned for that block.
    keep : callable
        Like ``map_blocks`` but the results stay where they were computed (futures on the workers, or the arrays
        themselves in memory): the projections and labels, (m_j,) per block.
    block_bounds : ndarray of int, shape (B + 1,)
        Block ``j`` holds rows ``block_bounds[j]:block_bounds[j + 1]``; ``block_bounds[0] = 0``, increasing.
    n_parts : int in [1, n]

    Returns
    -------
    BlockPartition
        Per block its rows' part labels (what ``keep`` returned), the (B, P) row counts per block and part,
        the part boundaries and the ``P - 1`` cuts.

    Each level costs two passes over the blocks (moments, projections kept) plus the rounds of
    :func:`select_ranks` and one labelling pass; what comes back is O(c d^2) moments and O(c * SELECT_BINS)
    histograms per block, never O(n).
    """
    block_bounds = np.asarray(block_bounds, dtype=np.int64)
    if block_bounds.ndim != 1 or block_bounds.size < 2 or block_bounds[0] != 0 or np.any(np.diff(block_bounds) <= 0):
        raise ParameterError(f"block_bounds must be (B + 1,) increasing from 0; got {block_bounds.tolist()[:8]}")
    n = int(block_bounds[-1])
    P = check_int("n_parts", n_parts, low=1, high=n)
    starts = [int(a) for a in block_bounds[:-1]]
    labels: list = [None] * len(starts)  # None: every row in part 0
    targets = [P]  # final parts each current part must become
    splits = []
    d = int(map_blocks(_n_columns, [()] * len(starts))[0]) if P > 1 else 0
    for _ in range(math.ceil(math.log2(P)) if P > 1 else 0):
        c = len(targets)
        directions, counts, means = _level_directions(map_blocks, labels, starts, np.array(targets) > 1, d)
        proj = keep(block_projections, [(lab, means, directions) for lab in labels])
        first = np.concatenate([[0], np.cumsum(targets)])  # final parts of current part i: [first[i], first[i + 1])
        ranks, cuts, new_targets, left, right = {}, {}, [], np.zeros(c, np.int32), np.zeros(c, np.int32)
        for i in range(c):
            left[i] = len(new_targets)
            if targets[i] == 1:
                right[i] = left[i]
                new_targets.append(1)
                continue
            n_left, cuts[i] = split_sizes(int(counts[i]), targets[i])
            right[i] = left[i] + 1
            new_targets += [n_left, targets[i] - n_left]
            if cuts[i]:
                ranks[i] = cuts[i] - 1
        chosen = select_ranks(map_blocks, list(zip(proj, labels, starts)), ranks, c)
        value = np.full(c, np.inf)  # rows with (projection, row) <= (value, row) go left
        row = np.full(c, -1, dtype=np.int64)
        for i in cuts:
            value[i], row[i] = chosen[i] if i in chosen else (-np.inf, -1)
        right_min = np.min(map_blocks(block_right_min, [(p, lab, value, row, s) for p, lab, s in
                                                        zip(proj, labels, starts)]), axis=0)
        for i in cuts:
            first_i = int(first[i])
            splits.append(Split(first_i, first_i + new_targets[left[i]], int(first[i + 1]), means[i], directions[i],
                                float(value[i]), float(right_min[i])))
        labels = keep(block_assign, [(p, lab, value, row, left, right, s) for p, lab, s in zip(proj, labels, starts)])
        targets = new_targets
    counts = np.array(map_blocks(block_part_counts, [(lab, P) for lab in labels]), dtype=np.int64).reshape(-1, P)
    bounds = np.concatenate([[0], np.cumsum(counts.sum(axis=0))]).astype(np.int64)
    return BlockPartition(labels, block_bounds, bounds, tuple(splits), counts)


def _level_directions(map_blocks: Callable[[Callable, list], list], labels: list, starts: list, active: np.ndarray,
                      d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(directions (c, d), counts (c,), means (c, d))`` of the current parts of one level of
    :func:`bisection_blocks` (``active``: the parts to cut). Up to :data:`SCATTER_MAX_FEATURES` columns the
    blocks send their parts' ``(d, d)`` scatters once (one pass); above it the power iterations run over the
    blocks (one pass for the means, then one per iteration, ``(c, d)`` per block each): the scatters' ``O(n
    d^2)`` work and ``c d^2`` floats per block (67 MB at d = 1024, c = 8) cost more than the rounds."""
    c = active.size
    args = [(lab, c, s) for lab, s in zip(labels, starts)]
    if d <= SCATTER_MAX_FEATURES:
        counts, means, scatter = combine_moments(map_blocks(block_moments, args))
        return principal_directions(lambda V: np.stack([scatter[i] @ V[i] for i in range(c)]), active, d), \
            counts, means
    sums = map_blocks(block_sums, args)
    counts = np.sum([a for a, _ in sums], axis=0)
    means = np.sum([b for _, b in sums], axis=0) / np.maximum(counts, 1)[:, None]
    return principal_directions(lambda V: np.sum(map_blocks(block_scatter_products, [
        (lab, means, V) for lab in labels]), axis=0), active, d), counts, means


def _n_columns(block) -> int:
    """Task: the number of columns of a block."""
    return int(np.shape(block)[1])


def bisection_partition(map_blocks: Callable[[Callable, list], list], block_bounds: np.ndarray,
                        n_parts: int) -> RowPartition:
    """:func:`bisection_blocks` with every result brought back (``keep = map_blocks``), as a :class:`RowPartition`:
    ``perm`` (n,) the rows part by part, ascending inside each part; ``bounds`` (P + 1,); ``splits``."""
    return bisection_blocks(map_blocks, map_blocks, block_bounds, n_parts).to_row_partition()


def bisection_partition_array(Y: np.ndarray, n_parts: int) -> RowPartition:
    """:func:`bisection_partition` of an in-memory ``Y`` (n, d) (one block)."""
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] < 1:
        raise InputDataError(f"Y must be a 2-D array with at least one row; got shape {Y.shape}")
    return bisection_partition(lambda fn, args: [fn(Y, *args[0])], np.array([0, Y.shape[0]]), n_parts)


def bisection_partition_blocks(X: Any, n_parts: int, client) -> BlockPartition:
    """:func:`bisection_blocks` of a dask array ``X`` (n, d) with known row chunks, on the workers of ``client``:
    the row chunks are computed there once (held as futures during the levels, released at the end), the
    projections and labels stay there (futures), and only moments, histograms and counts come back. The
    labels' futures keep their lineage (the scheduler can recompute them if a worker is lost)."""
    blocks, block_bounds = row_chunk_futures(X, client)  # on the workers, never gathered here

    def keep(fn, args):
        return [client.submit(fn, b, *a, pure=False) for b, a in zip(blocks, args)]

    def map_blocks(fn, args):
        return client.gather(keep(fn, args))

    try:
        return bisection_blocks(map_blocks, keep, block_bounds, n_parts)
    finally:
        for future in blocks:  # drop this call's references (not cancel: other holders of the keys keep theirs)
            future.release()


def bisection_partition_dask(X: Any, n_parts: int, client) -> RowPartition:
    """:func:`bisection_partition_blocks` with the labels gathered into a :class:`RowPartition` (O(n) here: for
    callers that need ``perm`` in this process)."""
    parts = bisection_partition_blocks(X, n_parts, client)
    return dataclasses.replace(parts, labels=client.gather(parts.labels)).to_row_partition()


#: Bins of the value histograms of :func:`select_ranks` per round; a candidate interval holding at most
#: :data:`SELECT_GATHER` rows is brought back and sorted.
SELECT_BINS = 256
SELECT_GATHER = 4096


def select_ranks(map_blocks: Callable[[Callable, list], list], handles: list, ranks: dict, n_labels: int,
                 max_rounds: int = 200) -> dict:
    """Distributed selection: for each part ``i`` of ``ranks``, the ``(value, row)`` of rank ``ranks[i]`` (0-based)
    in the (projection, global row) order of the rows labelled ``i``: the ``ranks[i] + 1`` smallest pairs are
    exactly those ``<=`` it, so ties between equal projections go to the smaller row (a stable sort's order).

    ``handles[j] = (projections (m_j,), labels (m_j,), first row)`` of block ``j`` (what ``keep`` returned). Each round
    brings back per block a :data:`SELECT_BINS`-bin histogram of the projections inside each part's current
    interval (counts, bin minima and maxima: the bins are monotone in the value, so the chosen bin's exact
    minimum and maximum bound the next interval and every value between them is in the bin); an interval of at
    most :data:`SELECT_GATHER` rows is brought back whole, and an interval of one value (ties) is resolved by
    row order from the per-block counts. ``max_rounds`` bounds the rounds (the intervals shrink by about
    ``SELECT_BINS`` per round, so float64 values need a handful).
    """
    if not ranks:
        return {}
    parts = np.array(sorted(ranks), dtype=np.int64)
    ranges = map_blocks(block_part_ranges, [(p, lab, n_labels) for p, lab, _ in handles])
    lo = np.min([r[0] for r in ranges], axis=0)[parts]
    hi = np.max([r[1] for r in ranges], axis=0)[parts]
    below = np.zeros(parts.size, dtype=np.int64)  # rows of the part with projection < lo
    want = np.array([ranks[int(i)] for i in parts], dtype=np.int64)
    out: dict = {}
    active = np.ones(parts.size, dtype=bool)
    for _ in range(max_rounds):
        if not active.any():
            return out
        a = np.flatnonzero(active)
        hists = map_blocks(block_histograms, [(p, lab, parts[a], lo[a], hi[a], SELECT_BINS) for p, lab, _ in handles])
        counts = np.sum([h[0] for h in hists], axis=0)  # (len(a), bins)
        mins = np.min([h[1] for h in hists], axis=0)
        maxs = np.max([h[2] for h in hists], axis=0)
        gather, ties = [], []
        for t, i in enumerate(a):
            cum = np.cumsum(counts[t])
            b = int(np.searchsorted(cum, want[i] - below[i], side="right"))
            below[i] += int(cum[b - 1]) if b else 0
            lo[i], hi[i] = mins[t, b], maxs[t, b]
            if lo[i] == hi[i]:
                per_block = np.array([h[0][t, b] for h in hists], dtype=np.int64)  # ties per block, row order
                j = int(np.searchsorted(np.cumsum(per_block), want[i] - below[i], side="right"))
                ties.append((i, j, int(want[i] - below[i] - (per_block[:j].sum()))))
            elif counts[t, b] <= SELECT_GATHER:
                gather.append(i)
        if gather:
            g = np.array(gather)
            found = map_blocks(block_interval_rows, [(p, lab, parts[g], lo[g], hi[g], s) for p, lab, s in handles])
            for t, i in enumerate(g):
                vals = np.concatenate([f[t][0] for f in found])
                rows = np.concatenate([f[t][1] for f in found])
                order = np.lexsort((rows, vals))
                pick = order[want[i] - below[i]]
                out[int(parts[i])] = (float(vals[pick]), int(rows[pick]))
                active[i] = False
        if ties:
            requests = [[(int(parts[i]), float(lo[i]), m) for i, j, m in ties if j == jb] for jb in range(len(handles))]
            found = map_blocks(block_tie_rows, [(p, lab, r, s) for (p, lab, s), r in zip(handles, requests)])
            for i, j, _ in ties:
                out[int(parts[i])] = (float(lo[i]), found[j][int(parts[i])])
                active[i] = False
    raise RuntimeError(f"select_ranks did not converge in {max_rounds} rounds")  # pragma: no cover - see docstring


def part_distance_bounds(splits: tuple, n_parts: int, Y: np.ndarray) -> np.ndarray:
    """``(m, P)`` lower bounds of the distance from each row of ``Y`` (m, d) to every row of each part, from the
    cuts ``splits`` (:attr:`RowPartition.splits`; none: all 0); what prunes the held-out
    points' shard searches (:mod:`spectral.neighbours.sharded_query`)."""
    Y = np.asarray(Y)
    bounds = np.zeros((Y.shape[0], n_parts))
    for cut in splits:
        s = cut.projections(Y)
        to_left, to_right = cut.gap(Y, False, s), cut.gap(Y, True, s)  # from a row of either side to the other side
        bounds[:, cut.lo:cut.mid] = np.maximum(bounds[:, cut.lo:cut.mid], to_left[:, None])
        bounds[:, cut.mid:cut.hi] = np.maximum(bounds[:, cut.mid:cut.hi], to_right[:, None])
    return bounds


def inside_counts(indices: np.ndarray, rows: np.ndarray) -> tuple[int, int]:
    """``(inside, total)``: how many of the neighbours ``indices`` (m, k) of a part's rows lie in the part,
    whose rows are ``rows`` (sorted ascending), and how many there are."""
    idx = np.asarray(indices, dtype=np.int64).ravel()
    pos = np.minimum(np.searchsorted(rows, idx), rows.size - 1)
    return int(np.sum(rows[pos] == idx)), int(idx.size)
