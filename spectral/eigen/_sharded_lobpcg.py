"""LOBPCG whose (n, b) blocks stay on the workers, as row parts of the shards.

The same iteration as scipy's ``lobpcg`` (Knyazev 2001; the basis ``[X, W, P]`` of Hetmaniuk & Lehoucq 2006)
for the ``b`` smallest eigenpairs of a :class:`.sharded.DistributedLaplacian` ``L`` with a preconditioner
``M``, but every block ``X, AX, R, W, AW, P, AP`` is a list of futures, one ``(n_i, b)`` part per shard, on
the shard's worker. Per iteration:

1. ``R = AX - X diag(theta)`` and its column norms (``(b,)`` per shard to the driver); converged columns are
   locked (soft locking, as scipy);
2. ``W = M R_active`` (:meth:`~.sharded.DistributedLaplacian.precondition_parts`), projected off ``X``
   and orthonormalized together as the QR of ``[X, W]`` (``W <- Q[:, b:]``): CholeskyQR2 from the Gram pieces
   of the row parts, Householder TSQR (:func:`._tsqr.orthonormal`) with rank-deficient columns dropped when
   Cholesky is not accurate (:func:`_orthonormal_complement`); then ``AW = L W``
   (:meth:`~.sharded.DistributedLaplacian.product_parts`, a halo exchange between workers);
3. ``P`` (the previous update direction) orthonormalized by Cholesky-QR from the same reduction (as scipy),
   ``AP <- AP R^-1`` without a product; ``P`` is dropped when its Gram matrix is not accurately factorable;
4. Rayleigh-Ritz on ``S = [X, W, P]``: the Gram matrices ``S^T L S`` and ``S^T S`` are sums of per-shard
   ``(m, m)`` pieces (``m <= 3b``); the ``(m, m)`` pencil is solved in the driver (``scipy.linalg.eigh``); if
   ``S^T S`` is not positive definite, ``P`` is dropped and the step is repeated without it (scipy's restart);
5. ``X <- S C_X``, ``P <- [W, P] C_[W,P]`` (and ``AX``, ``AP``) on the workers.

So the driver holds only ``(m, m)`` matrices and ``(b,)`` norms: its memory does not grow with ``n``, and the
bytes that pass through it per iteration are ``O(P m^2)``. The halo rows of the products move between workers
(``traffic["halo_bytes"]``), and so do the two-level preconditioner's coarse blocks (shards to the coarse worker
and back, ``traffic["coarse_bytes"]``).
Convergence: every residual norm ``||L x - theta x||`` of the ``k`` wanted pairs at most ``tol`` (absolute, as
scipy's ``lobpcg`` and the single-process solver), or ``max_iter`` Rayleigh-Ritz updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from eigenflow.spectral.eigen._tsqr import orthonormal
from eigenflow.spectral.errors import ConvergenceError

#: TSQR columns of the search block with ``|R_jj|`` at most this fraction of its largest are dropped
#: (a rank-deficient block) ...
RANK_RTOL = 1e-12
#: ... and so are those at most this fraction of ``X``'s scale (a direction inside ``span(X)`` up to round-off).
SPAN_ATOL = 1e-14
#: Cholesky QR is used while every column's part independent of the columns before it is above this fraction of
#: its norm (a block condition number below ~1e7: CholeskyQR2's accuracy range); else Householder TSQR.
CHOLESKY_QR_RTOL = 1e-7


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
    householder_fallbacks: int


def row_block_lobpcg(op, X_parts: list, b: int, *, tol: float, max_iter: int, k: int | None = None,
                     precondition: bool = True) -> RowBlockPairs:
    """The ``b`` smallest Ritz pairs of ``op`` from the start block ``X_parts`` (futures of (n_i, b), row parts
    in shard order, orthonormal or not); ``k <= b`` of them must converge (default all). ``precondition``:
    apply ``op.precondition_parts`` (the block preconditioner must be set up). See the module docstring."""
    k = b if k is None else k
    c, workers = op.client, op.workers
    blocks = _Blocks(c, workers)
    X, _ = orthonormal(c, X_parts, workers)
    AX = op.product_parts(X, b)
    theta, C = sla.eigh(_symmetric(blocks.gram(X, AX)))
    X, AX = blocks.combine([X], C), blocks.combine([AX], C)
    P = AP = None
    active = np.ones(b, dtype=bool)
    history, restarts, dropped, householder, n_iter = [], 0, 0, 0, 0
    while True:
        norms = np.sqrt(blocks.sum(blocks.map(_residual_squares, X, AX, const=theta)))
        history.append(norms)
        active &= norms > tol
        if not active[:k].any() or n_iter >= max_iter:
            break
        cols = np.flatnonzero(active)
        W = blocks.map(_residual_columns, X, AX, const=(theta, cols))
        if precondition:
            W = op.precondition_parts(W, cols.size)
        # pass 1 of the [X, W] orthonormalization and the Gram matrix of P's active columns: one reduction
        grams = blocks.sums([blocks.map(_gram_of, X, W), *([blocks.map(_gram_of_columns, P, const=cols)]
                                                           if P is not None else [])])
        W, lost, fell_back = _orthonormal_complement(blocks, X, W, b, grams[0])
        dropped, householder = dropped + lost, householder + fell_back
        AW = op.product_parts(W, cols.size - lost)
        Pa = APa = None
        if P is not None:
            R_p = _cholesky_factor(grams[1])
            if R_p is not None:
                Pa = blocks.map(_right_solve, P, const=(cols, R_p))
                APa = blocks.map(_right_solve, AP, const=(cols, R_p))
            else:
                restarts += 1
        theta, C, Pa, APa, restarted = _rayleigh_ritz(blocks, b, [X, W, Pa], [AX, AW, APa])
        restarts += restarted
        search = [W] + ([Pa] if Pa is not None else [])
        search_A = [AW] + ([APa] if APa is not None else [])
        # X <- [X, W, P] C and P <- [W, P] C[b:] (so X = X C[:b] + P), each one task per shard
        X, AX = blocks.combine([X, *search], C), blocks.combine([AX, *search_A], C)
        P, AP = blocks.combine(search, C[b:]), blocks.combine(search_A, C[b:])
        n_iter += 1
    return RowBlockPairs(theta, X, history, n_iter, restarts, dropped, householder)


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


def _orthonormal_complement(blocks, X: list, W: list, b: int, gram: np.ndarray) -> tuple[list, int, int]:
    """An orthonormal basis of ``W``'s part orthogonal to the orthonormal ``X`` (b columns), from the Gram matrix
    ``gram = [X, W]^T [X, W]`` (one reduction, already done). Returns ``(W parts, columns dropped, 1 if the
    Householder fallback ran else 0)``.

    CholeskyQR2 (Fukaya, Nakatsukasa, Yanagisawa & Yamamoto 2014): ``[X, W] = Q R`` by the Cholesky factor of
    the Gram matrix, twice; ``Q[:, b:]`` is orthonormal and orthogonal to ``X`` to round-off while
    ``cond([X, W]) < ~1e8``. scipy's ``lobpcg`` orthonormalizes by Cholesky too. A Cholesky factorization of
    pass 1 or 2 that fails, or a column whose part independent of the columns before it is at most
    ``CHOLESKY_QR_RTOL`` of its norm (:func:`_cholesky_factor`), falls back to Householder TSQR
    (:func:`._tsqr.orthonormal`), which drops columns with ``|R_jj|`` at most ``RANK_RTOL`` times the
    largest of ``W``'s, or ``SPAN_ATOL`` times ``X``'s (``W`` dependent on itself or inside ``span(X)``), and is
    repeated without them (so the basis spans exactly the kept columns' part orthogonal to ``X``).
    Cost per shard: two ``(n_i, b + a)`` Gram products, BLAS-3 work that is much cheaper than the Householder
    QR of the same block, which is why Cholesky QR is tried first.
    """
    R1 = _cholesky_factor(gram)
    if R1 is not None:
        W1 = blocks.combine([X, W], _inverse_columns(R1, b))
        R2 = _cholesky_factor(blocks.sum(blocks.map(_gram_of, X, W1)))
        if R2 is not None:
            return blocks.combine([X, W1], _inverse_columns(R2, b)), 0, 0
    dropped = []

    def independent(R: np.ndarray) -> np.ndarray:
        diag = np.abs(np.diag(R))
        floor = max(RANK_RTOL * diag[b:].max(initial=0.0), SPAN_ATOL * diag[:b].max(initial=1.0))
        keep = b + np.flatnonzero(diag[b:] > floor)
        if keep.size == 0:
            raise ConvergenceError("LOBPCG on row blocks: the preconditioned residual block lies in span(X)")
        dropped.append(diag.size - b - keep.size)
        return keep

    kept = []

    def independent_then_kept(R: np.ndarray) -> np.ndarray:
        kept.append(independent(R))
        return kept[0]

    Q, _ = orthonormal(blocks.client, [X, W], blocks.workers, select=independent_then_kept)
    if dropped[0]:  # again without the dropped columns: a dependent column's Q direction is arbitrary and the
        # columns after it were orthogonalized against it, so the first basis misses part of W's independent span
        columns = np.concatenate([np.arange(b), kept[0]])
        Q, _ = orthonormal(blocks.client, [X, W], blocks.workers, columns=columns,
                           select=lambda R: np.arange(b, columns.size))
    return Q, int(dropped[0]), 1


def _cholesky_factor(gram: np.ndarray) -> np.ndarray | None:
    """The upper Cholesky factor ``R`` of a Gram matrix ``S^T S = R^T R``, or None when Cholesky QR would not be
    accurate: a failed factorization, or a column ``j`` whose part independent of the columns before it,
    ``R_jj``, is at most ``CHOLESKY_QR_RTOL`` of its norm ``sqrt(gram_jj)`` (scale-invariant: the columns of a
    search block have very different norms near convergence)."""
    try:
        R = sla.cholesky(_symmetric(gram), lower=False)
    except (np.linalg.LinAlgError, sla.LinAlgError, ValueError):
        return None
    pivots, norms = np.abs(np.diag(R)), np.sqrt(np.abs(np.diag(gram)))
    ok = np.all(np.isfinite(pivots)) and np.all(pivots > CHOLESKY_QR_RTOL * norms)
    return R if ok else None


def _inverse_columns(R: np.ndarray, b: int) -> np.ndarray:
    """Columns ``b:`` of ``R^-1`` (upper triangular ``R``): ``[X, W] R^-1[:, b:]`` is ``Q``'s ``W`` part."""
    return sla.solve_triangular(R, np.eye(R.shape[0])[:, b:], lower=False)


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

    def sums(self, futures_lists: list) -> list:
        """Several per-shard sums with one gather (one round trip)."""
        flat = self.client.gather([f for futures in futures_lists for f in futures])
        n = len(self.workers)
        return [np.sum(flat[i * n:(i + 1) * n], axis=0) for i in range(len(futures_lists))]

    def combine(self, parts_lists: list, C: np.ndarray) -> list:
        """``[A_1 A_2 ...] @ C`` per shard (the blocks side by side, ``C`` (sum of widths, q))."""
        return [self.client.submit(_combine, list(items), C, workers=[w], pure=False)
                for w, *items in zip(self.workers, *parts_lists)]


# ------------------------------------------------------------------------------- worker side (per shard)

def _residual_squares(X: np.ndarray, AX: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Squared column norms ``(b,)`` of the shard's rows of ``R = AX - X diag(theta)``."""
    R = AX - X * theta
    return np.einsum("ij,ij->j", R, R)


def _residual_columns(X: np.ndarray, AX: np.ndarray, theta_cols: tuple) -> np.ndarray:
    """The shard's rows of the active residual columns ``R[:, cols]``."""
    theta, cols = theta_cols
    return AX[:, cols] - X[:, cols] * theta[cols]


def _gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.T @ B


def _gram_of(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``[A, B]^T [A, B]``."""
    S = np.hstack([A, B])
    return S.T @ S


def _gram_of_columns(B: np.ndarray, cols: np.ndarray) -> np.ndarray:
    S = B[:, cols]
    return S.T @ S


def _right_solve(B: np.ndarray, cols_R: tuple) -> np.ndarray:
    """``B[:, cols] R^-1`` for an upper triangular ``R``."""
    cols, R = cols_R
    return sla.solve_triangular(R, B[:, cols].T, trans="T", lower=False).T


def _combine(blocks: list, C: np.ndarray) -> np.ndarray:
    return np.hstack(blocks) @ C if len(blocks) > 1 else blocks[0] @ C


def _stacked_gram(*blocks) -> np.ndarray:
    """``S^T [S, L S]`` (m, 2m) for the shard's parts of ``S`` (the first half of ``blocks``) and ``L S``."""
    half = len(blocks) // 2
    S = np.hstack(blocks[:half])
    return S.T @ np.hstack([S, *blocks[half:]])


