"""Bandwidth-reducing symmetric reordering of a sparse eigenproblem (reverse Cuthill-McKee).

A kNN graph stores its nodes in data order, so the rows a sparse-matrix x block product reads are
scattered over the whole block: the product is bound by memory latency. Renumbering the nodes with
``scipy.sparse.csgraph.reverse_cuthill_mckee`` puts neighbours next to each other, so a product reads rows
that are close in memory; the one-off cost of the permutation and the renumbering is repaid within the
solve's many products (``benchmarks/bench_solvers.py`` times the solve with and without it).
``P^T A P v = lambda P^T B P v`` has the same eigenvalues, and the eigenvectors are permuted back.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from eigenflow.spectral._sparse import row_blocks


def rcm_permutation(A: sp.spmatrix) -> np.ndarray:
    """Node order ``(n,)`` of reverse Cuthill-McKee on the symmetric sparsity pattern of ``A`` (n, n)."""
    return np.asarray(reverse_cuthill_mckee(sp.csr_matrix(A), symmetric_mode=True), dtype=np.int64)


def permute_symmetric(M, perm: np.ndarray):
    """``M[perm][:, perm]`` for a sparse (CSR, sorted indices) or dense (n, n) matrix; None stays None."""
    if M is None:
        return None
    if sp.issparse(M):
        out = sp.csr_matrix(M)[perm][:, perm].tocsr()
        out.sort_indices()
        return out
    return np.asarray(M)[np.ix_(perm, perm)]


def can_permute_in_place(M) -> bool:
    """True when :func:`permute_symmetric_in_place` applies: a CSR matrix in canonical format (sorted indices, no
    duplicates, so that permuting forth and back restores it bit for bit) with writeable arrays."""
    return (sp.isspmatrix_csr(M) and M.has_canonical_format
            and all(a.flags.writeable for a in (M.data, M.indices, M.indptr)))


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """``inverse`` with ``inverse[perm] = arange(n)`` (n,)."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size)
    return inverse


def permute_symmetric_in_place(M: sp.csr_matrix, perm: np.ndarray) -> None:
    """Overwrite the arrays of the CSR ``M`` (n, n) with those of ``M[perm][:, perm]`` (sorted indices).

    Every matrix object sharing ``M``'s arrays sees the permuted matrix; ``permute_symmetric_in_place(M,
    inverse)`` (``inverse[perm] = arange(n)``) restores it bit for bit. The cost is one array's worth of
    temporary at a time (the new ``data``, then the new ``indices``) plus row-block temporaries, where
    :func:`permute_symmetric` builds two full copies: one Laplacian is alive during the solve instead of
    two. Needs :func:`can_permute_in_place`; ``M`` must not be read
    by another thread meanwhile.
    """
    n = M.shape[0]
    inverse = inverse_permutation(perm)
    lengths = np.diff(M.indptr)[perm]
    new_indptr = np.zeros(n + 1, dtype=M.indptr.dtype)
    np.cumsum(lengths, out=new_indptr[1:])
    for values, mapping in ((M.indices, inverse), (M.data, None)):
        out = np.empty_like(values)
        for r0, r1 in row_blocks(n):
            lo, hi = int(new_indptr[r0]), int(new_indptr[r1])
            source = np.repeat(M.indptr[perm[r0:r1]].astype(np.int64) - new_indptr[r0:r1], lengths[r0:r1])
            source += np.arange(lo, hi)
            out[lo:hi] = values[source] if mapping is None else mapping[values[source]]
        values[:] = out
        del out
    M.indptr[:] = new_indptr
    M.has_sorted_indices = False
    M.sort_indices()


def unpermute_rows(V: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Rows of ``V`` (n, k), computed in the permuted order, back in the original node order."""
    out = np.empty_like(V)
    out[perm] = V
    return out
