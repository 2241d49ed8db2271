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
(:mod:`spectral.knn_sharded`).

The computation is written over **row blocks** of ``X`` (n, d): :func:`bisection_partition` drives it with
a ``map_blocks`` callable that applies a function to every block where the block lives (in this process for
:func:`bisection_partition_array`, on the Dask workers that hold the blocks for
:func:`bisection_partition_dask`). Per level and per block two small results come back: the per-part moments
(counts (c,), means (c, d), centred scatter matrices (c, d, d); combined by the pairwise update of T. F.
Chan, G. H. Golub, R. J. LeVeque, "Algorithms for computing the sample variance", 1983) and the projections
(m,) of the block's rows on their part's direction. So the driver receives O(n) floats (one projection per
row) and O(c d^2) per block per level, never a row of ``X``; it keeps the (n,) part labels.

No random draws: the power iteration for each direction starts from the fixed vector ``1 / sqrt(d)``
(:func:`principal_direction`), and ties between equal projections go to the smaller row number, so the
partition is a function of ``X`` and ``P`` only (the same for any seed, block size or worker assignment, up
to the rounding of the moments' summation order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._validation import check_int
from .errors import InputDataError, ParameterError

#: Power iterations for the principal direction of a part (a direction, not an eigenvector to precision: the
#: split only needs a long axis of the point cloud).
PCA_POWER_ITERATIONS = 20


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

    def gap(self, Y: np.ndarray, left: bool) -> np.ndarray:
        """``(m,)`` lower bound of the distance from each row of ``Y`` (m, d) (rows of the ``left`` side, or of
        the right one) to every row of the other side: the distance of its projection to that side's
        extreme projection (``direction`` is a unit vector, so ``|x - y| >= |(x - y) . direction|``)."""
        s = (np.asarray(Y, dtype=np.float64) - self.mean) @ self.direction
        return self.right_min - s if left else s - self.left_max


@dataclass(frozen=True)
class RowPartition:
    """``perm`` (n,) int64: the rows part by part, ascending inside each part; ``bounds`` (P + 1,) int64: part
    ``p`` holds ``perm[bounds[p]:bounds[p + 1]]``; ``splits``: the cuts of the tree (:class:`Split`), empty
    for one part."""

    perm: np.ndarray
    bounds: np.ndarray
    splits: tuple = field(default=())

    def separating(self, p: int, q: int) -> tuple[Split, bool]:
        """The cut that separated parts ``p`` and ``q`` (p != q), and whether ``q`` is on its left side."""
        for cut in self.splits:
            if cut.lo <= min(p, q) and max(p, q) < cut.hi and min(p, q) < cut.mid <= max(p, q):
                return cut, q < cut.mid
        raise ParameterError(f"parts p and q must be two different parts in [0, {self.bounds.size - 2}]; got "
                             f"p={p}, q={q}")


def split_sizes(size: int, parts: int) -> tuple[int, int]:
    """``(left_parts, cut)``: a part of ``size`` rows that must end as ``parts`` parts sends its ``cut`` rows
    of smallest projection to ``left_parts = parts // 2`` final parts, the rest to ``parts - left_parts``."""
    left = parts // 2
    return left, (size * left) // parts


def principal_direction(apply: Callable[[np.ndarray], np.ndarray], d: int) -> np.ndarray:
    """Unit ``(d,)`` vector: :data:`PCA_POWER_ITERATIONS` power iterations of the scatter operator ``apply``
    (``v -> C v`` with ``C`` (d, d) positive semi-definite) from the fixed start ``1 / sqrt(d)``. A zero
    scatter (all points equal) leaves the start vector."""
    v = np.ones(d) / np.sqrt(d)
    for _ in range(PCA_POWER_ITERATIONS):
        w = apply(v)
        norm = np.linalg.norm(w)
        if norm == 0:
            break
        v = w / norm
    return v


def block_moments(block: np.ndarray, labels: np.ndarray, n_labels: int, start: int = 0):
    """Per-part moments of a row block.

    Parameters
    ----------
    block : ndarray, shape (m, d)
        Rows ``start .. start + m - 1`` of X (checked finite; an error names the first bad global row).
    labels : ndarray of int, shape (m,)
        Part of each row, in ``[0, n_labels)``.

    Returns
    -------
    counts : ndarray of int64, shape (c,)
    means : ndarray of float64, shape (c, d)
    scatter : ndarray of float64, shape (c, d, d)
        ``sum_i (x_i - mean)(x_i - mean)^T`` over the part's rows of the block.
    """
    Y = np.asarray(block, dtype=np.float64)
    finite = np.isfinite(Y).all(axis=1)
    if not finite.all():
        raise InputDataError(f"X must be finite; row {start + int(np.flatnonzero(~finite)[0])} holds NaN or "
                             "infinity")
    labels = np.asarray(labels, dtype=np.int64)
    d = Y.shape[1]
    counts = np.bincount(labels, minlength=n_labels).astype(np.int64)
    means = np.zeros((n_labels, d))
    scatter = np.zeros((n_labels, d, d))
    for c in np.flatnonzero(counts):
        Yc = Y[labels == c]
        means[c] = Yc.mean(axis=0)
        Z = Yc - means[c]
        scatter[c] = Z.T @ Z
    return counts, means, scatter


def combine_moments(moments: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Moments of the union of blocks from :func:`block_moments` results (Chan, Golub & LeVeque's pairwise
    update: ``S = S_a + S_b + n_a n_b / n (mean_a - mean_b)(mean_a - mean_b)^T``)."""
    counts, means, scatter = (np.array(a, dtype=np.float64) for a in moments[0])
    for cb, mb, sb in moments[1:]:
        total = counts + cb
        safe = np.maximum(total, 1)
        delta = mb - means
        scatter = scatter + sb + (counts * cb / safe)[:, None, None] * delta[:, :, None] * delta[:, None, :]
        means = means + delta * (cb / safe)[:, None]
        counts = total
    return counts.astype(np.int64), means, scatter


def block_projections(block: np.ndarray, labels: np.ndarray, means: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """``(m,)``: ``(x_i - means[l_i]) . directions[l_i]`` for the rows ``x_i`` (m, d) of a block with labels ``l_i``
    (``means``, ``directions`` (c, d))."""
    Y = np.asarray(block, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    return np.einsum("ij,ij->i", Y - means[labels], directions[labels])


def bisection_partition(map_blocks: Callable[[Callable, list], list], block_bounds: np.ndarray,
                        n_parts: int) -> RowPartition:
    """Recursive principal-direction bisection of the rows of X given as row blocks (see the module docstring).

    Parameters
    ----------
    map_blocks : callable
        ``map_blocks(fn, args)`` returns ``[fn(block_j, *args[j]) for every block j]`` (computed where the
        blocks live); ``args`` has one tuple per block.
    block_bounds : ndarray of int, shape (B + 1,)
        Block ``j`` holds rows ``block_bounds[j]:block_bounds[j + 1]``; ``block_bounds[0] = 0``, increasing.
    n_parts : int in [1, n]

    Returns
    -------
    RowPartition
        ``perm`` (n,) the rows part by part, ascending inside each part; ``bounds`` (P + 1,): part ``p`` holds
        ``perm[bounds[p]:bounds[p + 1]]``; ``splits``: the ``P - 1`` cuts.
    """
    block_bounds = np.asarray(block_bounds, dtype=np.int64)
    if block_bounds.ndim != 1 or block_bounds.size < 2 or block_bounds[0] != 0 or np.any(np.diff(block_bounds) <= 0):
        raise ParameterError(f"block_bounds must be (B + 1,) increasing from 0; got {block_bounds.tolist()[:8]}")
    n = int(block_bounds[-1])
    P = check_int("n_parts", n_parts, low=1, high=n)
    labels = np.zeros(n, dtype=np.int64)
    targets = [P]  # final parts each current part must become
    splits = []
    for _ in range(math.ceil(math.log2(P)) if P > 1 else 0):
        c = len(targets)
        slices = [labels[a:b] for a, b in zip(block_bounds[:-1], block_bounds[1:])]
        counts, means, scatter = combine_moments(map_blocks(block_moments, [
            (s, c, int(a)) for s, a in zip(slices, block_bounds[:-1])]))
        d = means.shape[1]
        directions = np.zeros((c, d))
        for i in range(c):
            if targets[i] > 1:
                directions[i] = principal_direction(lambda v, C=scatter[i]: C @ v, d)
        proj = np.concatenate(map_blocks(block_projections, [(s, means, directions) for s in slices]))
        new_labels = np.empty_like(labels)
        new_targets: list[int] = []
        first = np.concatenate([[0], np.cumsum(targets)])  # final parts of current part i: [first[i], first[i + 1])
        for i in range(c):
            rows = np.flatnonzero(labels == i)  # ascending: ties go to the smaller row
            if targets[i] == 1:
                new_labels[rows] = len(new_targets)
                new_targets.append(1)
                continue
            left, cut = split_sizes(rows.size, targets[i])
            order = np.argsort(proj[rows], kind="stable")
            splits.append(Split(int(first[i]), int(first[i] + left), int(first[i + 1]), means[i], directions[i],
                                float(proj[rows[order[cut - 1]]]) if cut else -np.inf,
                                float(proj[rows[order[cut]]]) if cut < rows.size else np.inf))
            new_labels[rows[order[:cut]]] = len(new_targets)
            new_labels[rows[order[cut:]]] = len(new_targets) + 1
            new_targets += [left, targets[i] - left]
        labels, targets = new_labels, new_targets
    perm = np.argsort(labels, kind="stable").astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=P))]).astype(np.int64)
    return RowPartition(perm, bounds, tuple(splits))


def bisection_partition_array(Y: np.ndarray, n_parts: int) -> RowPartition:
    """:func:`bisection_partition` of an in-memory ``Y`` (n, d) (one block)."""
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] < 1:
        raise InputDataError(f"Y must be a 2-D array with at least one row; got shape {Y.shape}")
    return bisection_partition(lambda fn, args: [fn(Y, *args[0])], np.array([0, Y.shape[0]]), n_parts)


def bisection_partition_dask(X: Any, n_parts: int, client) -> RowPartition:
    """:func:`bisection_partition` of a dask array ``X`` (n, d) with known row chunks, on the workers of
    ``client``: the row chunks are computed there once (held as futures during the levels, released at the
    end) and only moments and projections come back."""
    if X.ndim != 2 or any(math.isnan(s) for s in X.shape) or X.shape[0] < 1:
        raise InputDataError(f"X must be a 2-D dask array with known row chunks; got shape {X.shape}")
    X = X.rechunk({1: X.shape[1]})
    block_bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    blocks = client.compute(X.to_delayed().ravel().tolist())  # row chunks on the workers, never gathered here

    def map_blocks(fn, args):
        return client.gather([client.submit(fn, b, *a, pure=False) for b, a in zip(blocks, args)])

    try:
        return bisection_partition(map_blocks, block_bounds, n_parts)
    finally:
        for future in blocks:  # drop this call's references (not cancel: other holders of the keys keep theirs)
            future.release()


def inside_counts(indices: np.ndarray, rows: np.ndarray) -> tuple[int, int]:
    """``(inside, total)``: how many of the neighbours ``indices`` (m, k) of a part's rows lie in the part,
    whose rows are ``rows`` (sorted ascending), and how many there are."""
    idx = np.asarray(indices, dtype=np.int64).ravel()
    pos = np.minimum(np.searchsorted(rows, idx), rows.size - 1)
    return int(np.sum(rows[pos] == idx)), int(idx.size)
