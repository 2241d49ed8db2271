"""Small CSR helpers shared by the graph modules (entrywise, no structure changes).

``scipy.sparse`` ``setdiag(0)`` on a CSR matrix without stored diagonal entries inserts them (a full
restructuring, which rewrites every array of the graph); :func:`drop_diagonal` only zeroes and drops the entries
that exist, one pass over the entries.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def row_of_entries(W: sp.csr_matrix, r0: int = 0, r1: int | None = None) -> np.ndarray:
    """Row index of every stored entry of the rows ``r0:r1`` (default all) of a CSR matrix,
    ``(indptr[r1] - indptr[r0],)``."""
    r1 = W.shape[0] if r1 is None else r1
    return np.repeat(np.arange(r0, r1), np.diff(W.indptr[r0:r1 + 1]))


def drop_diagonal(W: sp.csr_matrix) -> sp.csr_matrix:
    """``W`` (CSR, modified in place and returned) without its stored diagonal entries (and without zeros)."""
    if W.diagonal().any():  # else only zeros are stored there: no (nnz,) int64 row numbers
        W.data[row_of_entries(W) == W.indices] = 0.0
    W.eliminate_zeros()
    return W


#: Rows per block of the row-block loops over large CSR matrices (:func:`row_blocks`): bounds their (entries of
#: the block,) temporaries (~5e6 entries of a kNN graph) instead of ``(nnz,)`` ones.
ROW_BLOCK = 1 << 18


def row_blocks(n_rows: int):
    """``(r0, r1)`` row ranges of :data:`ROW_BLOCK` rows covering ``[0, n_rows)``, the one blocking of the
    graph, Laplacian, reordering and AMG-setup loops."""
    for r0 in range(0, n_rows, ROW_BLOCK):
        yield r0, min(n_rows, r0 + ROW_BLOCK)


def diagonal_positions(A: sp.csr_matrix) -> np.ndarray | None:
    """Position in ``A.data`` of each row's diagonal entry ``(n,)`` int64, or None when some row of the square
    CSR matrix ``A`` stores none (or stores it twice). Computed by row blocks, so the temporaries stay at
    :data:`ROW_BLOCK` rows' entries rather than ``(nnz,)``."""
    n = A.shape[0]
    out = np.empty(n, dtype=np.int64)
    for r0, r1 in row_blocks(n):
        lo, hi = int(A.indptr[r0]), int(A.indptr[r1])
        rows = row_of_entries(A, r0, r1)
        hits = np.flatnonzero(A.indices[lo:hi] == rows)
        if hits.size != r1 - r0 or np.any(np.diff(rows[hits]) != 1):
            return None
        out[r0:r1] = lo + hits
    return out


#: Entries per block of :func:`max_asymmetry`'s value comparison (bounds its temporaries)
ASYMMETRY_BLOCK = 1 << 22


def max_asymmetry(M) -> float:
    """``max |M - M^T|`` of a square sparse matrix (0.0 when empty).

    One transposed copy of ``M`` (``csr -> csc``, a linear-time conversion) and, when the two share their
    sparsity pattern (a symmetric pattern: every kNN graph and Laplacian here), a blockwise comparison of the
    values; only a structurally asymmetric ``M`` goes through the sparse difference ``M - M^T``, which builds
    the transpose, the difference and its absolute value (three copies of the matrix instead of one, and sparse
    arithmetic instead of one pass over the values).
    """
    C = sp.csr_matrix(M)
    if not C.has_canonical_format:
        C = C.copy()
        C.sum_duplicates()
    T = C.T.tocsr()  # sorted indices, no duplicates
    if C.nnz == 0:
        return 0.0
    if not (np.array_equal(C.indptr, T.indptr) and np.array_equal(C.indices, T.indices)):
        return float(abs(C - T).max())
    worst = 0.0
    for lo in range(0, C.nnz, ASYMMETRY_BLOCK):
        hi = min(C.nnz, lo + ASYMMETRY_BLOCK)
        worst = max(worst, float(np.max(np.abs(C.data[lo:hi] - T.data[lo:hi]))))
    return worst


def spd_lu(M: sp.spmatrix):
    """Sparse LU (``scipy.sparse.linalg.splu``) of a symmetric positive definite ``M`` (n, n), ordered and pivoted
    as a Cholesky factorization would be: minimum degree on ``M + M^T`` and diagonal pivots only (an SPD matrix
    needs no pivoting). On the coarse problems of the sharded eigensolve this gives a sparser factor, hence less
    time and memory, than splu's default COLAMD ordering, which ignores the symmetry.
    Returns splu's ``SuperLU`` object (``.solve(b)``)."""
    from scipy.sparse.linalg import splu

    return splu(sp.csc_matrix(M), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                options={"SymmetricMode": True})
