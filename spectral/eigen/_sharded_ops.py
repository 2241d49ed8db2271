"""The per-shard steps of the distributed eigensolve (:mod:`spectral.eigen.sharded`), and its row partitions.

Partitions (driver side, on a symmetric ``W`` or on point coordinates):

- ``"rcm"``: reverse Cuthill-McKee order of the graph (:mod:`._reorder`), cut into ``P`` contiguous runs
  of equal size. RCM numbers the nodes by breadth-first level sets, so a cut between two runs crosses
  one level front: on a kNN graph of a manifold most edges stay inside a run.
- ``"coordinates"``: recursive bisection of the points along the principal direction of their
  coordinates (the top ``log2 P`` levels of a PCA tree, i.e. a random-projection tree whose directions are
  the principal ones: Dasgupta & Freund 2008 use random directions, Verma, Kpotufe & Dasgupta 2009 show
  that the principal direction adapts at least as well); each part is then renumbered by RCM of its own
  subgraph (locality of the per-shard products). Coordinates are the data ``X`` or an initial embedding.
  The bisection is :func:`spectral.neighbours.partition.bisection_partition_array` (the one the sharded flow
  computes over row blocks on the workers, :func:`spectral.neighbours.partition.bisection_partition_blocks`).
- ``"none"``: the given order, cut into equal runs.

Worker side: the other functions run on the worker that holds a shard of the Laplacian (its
:class:`spectral.graph.sharded.Shard`) and receive / return only that shard's objects and (rows, b) or
(columns, b) blocks: products, the block V-cycle and the coarse basis of the two-level preconditioner, the local
steps of TSQR.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._sparse import row_of_entries
from eigenflow.spectral.eigen import _reorder
from eigenflow.spectral.graph.sharded import Shard
from eigenflow.spectral.neighbours.partition import bisection_partition_array
from eigenflow.spectral.graph.halo import split_by_owner


#: Bytes per float64 entry (the traffic counters of :mod:`.sharded`).
FLOAT_BYTES = 8


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


def shard_requests(shard: Shard, bounds: np.ndarray) -> list[np.ndarray]:
    """The shard's columns cut by owning shard, each run numbered inside its owner (``bounds`` (P + 1,)): the rows
    each shard must send it for a product (the halo, and its own rows)."""
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
    from eigenflow.spectral.eigen._block_amg import BlockVCycle
    from eigenflow.spectral.eigen.lobpcg import DEFAULT_AMG_OPTIONS, amg_hierarchy

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
