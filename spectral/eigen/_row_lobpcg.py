"""LOBPCG whose (n, b) blocks stay on the workers, as row parts of the shards (issue 16, item 2).

The same iteration as scipy's ``lobpcg`` (Knyazev 2001; the basis ``[X, W, P]`` of Hetmaniuk & Lehoucq 2006)
for the ``b`` smallest eigenpairs of a :class:`.distributed.DistributedLaplacian` ``L`` with a preconditioner
``M``, but every block ``X, AX, R, W, AW, P, AP`` is a list of futures, one ``(n_i, b)`` part per shard, on
the shard's worker. Per iteration:

1. ``R = AX - X diag(theta)`` and its column norms (``(b,)`` per shard to the driver); converged columns are
   locked (soft locking, as scipy);
2. ``W = M R_active`` (:meth:`~.distributed.DistributedLaplacian.precondition_parts`), projected off ``X``
   (``X^T W``: ``(b, b_a)`` per shard), orthonormalized by tall-skinny QR over the row parts
   (``dask.array.linalg.tsqr``, :func:`._two_level.orthonormal`; columns with ``|R_jj| <= 1e-12 max |R_jj|``
   are dropped) and ``AW = L W`` (:meth:`~.distributed.DistributedLaplacian.product_parts`, a halo
   exchange between workers);
3. ``P`` (the previous update direction) orthonormalized by tsqr as well, ``AP <- AP R^-1`` without a product;
4. Rayleigh-Ritz on ``S = [X, W, P]``: the Gram matrices ``S^T L S`` and ``S^T S`` are sums of per-shard
   ``(m, m)`` pieces (``m <= 3b``); the ``(m, m)`` pencil is solved in the driver (``scipy.linalg.eigh``); if
   ``S^T S`` is not positive definite, ``P`` is dropped and the step is repeated without it (scipy's restart);
5. ``X <- S C_X``, ``P <- [W, P] C_[W,P]`` (and ``AX``, ``AP``) on the workers.

So the driver holds only ``(m, m)`` matrices and ``(b,)`` norms: its memory does not grow with ``n``, and the
bytes that pass through it per iteration are ``O(P m^2)`` plus the two-level preconditioner's coarse block.
The halo rows of the products move between workers (``traffic["halo_bytes"]``).
Convergence: every residual norm ``||L x - theta x||`` of the ``k`` wanted pairs at most ``tol`` (absolute, as
scipy's ``lobpcg`` and the single-process solver), or ``max_iter`` Rayleigh-Ritz updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ..errors import ConvergenceError
from ._two_level import orthonormal

#: TSQR columns with ``|R_jj|`` at most this fraction of the largest are dropped (rank-deficient search block).
RANK_RTOL = 1e-12


@dataclass
class RowBlockPairs:
    """What :func:`row_block_lobpcg` returns: Ritz values ``(b,)`` ascending, the Ritz vectors as row parts
    (futures of (n_i, b)), the residual norms ``(b,)`` per iteration (first: of the start block) and counters."""

    values: np.ndarray
    parts: list
    residual_history: list
    n_iter: int
    restarts: int
    dropped_columns: int


def row_block_lobpcg(op, X_parts: list, b: int, *, tol: float, max_iter: int, k: int | None = None,
                     precondition: bool = True) -> RowBlockPairs:
    """The ``b`` smallest Ritz pairs of ``op`` from the start block ``X_parts`` (futures of (n_i, b), row parts
    in shard order, orthonormal or not); ``k <= b`` of them must converge (default all). ``precondition``:
    apply ``op.precondition_parts`` (the block preconditioner must be set up). See the module docstring."""
    k = b if k is None else k
    c, workers, rows = op.client, op.workers, np.diff(op.bounds)
    blocks = _Blocks(c, workers)
    X, _ = orthonormal(c, X_parts, rows, b)
    AX = op.product_parts(X, b)
    theta, C = sla.eigh(_symmetric(blocks.gram(X, AX)))
    X, AX = blocks.combine([X], C), blocks.combine([AX], C)
    P = AP = None
    active = np.ones(b, dtype=bool)
    history, restarts, dropped, n_iter = [], 0, 0, 0
    while True:
        R = blocks.map(_residual, X, AX, const=theta)
        norms = np.sqrt(blocks.sum(blocks.map(_column_squares, R)))
        history.append(norms)
        active &= norms > tol
        if not active[:k].any() or n_iter >= max_iter:
            break
        cols = np.flatnonzero(active)
        W = blocks.map(_columns, R, const=cols)
        if precondition:
            W = op.precondition_parts(W)
        W = blocks.map(_subtract, W, X, const=blocks.sum(blocks.map(_gram, X, W)))
        W, lost = _orthonormal_columns(blocks, W, rows, cols.size)
        dropped += lost
        AW = op.product_parts(W, cols.size - lost)
        Pa = APa = None
        if P is not None:
            Pa, R_p = orthonormal(c, blocks.map(_columns, P, const=cols), rows, cols.size)
            if _well_conditioned(R_p):
                APa = blocks.map(_right_solve, blocks.map(_columns, AP, const=cols), const=R_p)
            else:
                Pa = None
                restarts += 1
        theta, C, Pa, APa, restarted = _rayleigh_ritz(blocks, b, [X, W, Pa], [AX, AW, APa])
        restarts += restarted
        tail_left = [W] + ([Pa] if Pa is not None else [])
        tail_right = [AW] + ([APa] if APa is not None else [])
        P, AP = blocks.combine(tail_left, C[b:]), blocks.combine(tail_right, C[b:])
        X = blocks.map(_add, blocks.combine([X], C[:b]), P)
        AX = blocks.map(_add, blocks.combine([AX], C[:b]), AP)
        n_iter += 1
    return RowBlockPairs(theta, X, history, n_iter, restarts, dropped)


def _rayleigh_ritz(blocks, b: int, left: list, right: list):
    """``(theta (b,), C (m, b), P, AP, restarted)`` of the pencil ``(S^T L S, S^T S)`` for ``S = [X, W, P]``; if
    ``S^T S`` is not positive definite, ``P`` is dropped (``P = AP = None``, ``restarted = 1``) and the pencil
    of ``[X, W]`` is solved instead."""
    for attempt in (0, 1):
        S = [blk for blk in left if blk is not None]
        AS = [blk for blk in right if blk is not None]
        G = blocks.sum(blocks.map(_stacked_gram, *S, *AS))  # (m, 2m): [S^T S, S^T L S]
        m = G.shape[0]
        gram_B, gram_A = _symmetric(G[:, :m]), _symmetric(G[:, m:])
        try:
            theta, C = sla.eigh(gram_A, gram_B, subset_by_index=[0, b - 1])
            return theta, C, left[2], right[2], attempt
        except (np.linalg.LinAlgError, sla.LinAlgError, ValueError):
            if left[2] is None:
                raise ConvergenceError("LOBPCG on row blocks: the Gram matrix of [X, W] is not positive definite "
                                       "(the preconditioned residuals are linearly dependent on X)") from None
            left, right = [left[0], left[1], None], [right[0], right[1], None]
    raise AssertionError("unreachable")


def _orthonormal_columns(blocks, parts: list, rows, width: int) -> tuple[list, int]:
    """TSQR of ``parts`` with the columns of a (near) zero ``R_jj`` dropped: ``(Q parts, columns dropped)``."""
    Q, R = orthonormal(blocks.client, parts, rows, width)
    diag = np.abs(np.diag(R))
    keep = np.flatnonzero(diag > RANK_RTOL * max(diag.max(initial=0.0), 1e-300))
    if keep.size == 0:
        raise ConvergenceError("LOBPCG on row blocks: the preconditioned residual block is zero")
    if keep.size < width:
        Q = blocks.map(_columns, Q, const=keep)
    return Q, width - int(keep.size)


def _well_conditioned(R: np.ndarray) -> bool:
    diag = np.abs(np.diag(R))
    return bool(diag.size and diag.min() > RANK_RTOL * 1e4 * diag.max())


def _symmetric(G: np.ndarray) -> np.ndarray:
    return 0.5 * (G + G.T)


class _Blocks:
    """Per-shard tasks on row parts, each on its shard's worker, and sums of their small results."""

    def __init__(self, client, workers):
        self.client, self.workers = client, list(workers)

    def map(self, fn, *parts_lists, const=None) -> list:
        """``[fn(part_1i, part_2i, ..., const) for every shard i]`` as futures on the shards' workers."""
        extra = () if const is None else (const,)
        return [self.client.submit(fn, *items, *extra, workers=[w], pure=False)
                for w, *items in zip(self.workers, *parts_lists)]

    def sum(self, futures: list) -> np.ndarray:
        """Sum of small per-shard results, in the driver."""
        return np.sum(self.client.gather(futures), axis=0)

    def gram(self, A: list, B: list) -> np.ndarray:
        return self.sum(self.map(_gram, A, B))

    def combine(self, parts_lists: list, C: np.ndarray) -> list:
        """``[A_1 A_2 ...] @ C`` per shard (the blocks side by side, ``C`` (sum of widths, q))."""
        return [self.client.submit(_combine, list(items), C, workers=[w], pure=False)
                for w, *items in zip(self.workers, *parts_lists)]


# ------------------------------------------------------------------------------- worker side (per shard)

def _residual(X: np.ndarray, AX: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return AX - X * theta


def _column_squares(R: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->j", R, R)


def _columns(B: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(B[:, cols])


def _gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.T @ B


def _subtract(W: np.ndarray, X: np.ndarray, XtW: np.ndarray) -> np.ndarray:
    return W - X @ XtW


def _right_solve(B: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``B R^-1`` for an upper triangular ``R``."""
    return sla.solve_triangular(R, B.T, trans="T", lower=False).T


def _combine(blocks: list, C: np.ndarray) -> np.ndarray:
    return np.hstack(blocks) @ C if len(blocks) > 1 else blocks[0] @ C


def _stacked_gram(*blocks) -> np.ndarray:
    """``S^T [S, L S]`` (m, 2m) for the shard's parts of ``S`` (the first half of ``blocks``) and ``L S``."""
    half = len(blocks) // 2
    S = np.hstack(blocks[:half])
    return S.T @ np.hstack([S, *blocks[half:]])


def _add(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A + B
