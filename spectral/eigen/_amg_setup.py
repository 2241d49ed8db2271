"""The finest level of the default smoothed-aggregation hierarchy, built by row blocks.

pyamg's ``smoothed_aggregation_solver`` forms the smoothed prolongator of the finest level as
``P = T - omega D^-1 A T`` with whole-matrix temporaries: ``|A|`` for the row sums, a scaled copy of ``A``, its
``omega`` multiple, and ``(R A) P`` for the coarse matrix. On a large Laplacian those temporaries, several
copies of the matrix, would set the peak memory of the whole eigensolve. This module builds the same
finest level (the same pyamg aggregation, candidate improvement and tentative prolongator, the same
formulas) with the products taken over row blocks of ``A``, then hands the coarse matrix to pyamg for the
remaining levels:

1. aggregation: ``standard_aggregation(A)`` (``A`` is its own strength graph: ``strength=None``);
2. candidates: ``B = 1`` improved by 4 symmetric Gauss-Seidel sweeps on ``A B = 0`` (pyamg's default
   ``improve_candidates`` of the finest level), then ``T, B_c = fit_candidates(AggOp, B)``;
3. prolongator, per row block ``b``: ``P_b = T_b - omega D_b^-1 (A_b T)``, ``D`` the row sums of ``|A|``,
   ``omega = 4/3`` (pyamg's ``jacobi_prolongation_smoother`` with ``weighting="local"``);
4. coarse matrix ``A_c = sum_b P_b^T (A_b P)`` (pyamg's ``R A P`` with ``R = P^T``);
5. the coarse hierarchy: ``smoothed_aggregation_solver(A_c, B=B_c, ...)`` with the same options and no
   candidate improvement (pyamg's default improves them on the finest level only).

It applies to :data:`LEAN_OPTIONS` only (eigenflow's default options); the test suite checks it level by
level against pyamg's own hierarchy.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._sparse import row_blocks, row_of_entries

#: The pyamg options this module reproduces (those of ``lobpcg.DEFAULT_AMG_OPTIONS``).
LEAN_OPTIONS = {"smooth": ("jacobi", {"weighting": "local"}), "strength": None, "keep": False}
#: pyamg's default candidate improvement on the finest level.
IMPROVE_CANDIDATES = ("block_gauss_seidel", {"sweep": "symmetric", "iterations": 4})
#: pyamg's default prolongation-smoother weight.
OMEGA = 4.0 / 3.0
#: pyamg's defaults for the number of levels and the coarsest size.
MAX_LEVELS, MAX_COARSE = 10, 10


def lean_hierarchy(A: sp.csr_matrix):
    """pyamg ``MultilevelSolver`` of the CSR ``A`` (n, n) for :data:`LEAN_OPTIONS` (module docstring); level 0's
    matrix is ``A`` itself."""
    from pyamg import smoothed_aggregation_solver
    from pyamg.aggregation.aggregate import standard_aggregation
    from pyamg.aggregation.tentative import fit_candidates
    from pyamg.multilevel import MultilevelSolver
    from pyamg.relaxation.smoothing import change_smoothers
    from pyamg.relaxation.utils import relaxation_as_linear_operator

    n = A.shape[0]
    if n <= MAX_COARSE:
        return smoothed_aggregation_solver(A, **LEAN_OPTIONS)
    aggregates, _ = standard_aggregation(A)
    B = relaxation_as_linear_operator(IMPROVE_CANDIDATES, A, np.zeros((n, 1), dtype=A.dtype)) @ np.ones(
        (n, 1), dtype=A.dtype)
    T, B_coarse = fit_candidates(aggregates, B)
    del aggregates
    P = smoothed_prolongator(A, sp.csr_matrix(T))
    del T
    A_coarse = galerkin_product(A, P)
    finest = MultilevelSolver.Level()
    finest.A, finest.B, finest.P, finest.R = A, B, P, P.T
    coarse = smoothed_aggregation_solver(A_coarse, B=B_coarse, max_levels=MAX_LEVELS - 1, max_coarse=MAX_COARSE,
                                         improve_candidates=None, **LEAN_OPTIONS)
    ml = MultilevelSolver([finest, *coarse.levels])
    change_smoothers(ml, ("block_gauss_seidel", {"sweep": "symmetric"}), ("block_gauss_seidel", {"sweep": "symmetric"}))
    return ml


def smoothed_prolongator(A: sp.csr_matrix, T: sp.csr_matrix) -> sp.csr_matrix:
    """``P = T - omega D^-1 A T`` (n, n_c), ``D = |A| 1``, by row blocks of ``A`` (step 3 of the module docstring)."""
    blocks = []
    for r0, r1 in row_blocks(A.shape[0]):
        A_b = A[r0:r1]
        row_sums = np.asarray(abs(A_b).sum(axis=1)).ravel()
        scale = np.zeros_like(row_sums)
        np.divide(OMEGA, np.abs(row_sums), out=scale, where=row_sums != 0)
        update = sp.csr_matrix(A_b @ T)
        update.data *= scale[row_of_entries(update)]
        blocks.append(sp.csr_matrix(T[r0:r1] - update))
    return sp.vstack(blocks, format="csr")


def galerkin_product(A: sp.csr_matrix, P: sp.csr_matrix) -> sp.csr_matrix:
    """``P^T A P`` (n_c, n_c) as a sum over row blocks ``P_b^T (A_b P)`` (step 4 of the module docstring)."""
    total = None
    for r0, r1 in row_blocks(A.shape[0]):
        part = sp.csr_matrix(P[r0:r1].T @ (A[r0:r1] @ P))
        total = part if total is None else total + part
    total = sp.csr_matrix(total)
    total.sort_indices()
    return total
