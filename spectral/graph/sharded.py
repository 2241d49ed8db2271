"""The graph's rows on the Dask workers: the sharded variant of :mod:`spectral.graph.weights` and
:mod:`spectral.graph.laplacian`, for the distributed eigensolver (:mod:`spectral.eigen.sharded`).

Each function of the worker side runs on the worker that holds a shard (its rows of W or kNN lists, then its
:class:`Shard`) and receives / returns only that shard's objects, its columns' degrees or scales. From the kNN
lists: their checks and summaries (:func:`knn_summary`), per-point scales and the directed weight rows
(:func:`knn_directed_rows`); the transpose exchange that symmetrizes (or checks) the row blocks of W between the
shards (:func:`transpose_exchange`); the renumbering of neighbour lists into the operator's order, between the
shards (:func:`renumber_by_parts`: shard ``i`` asks the other shards only for its foreign neighbours, its halo);
and the Laplacian's rows with compressed columns (:class:`Shard`, :func:`shard_build`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._sparse import row_of_entries
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.graph.laplacian import laplacian_rows
from eigenflow.spectral.graph.weights import directed_weight_rows, scales_of
from eigenflow.spectral.placement import worker_of


#: Relative asymmetry max|W - W^T| / max|W| tolerated by ``check_symmetric`` (as graph.laplacian's check).
SYMMETRY_RTOL = 1e-10


@dataclass
class Shard:
    """Rows ``[start, stop)`` of the operator with compressed columns, living on one worker.

    ``L`` (m, c) holds the rows with their columns renumbered into ``cols`` (c,), the sorted global columns
    the rows touch (own rows included): a product needs ``V[cols]`` only. ``own`` (lo, hi) locates the own
    rows inside ``cols`` (the diagonal block is ``L[:, lo:hi]``); ``M`` is the block preconditioner of the
    diagonal block (or None).
    """

    start: int
    stop: int
    L: sp.csr_matrix
    cols: np.ndarray
    own: tuple[int, int]
    degrees: np.ndarray
    M: object = None
    aggregates: list | None = None
    T: object = None


def shard_degrees(W_rows: sp.csr_matrix, start: int) -> np.ndarray:
    """Row sums of a row block of ``W`` without self-loops, ``(m,)``."""
    W = sp.csr_matrix(W_rows, dtype=np.float64)
    keep = (row_of_entries(W) + start) != W.indices
    return np.bincount(row_of_entries(W)[keep], weights=W.data[keep], minlength=W.shape[0])


def block_columns(W_rows: sp.csr_matrix, start: int) -> np.ndarray:
    """Sorted global columns ``(c,)`` a row block of ``W`` touches, its own rows included."""
    W = sp.csr_matrix(W_rows)
    return np.union1d(W.indices, np.arange(start, start + W.shape[0])).astype(np.int64)


def shard_build(W_rows: sp.csr_matrix, start: int, cols: np.ndarray, col_degrees: np.ndarray,
                normalization: str) -> Shard:
    """The shard of the normalized Laplacian for a row block of ``W`` (see :class:`Shard`), from the degrees
    ``col_degrees`` (c,) of its columns ``cols`` only (:func:`block_columns`): the block is renumbered into
    ``cols`` first, where its own rows are the contiguous run starting at ``lo``, and
    :func:`spectral.graph.laplacian.laplacian_rows` runs on that (m, c) block with row offset ``lo``."""
    W = sp.csr_matrix(W_rows, dtype=np.float64)
    m = W.shape[0]
    lo = int(np.searchsorted(cols, start))
    local = sp.csr_matrix((W.data, np.searchsorted(cols, W.indices), W.indptr), shape=(m, cols.size))
    L = laplacian_rows(local, col_degrees, lo, normalization)
    own_degrees = np.asarray(col_degrees[lo:lo + m], dtype=np.float64).copy()
    return Shard(int(start), int(start + m), L, np.asarray(cols, dtype=np.int64), (lo, lo + m), own_degrees)


def shard_stats(shard: Shard) -> dict:
    """Sizes of a shard and its infinity-norm contribution (for :meth:`DistributedLaplacian.norm_bound`)."""
    L = shard.L
    lo, hi = shard.own
    rows = row_of_entries(L)
    off = rows + lo != L.indices
    inside = off & (L.indices >= lo) & (L.indices < hi)
    row_abs = np.asarray(abs(L).sum(axis=1)).ravel()
    return {"rows": L.shape[0], "columns": int(shard.cols.size), "nnz": int(L.nnz),
            "offdiag": int(off.sum()), "inside": int(inside.sum()),
            "norm_inf": float(row_abs.max()) if row_abs.size else 0.0, "isolated": int(np.sum(shard.degrees == 0))}


def shard_columns(shard: Shard) -> np.ndarray:
    """The global columns ``(c,)`` the shard's rows touch (what a product must send it)."""
    return shard.cols


def shard_degrees_of(shard: Shard) -> np.ndarray:
    """The degrees ``(m,)`` of the shard's own rows."""
    return shard.degrees


def knn_summary(idx: np.ndarray, dist: np.ndarray, start: int, n: int) -> dict:
    """Checks of a block of kNN lists (rows ``start..``, global indices in [0, n)) and the summaries the weight
    parameters need (:func:`spectral.graph.weights.resolve_weight_params`)."""
    idx, dist = np.asarray(idx), np.asarray(dist, dtype=np.float64)
    if idx.ndim != 2 or idx.shape != dist.shape or not np.issubdtype(idx.dtype, np.integer):
        raise InputDataError(f"a kNN block must be integer indices and distances of one shape (m, k); got "
                             f"{idx.dtype} {idx.shape} and {dist.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InputDataError(f"kNN indices must lie in [0, {n - 1}]; got a block with range [{idx.min()}, {idx.max()}]")
    if np.any(idx == np.arange(start, start + idx.shape[0])[:, None]):
        raise InputDataError("indices must not contain self-neighbours (row i listing i)")
    if not np.all(np.isfinite(dist)) or (dist.size and dist.min() < 0):
        raise InputDataError("kNN distances must be finite and non-negative")
    positive = dist[dist > 0]
    return {"rows": idx.shape[0], "k": idx.shape[1], "min_positive": float(positive.min()) if positive.size else None,
            "sum": float(dist.sum()), "count": int(dist.size)}


def knn_scales(dist: np.ndarray, params) -> np.ndarray:
    """Per-point scales ``(m,)`` of a block of kNN distances (:func:`spectral.graph.weights.scales_of`)."""
    return scales_of(dist, params)


def knn_columns(idx: np.ndarray, start: int) -> np.ndarray:
    """Sorted global columns ``(c,)`` a block of kNN lists touches (its neighbours and its own rows)."""
    idx = np.asarray(idx, dtype=np.int64)
    return np.union1d(idx.ravel(), np.arange(start, start + idx.shape[0]))


def knn_directed_rows(idx: np.ndarray, dist: np.ndarray, start: int, params, cols: np.ndarray,
                      col_scales: np.ndarray, n: int) -> sp.csr_matrix:
    """Rows ``(m, n)`` of the directed kNN weights (:func:`spectral.graph.weights.directed_weight_rows`), from the
    scales ``col_scales`` (c,) of the columns ``cols`` (:func:`knn_columns`) only."""
    idx = np.asarray(idx, dtype=np.int64)
    m = idx.shape[0]
    lo = int(np.searchsorted(cols, start))
    A = directed_weight_rows(np.searchsorted(cols, idx), np.asarray(dist), params,
                             col_scales[lo:lo + m], col_scales, cols.size)
    return sp.csr_matrix((A.data, cols[A.indices], A.indptr), shape=(m, n))


def column_piece(W_rows: sp.csr_matrix, lo: int, hi: int) -> sp.csr_matrix:
    """Columns ``[lo, hi)`` of a row block: what shard ``i`` sends shard ``j`` for the transpose exchange."""
    return sp.csr_matrix(sp.csr_matrix(W_rows)[:, lo:hi])


def shard_symmetrize(W_rows: sp.csr_matrix, pieces: list, how: str) -> sp.csr_matrix:
    """Rows of the symmetrized ``W`` from the directed rows and the pieces ``A_j[:, own]`` of every shard
    ``j`` (``(m_j, m)`` each, in shard order): ``(A^T)_own = hstack_j(piece_j^T)``; "or" = max, "and" =
    min, "mean" = average, as :func:`spectral.graph.weights.weights_from_params`."""
    A = sp.csr_matrix(W_rows, dtype=np.float64)
    AT = sp.csr_matrix(sp.hstack([sp.csr_matrix(p).T for p in pieces], format="csr"), dtype=np.float64)
    if how == "or":
        out = A.maximum(AT)
    elif how == "and":
        out = A.minimum(AT)
    else:
        out = (A + AT) * 0.5
    out = sp.csr_matrix(out)
    out.eliminate_zeros()
    out.sort_indices()
    return out


def shard_asymmetry(W_rows: sp.csr_matrix, pieces: list) -> float:
    """``max |W_own - (W^T)_own|`` of a row block, from the transpose pieces as in :func:`shard_symmetrize`."""
    AT = sp.csr_matrix(sp.hstack([sp.csr_matrix(p).T for p in pieces], format="csr"), dtype=np.float64)
    diff = abs(sp.csr_matrix(W_rows, dtype=np.float64) - AT)
    return float(diff.max()) if diff.nnz else 0.0


def transpose_exchange(client, futures, bounds, how):
    """Shard-pair exchange of transposed entries: symmetrize (``how``) or check symmetry (``how=None``)."""
    P = len(futures)
    workers = [worker_of(client, f) for f in futures]
    pieces = [[client.submit(column_piece, futures[j], int(bounds[i]), int(bounds[i + 1]),
                             workers=[workers[j]], pure=False) for j in range(P)] for i in range(P)]
    if how is not None:
        return [client.submit(shard_symmetrize, futures[i], pieces[i], how, workers=[workers[i]], pure=False)
                for i in range(P)]
    worst = max(client.gather([client.submit(shard_asymmetry, futures[i], pieces[i], workers=[workers[i]],
                                             pure=False) for i in range(P)]))
    scale = max(client.gather([client.submit(max_abs, f, pure=False) for f in futures]))
    if worst > SYMMETRY_RTOL * max(scale, 1e-300):
        raise InputDataError(f"W must be symmetric; max |W - W^T| = {worst:.3g} over the row blocks "
                             "(pass symmetrize='or', 'and' or 'mean' for directed kNN weights)")
    return futures


def max_abs(block) -> float:
    block = sp.csr_matrix(block)
    return float(abs(block).max()) if block.nnz else 0.0


def foreign_ids(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Task: the sorted distinct entries of ``idx`` (original row numbers) that are not rows of this shard
    (``rows`` ascending): the ones to look up in the other shards."""
    ids = np.unique(np.asarray(idx, dtype=np.int64))
    return ids[~np.isin(ids, rows, assume_unique=True)]


def lookup_ids(rows: np.ndarray, ids: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Task on shard ``q``: ``(which, numbers)``: the positions in ``ids`` of the ids that are rows of this
    shard (``rows`` ascending, operator rows ``start..``), and their operator numbers."""
    pos = np.minimum(np.searchsorted(rows, ids), max(rows.size - 1, 0))
    hit = rows[pos] == ids if rows.size else np.zeros(ids.size, dtype=bool)
    return np.flatnonzero(hit), start + pos[hit]


def renumbered(idx: np.ndarray, rows: np.ndarray, start: int, ids: np.ndarray, *found) -> np.ndarray:
    """Task on shard ``i``: its neighbour lists ``idx`` (m, k) in operator numbers, from its own rows (``rows``
    ascending, operator rows ``start..``) and the other shards' answers ``found`` for its foreign ``ids``."""
    idx = np.asarray(idx, dtype=np.int64)
    numbers = np.full(ids.size, -1, dtype=np.int64)
    for which, nums in found:
        numbers[which] = nums
    if np.any(numbers < 0):
        raise InputDataError(f"kNN indices must be rows of the shards; {int(np.sum(numbers < 0))} are not, e.g. "
                             f"{int(ids[np.flatnonzero(numbers < 0)[0]])}")
    flat = idx.ravel()
    pos = np.minimum(np.searchsorted(rows, flat), rows.size - 1)
    own = rows[pos] == flat
    out = np.where(own, start + pos, -1)
    out[~own] = numbers[np.searchsorted(ids, flat[~own])]
    return out.reshape(idx.shape)


def renumber_by_parts(client, idx: list, rows: list, bounds: np.ndarray, workers: list) -> list:
    """Per shard a future of its neighbour lists ``idx[i]`` (original row numbers) renumbered into the operator's
    order, where shard ``q`` holds the original rows ``rows[q]`` (futures, ascending) as operator rows
    ``bounds[q]..``. Only each shard's foreign ids (its halo) are sent to the other shards."""
    P = len(idx)
    ids = [client.submit(foreign_ids, a, r, workers=[w], pure=False) for a, r, w in zip(idx, rows, workers)]
    out = []
    for i in range(P):
        found = [client.submit(lookup_ids, rows[q], ids[i], int(bounds[q]), workers=[workers[q]], pure=False)
                 for q in range(P) if q != i]
        out.append(client.submit(renumbered, idx[i], rows[i], int(bounds[i]), ids[i], *found, workers=[workers[i]],
                                 pure=False))
    return out
