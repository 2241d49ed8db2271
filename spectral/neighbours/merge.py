"""Candidate lists of the sharded kNN graph (:mod:`spectral.neighbours.sharded`): the answers of shard searches, their
multi-way merge by (distance, index), and the reverse pairs that complete the merged lists.

A shard search answers only for the rows it searched (:class:`ShardAnswer`): with a locality partition most rows
of a shard are ruled out of the search in another shard by the cut between them, so an answer padded to the
whole shard would be mostly padding, alive at the merging worker's memory peak.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from eigenflow.spectral.errors import InputDataError


class ShardAnswer(NamedTuple):
    """The ``k`` nearest rows of one shard for the searched rows of a query block (:func:`search_rows`).

    ``rows`` (r,) int64 ascending: positions of the searched rows in the block of ``n_rows`` rows (the others,
    ruled out by the partition's cuts, are not listed, so an answer is as small as the search it records);
    ``indices`` (r, k) int64 global row numbers and ``distances`` (r, k) float32, sorted by distance.
    """

    rows: np.ndarray
    indices: np.ndarray
    distances: np.ndarray
    n_rows: int


def merge_candidates(k: int, base: tuple[np.ndarray, np.ndarray] | None,
                     *answers: ShardAnswer) -> tuple[np.ndarray, np.ndarray]:
    """Multi-way merge of candidate lists: the ``k`` nearest of each row, sorted by (distance, index).

    Parameters
    ----------
    k : int
        Neighbours kept per row; the lists must hold at least ``k`` candidates per row together.
    base : (indices int64 (m, k_b), distances float32 (m, k_b)) or None
        A list for every row (a shard's own graph), sorted by distance; None: the answers cover every row.
    *answers : ShardAnswer
        Candidates of some of the same ``m`` rows from disjoint row sets (no index appears in two lists).

    Only the rows that an answer lists, or whose base list holds equal distances (ordered by index here), are
    merged (in the flat (row, distance, index) order of their candidates); the others keep their base list.

    Returns
    -------
    indices : ndarray of int64, shape (m, k)
    distances : ndarray of float32, shape (m, k)
    """
    m = int(base[0].shape[0]) if base is not None else (int(answers[0].n_rows) if answers else 0)
    if any(int(a.n_rows) != m for a in answers):
        raise InputDataError(f"the answers must be of the same {m} rows; got {[int(a.n_rows) for a in answers]}")
    k_base = 0 if base is None else int(base[0].shape[1])
    width = k_base + sum(int(a.indices.shape[1]) for a in answers)
    if width < k:
        raise InputDataError(f"the candidate lists hold {width} neighbours per row, fewer than k={k}")
    indices = np.full((m, k), -1, dtype=np.int64)
    distances = np.full((m, k), np.inf, dtype=np.float32)
    if base is not None:
        b_idx, b_dist = np.asarray(base[0], dtype=np.int64), np.asarray(base[1], dtype=np.float32)
        cols = min(k, k_base)
        indices[:, :cols], distances[:, :cols] = b_idx[:, :cols], b_dist[:, :cols]
        ties = np.flatnonzero(np.any(b_dist[:, 1:] == b_dist[:, :-1], axis=1)) if k_base > 1 else np.empty(0, int)
        short = np.arange(m) if k_base < k else np.empty(0, np.int64)
    else:
        ties = short = np.arange(m)
    merged = np.unique(np.concatenate([ties, short, *[np.asarray(a.rows, dtype=np.int64) for a in answers]]))
    if not merged.size:
        return indices, distances
    row_parts, idx_parts, dist_parts = [], [], []
    if base is not None:
        row_parts.append(np.repeat(np.arange(merged.size), k_base))
        idx_parts.append(b_idx[merged].ravel())
        dist_parts.append(b_dist[merged].ravel())
    for a in answers:
        a_idx = np.asarray(a.indices, dtype=np.int64)
        row_parts.append(np.repeat(np.searchsorted(merged, np.asarray(a.rows, dtype=np.int64)), a_idx.shape[1]))
        idx_parts.append(a_idx.ravel())
        dist_parts.append(np.asarray(a.distances, dtype=np.float32).ravel())
    row, idx, dist = (np.concatenate(parts) for parts in (row_parts, idx_parts, dist_parts))
    valid = idx >= 0
    row, idx, dist = row[valid], idx[valid], dist[valid]
    counts = np.bincount(row, minlength=merged.size)
    if np.any(counts < k):
        raise InputDataError(f"the candidate lists must hold at least k={k} neighbours (not padding) per row")
    order = np.lexsort((idx, dist, row))  # per row: distance first, then the smaller global index
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    take = order[(starts[:, None] + np.arange(k)).ravel()]
    indices[merged], distances[merged] = idx[take].reshape(-1, k), dist[take].reshape(-1, k)
    return indices, distances


def reverse_candidates(answer: ShardAnswer, rows_q: np.ndarray, rows_p: np.ndarray,
                       radius_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The answers of shard q's rows searched in shard p, turned round: candidates for shard p's rows.

    ``answer``: the searched rows of shard q (positions in ``rows_q`` (n_q,), its global rows) with their ``k``
    nearest global rows of shard p and distances (:class:`ShardAnswer`); a pair "row a of q found row b of p"
    makes ``a`` a candidate of ``b`` (same distance). Kept: the pairs within ``radius_p`` (n_p,) of ``b`` (its
    own-shard ``k``-th distance: only those can enter its list).
    Returns ``(positions in shard p (r,) int64, global rows of q (r,) int64, distances (r,) float32)``.

    Why: a row of p on the edge of shard p's point cloud is found by the search of a nearby row of q, but the
    NN-descent search of that row of p in shard q's index can fail altogether (it starts from shard q's
    search tree, which routes a query from outside the cloud to a far region, and greedy search is stuck
    there). A wider search does not recover such neighbours; the reverse pairs do.
    """
    idx = np.asarray(answer.indices, dtype=np.int64)
    dist = np.asarray(answer.distances, dtype=np.float32)
    found = idx >= 0
    a = np.broadcast_to(np.asarray(rows_q, dtype=np.int64)[answer.rows][:, None], idx.shape)[found]
    idx, dist = idx[found], dist[found]
    pos = np.searchsorted(rows_p, idx)  # every answer is a row of p
    keep = dist <= radius_p[pos]
    return pos[keep], a[keep], dist[keep]


def add_candidates(k: int, merged: tuple[np.ndarray, np.ndarray],
                   *extra: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of the merged lists ``merged`` (indices int64 (m, k), distances float32 (m, k)) and extra
    candidates ``(positions (r,), indices (r,), distances (r,))`` (:func:`reverse_candidates`), which may repeat
    a listed neighbour (a copy counts once); rows sorted by (distance, index) as :func:`merge_candidates`."""
    indices, distances = np.array(merged[0], dtype=np.int64), np.array(merged[1], dtype=np.float32)
    pos = np.concatenate([np.asarray(e[0], dtype=np.int64) for e in extra])
    if pos.size == 0:
        return indices, distances
    cand = np.concatenate([np.asarray(e[1], dtype=np.int64) for e in extra])
    cdist = np.concatenate([np.asarray(e[2], dtype=np.float32) for e in extra])
    order = np.lexsort((cand, pos))
    pos, cand, cdist = pos[order], cand[order], cdist[order]
    rows, first, counts = np.unique(pos, return_index=True, return_counts=True)
    col = np.arange(pos.size) - np.repeat(first, counts)  # rank of each candidate within its row
    pad_i = np.full((rows.size, int(counts.max())), -1, dtype=np.int64)
    pad_d = np.full(pad_i.shape, np.inf, dtype=np.float32)
    slot = np.repeat(np.arange(rows.size), counts)
    pad_i[slot, col], pad_d[slot, col] = cand, cdist
    idx = np.concatenate([indices[rows], pad_i], axis=1)
    dist = np.concatenate([distances[rows], pad_d], axis=1)
    by_index = np.argsort(idx, axis=1, kind="stable")  # copies of a neighbour side by side
    sorted_idx = np.take_along_axis(idx, by_index, axis=1)
    copy = np.zeros(idx.shape, dtype=bool)
    copy[:, 1:] = (sorted_idx[:, 1:] == sorted_idx[:, :-1]) | (sorted_idx[:, 1:] < 0)
    copy[:, 0] = sorted_idx[:, 0] < 0
    dist_masked = np.take_along_axis(dist, by_index, axis=1)
    dist_masked[copy] = np.inf  # a copy or a pad never wins: each row already has k distinct listed neighbours
    best = np.lexsort((sorted_idx, dist_masked), axis=1)[:, :k]
    indices[rows] = np.take_along_axis(sorted_idx, best, axis=1)
    distances[rows] = np.take_along_axis(dist_masked, best, axis=1)
    return indices, distances
