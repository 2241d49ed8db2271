"""Row partitions of a graph and the per-shard (worker-side) pieces of :mod:`.distributed`.

Partitions (driver side, on a symmetric ``W`` or on point coordinates):

- ``"rcm"``: reverse Cuthill-McKee order of the graph (:mod:`._reorder`), cut into ``P`` contiguous runs
  of equal size. RCM numbers the nodes by breadth-first level sets, so a cut between two runs crosses
  one level front: on a kNN graph of a manifold most edges stay inside a run.
- ``"coordinates"``: recursive bisection of the points along the principal direction of their
  coordinates (the top ``log2 P`` levels of a PCA tree, i.e. a random-projection tree whose directions are
  the principal ones: Dasgupta & Freund 2008 use random directions, Verma, Kpotufe & Dasgupta 2009 show
  that the principal direction adapts at least as well); each part is then renumbered by RCM of its own
  subgraph (locality of the per-shard products). Coordinates are the data ``X`` or an initial embedding.
  The bisection is :func:`spectral.partition.bisection_partition_array` (the one the sharded flow computes
  over row blocks on the workers, :func:`spectral.partition.bisection_partition_blocks`).
- ``"none"``: the given order, cut into equal runs.

Worker side: the other functions run on the worker that holds a shard (its rows of W or kNN lists, then its
:class:`Shard`) and receive / return only that shard's objects, its columns' degrees or scales, and
(rows, b) or (columns, b) blocks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._sparse import row_of_entries
from ..graph_laplacian import laplacian_rows
from ..partition import bisection_partition_array
from . import _reorder

PARTITIONS = ("rcm", "coordinates", "none")


def equal_bounds(n: int, n_blocks: int) -> np.ndarray:
    """Block boundaries ``(P + 1,)`` of ``n`` rows cut into ``P`` runs whose sizes differ by at most one."""
    return np.array([(i * n) // n_blocks for i in range(n_blocks + 1)], dtype=np.int64)


def row_partition(W: sp.csr_matrix, n_blocks: int, method: str, coordinates=None) -> tuple[np.ndarray, np.ndarray]:
    """``(perm (n,), bounds (P + 1,))``: shard ``i`` holds the nodes ``perm[bounds[i]:bounds[i + 1]]``."""
    n = W.shape[0]
    if method == "none":
        return np.arange(n, dtype=np.int64), equal_bounds(n, n_blocks)
    if method == "rcm":
        return _reorder.rcm_permutation(W), equal_bounds(n, n_blocks)
    parts = bisection_partition_array(coordinates, n_blocks)
    perm, bounds = parts.perm, parts.bounds
    ordered = []
    for nodes in (perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])):  # RCM inside each part: neighbouring
        # rows next to each other in the shard
        local = _reorder.rcm_permutation(W[nodes][:, nodes]) if nodes.size > 1 else np.zeros(1, dtype=np.int64)
        ordered.append(nodes[local])
    return np.concatenate(ordered), bounds


def inside_fraction(W: sp.csr_matrix, perm: np.ndarray, bounds: np.ndarray) -> float:
    """Fraction of the stored off-diagonal entries of ``W`` whose two ends lie in the same shard."""
    label = np.empty(W.shape[0], dtype=np.int64)
    label[perm] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    rows = row_of_entries(W)
    off = rows != W.indices
    total = int(off.sum())
    return float(np.sum(label[rows[off]] == label[W.indices[off]]) / total) if total else 1.0


# ---------------------------------------------------------------------------------------------- worker side

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
    :func:`spectral.graph_laplacian.laplacian_rows` runs on that (m, c) block with row offset ``lo``."""
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


def shard_requests(shard: Shard, bounds: np.ndarray) -> list[np.ndarray]:
    """The shard's columns cut by owning shard, each run numbered inside its owner (``bounds`` (P + 1,)): the rows
    each shard must send it for a product (the halo, and its own rows)."""
    from ._exchange import split_by_owner

    return [run - bounds[q] for q, run in enumerate(split_by_owner(shard.cols, bounds))]


def shard_product(shard: Shard, V_cols: np.ndarray) -> np.ndarray:
    """``L[start:stop] @ V`` from ``V[cols]`` (c, b): ``(m, b)``."""
    return np.asarray(shard.L @ V_cols)


def shard_product_pieces(shard: Shard, pieces: list) -> np.ndarray:
    """``L[start:stop] @ V`` from the rows of ``V`` at the shard's columns, given per source shard in shard
    order (the halo pieces of the other shards and the shard's own rows): ``(m, b)``."""
    return np.asarray(shard.L @ np.vstack(pieces))


def take_rows(block: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``block[rows]``: the rows of a shard's block that another shard's columns touch."""
    return block[rows]


def shard_with_preconditioner(shard: Shard, shift: float, amg_options) -> Shard:
    """The shard plus the block V-cycle of pyamg's hierarchy of its diagonal block ``L_ii + shift I`` (and the
    hierarchy's aggregation operators, for :func:`shard_coarse_basis`)."""
    from ._block_amg import BlockVCycle
    from .lobpcg import DEFAULT_AMG_OPTIONS, amg_hierarchy

    lo, hi = shard.own
    diag_block = sp.csr_matrix(shard.L[:, lo:hi])
    options = dict(DEFAULT_AMG_OPTIONS if amg_options is None else amg_options, keep=True)
    ml = amg_hierarchy(diag_block, shift, options)
    aggregates = [sp.csr_matrix(lvl.AggOp, dtype=np.float64) for lvl in ml.levels[:-1]]
    return dataclasses.replace(shard, M=BlockVCycle(ml), aggregates=aggregates)


def shard_coarse_basis(shard: Shard, min_rows: int) -> Shard:
    """The shard plus its coarse basis ``T_i = D_i^1/2 Agg_0 Agg_1 ... Agg_{l-1}`` (m, c_i): the aggregates of
    level ``l`` of its AMG hierarchy, each column ``D^1/2 1`` on one aggregate (so ``T = blockdiag(T_i)``
    holds the null vector ``D^1/2 1`` of ``L_sym``). ``l`` is the deepest level with at least ``min_rows``
    nodes (level 1 if none has; ``T_i = D_i^1/2`` when the hierarchy has a single level). Unsmoothed
    aggregates: the smoothed prolongators of a diagonal block decay towards the cut edges (its Jacobi
    smoother sees them as a Dirichlet boundary) and spanned a start 60 degrees off on the 1e5-node Swiss
    roll, these 6 degrees (the global smoothed hierarchy: 3)."""
    sizes = [shard.L.shape[0]] + [agg.shape[1] for agg in shard.aggregates]
    deep = [lv for lv in range(1, len(sizes)) if sizes[lv] >= min_rows]
    depth = max(deep) if deep else min(1, len(sizes) - 1)
    T = sp.diags(np.sqrt(shard.degrees), format="csr")
    for lv in range(depth):
        T = sp.csr_matrix(T @ shard.aggregates[lv])
    return dataclasses.replace(shard, T=T)


def shard_basis(shard: Shard) -> sp.csr_matrix:
    """The shard's coarse basis ``T_i`` (m, c_i)."""
    return shard.T


def shard_galerkin_rows(shard: Shard, bases: list, bounds: np.ndarray, offsets: np.ndarray):
    """``(T_i^T L_i T (c_i, N_c), T_i^T T_i (c_i, c_i))`` for the global block-diagonal basis
    ``T = blockdiag(T_j)`` given as every shard's ``T_j`` (only their rows at the shard's columns are used)."""
    n_coarse = int(offsets[-1])
    rows, cols, vals = [], [], []
    for j, Tj in enumerate(bases):
        mask = (shard.cols >= bounds[j]) & (shard.cols < bounds[j + 1])
        if not mask.any():
            continue
        piece = sp.coo_matrix(sp.csr_matrix(Tj)[shard.cols[mask] - bounds[j]])
        rows.append(np.flatnonzero(mask)[piece.row])
        cols.append(piece.col + offsets[j])
        vals.append(piece.data)
    Tc = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(shard.cols.size, n_coarse))
    Ti = sp.csr_matrix(shard.T)
    return sp.csr_matrix(Ti.T @ (shard.L @ Tc)), sp.csr_matrix(Ti.T @ Ti)


def shard_prolongate(shard: Shard, X_coarse: np.ndarray) -> np.ndarray:
    """``T_i X_c[i]``: the shard's rows ``(m, b)`` of the prolongated coarse eigenvectors."""
    return np.asarray(shard.T @ X_coarse)


def shard_precondition(shard: Shard, R_rows: np.ndarray) -> np.ndarray:
    """``M_ii R_i``: the shard's V-cycle on its own rows of a block ``(m, b)``."""
    return np.asarray(shard.M @ np.asarray(R_rows, dtype=np.float64))


def shard_precondition_two_level(shard: Shard, R_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(M_ii R_i (m, b), T_i^T R_i (c_i, b))``: the local V-cycle and the shard's restriction to the coarse space."""
    R = np.asarray(R_rows, dtype=np.float64)
    return np.asarray(shard.M @ R), np.asarray(shard.T.T @ R)


def shard_add_coarse(pair, shard: Shard, Z_coarse: np.ndarray) -> np.ndarray:
    """``M_ii R_i + T_i Z_i``: the two-level additive Schwarz preconditioner on the shard's rows."""
    return pair[0] + np.asarray(shard.T @ Z_coarse)


def shard_random_block(m: int, b: int, seed: np.random.SeedSequence) -> np.ndarray:
    """A standard normal ``(m, b)`` block drawn from the shard's own seed."""
    return np.random.default_rng(seed).standard_normal((m, b))


def local_qr(blocks: list, columns=None) -> tuple[np.ndarray, np.ndarray]:
    """``(Q_i, R_i)``: the reduced QR of a shard's row blocks side by side (the local step of TSQR), of their
    ``columns`` only if given."""
    A = np.hstack(blocks) if len(blocks) > 1 else np.asarray(blocks[0])
    if columns is not None:
        A = A[:, columns]
    return np.linalg.qr(np.asarray(A, dtype=np.float64))


def combine_qr(pair, Q2_piece: np.ndarray) -> np.ndarray:
    """``Q_i Q'_i``: the shard's rows of TSQR's ``Q`` from its local ``Q_i`` and its piece of the reduction's ``Q'``."""
    return pair[0] @ Q2_piece


def knn_summary(idx: np.ndarray, dist: np.ndarray, start: int, n: int) -> dict:
    """Checks of a block of kNN lists (rows ``start..``, global indices in [0, n)) and the summaries the weight
    parameters need (:func:`spectral.weights.resolve_weight_params`)."""
    from ..errors import InputDataError

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
    """Per-point scales ``(m,)`` of a block of kNN distances (:func:`spectral.weights.scales_of`)."""
    from ..weights import scales_of

    return scales_of(dist, params)


def knn_columns(idx: np.ndarray, start: int) -> np.ndarray:
    """Sorted global columns ``(c,)`` a block of kNN lists touches (its neighbours and its own rows)."""
    idx = np.asarray(idx, dtype=np.int64)
    return np.union1d(idx.ravel(), np.arange(start, start + idx.shape[0]))


def knn_directed_rows(idx: np.ndarray, dist: np.ndarray, start: int, params, cols: np.ndarray,
                      col_scales: np.ndarray, n: int) -> sp.csr_matrix:
    """Rows ``(m, n)`` of the directed kNN weights (:func:`spectral.weights.directed_weight_rows`), from the
    scales ``col_scales`` (c,) of the columns ``cols`` (:func:`knn_columns`) only."""
    from ..weights import directed_weight_rows

    idx = np.asarray(idx, dtype=np.int64)
    m = idx.shape[0]
    lo = int(np.searchsorted(cols, start))
    A = directed_weight_rows(np.searchsorted(cols, idx), np.asarray(dist, dtype=np.float64), params,
                             col_scales[lo:lo + m], col_scales, cols.size)
    return sp.csr_matrix((A.data, cols[A.indices], A.indptr), shape=(m, n))


def column_piece(W_rows: sp.csr_matrix, lo: int, hi: int) -> sp.csr_matrix:
    """Columns ``[lo, hi)`` of a row block: what shard ``i`` sends shard ``j`` for the transpose exchange."""
    return sp.csr_matrix(sp.csr_matrix(W_rows)[:, lo:hi])


def shard_symmetrize(W_rows: sp.csr_matrix, pieces: list, how: str) -> sp.csr_matrix:
    """Rows of the symmetrized ``W`` from the directed rows and the pieces ``A_j[:, own]`` of every shard
    ``j`` (``(m_j, m)`` each, in shard order): ``(A^T)_own = hstack_j(piece_j^T)``; "or" = max, "and" =
    min, "mean" = average, as :func:`spectral.weights.weights_from_params`."""
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
