"""A block V-cycle preconditioner on pyamg's smoothed-aggregation hierarchy.

pyamg's ``aspreconditioner()`` applies its V-cycle column by column (one Gauss-Seidel sweep per vector
per level), which is where LOBPCG spends most of its time on large graphs. This V-cycle uses the same
hierarchy (the same ``A_l``, ``P_l``, ``R_l`` levels) but smooths with weighted Jacobi, so that every
step is one sparse-matrix x dense-block product for all columns at once:
``x <- x + omega D^{-1} (b - A x)``, ``omega = 4 / (3 rho(D^{-1} A))`` (the classical smoothing weight),
``JACOBI_SWEEPS`` pre- and post-sweeps, an exact (pseudo-inverse) solve on the coarsest level. It is a
symmetric positive definite preconditioner when A is (same pre/post smoothing).

``BlockVCycle(ml, start=l)`` is the V-cycle of the sub-hierarchy below level ``l`` (a preconditioner for
``ml.levels[l].A``), used by the coarse-to-fine start of :mod:`._multilevel`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

# Pre- and post-smoothing sweeps per level: 2 matched the convergence of pyamg's symmetric Gauss-Seidel
# V-cycle in LOBPCG iterations on kNN-graph Laplacians while costing one block product per sweep.
JACOBI_SWEEPS = 2


class BlockVCycle(LinearOperator):
    """Symmetric V-cycle ``M ~ A_start^{-1}`` applied to (n_start, p) blocks (see module docstring)."""

    def __init__(self, ml, dtype=np.float64, start: int = 0):
        if not 0 <= start < len(ml.levels):
            raise ValueError(f"start must be a level index in [0, {len(ml.levels) - 1}]; got {start}")
        self.levels = []
        for lvl in ml.levels[start:-1]:
            A = sp.csr_matrix(lvl.A, dtype=dtype)
            dinv = (1.0 / A.diagonal()).astype(dtype)
            omega = 4.0 / (3.0 * _jacobi_radius(A, dinv))
            self.levels.append((A, _compressed(lvl.P, dtype), _compressed(lvl.R, dtype), (omega * dinv)[:, None]))
        coarse = ml.levels[-1].A
        coarse = coarse.toarray() if sp.issparse(coarse) else np.asarray(coarse)
        self.coarse_inv = np.linalg.pinv(coarse).astype(dtype)
        n = ml.levels[start].A.shape[0]
        super().__init__(np.dtype(dtype), (n, n))

    def _matvec(self, x):
        return self._matmat(np.asarray(x).reshape(-1, 1)).ravel()

    def _matmat(self, B):
        return self._cycle(0, np.asarray(B, dtype=self.dtype))

    def _cycle(self, i: int, b: np.ndarray) -> np.ndarray:
        if i == len(self.levels):
            return self.coarse_inv @ b
        A, P, R, wdinv = self.levels[i]
        x = wdinv * b
        for _ in range(JACOBI_SWEEPS - 1):
            x += wdinv * (b - A @ x)
        x += P @ self._cycle(i + 1, R @ (b - A @ x))
        for _ in range(JACOBI_SWEEPS):
            x += wdinv * (b - A @ x)
        return x


def share_transfer_operators(ml) -> None:
    """Store each level's ``P`` of a symmetric pyamg hierarchy as CSR and its ``R = P^T`` as the CSC view of that
    CSR matrix (no copy), in place of pyamg's BSR pair.

    The V-cycles of this module and of :mod:`._multilevel` then use them as they are: one array set per level
    instead of four (BSR ``P``, BSR ``R`` and their CSR conversions), and the CSC product ``R @ x`` costs about
    what the CSR one does, so the memory saved costs no time. Only for
    hierarchies built with pyamg's default ``symmetry="hermitian"`` (``R = P^T``); pyamg's own cycle
    (``ml.aspreconditioner()``) accepts CSR/CSC operators as well.
    """
    for lvl in ml.levels[:-1]:
        lvl.P = sp.csr_matrix(lvl.P)
        lvl.R = lvl.P.T


def _compressed(M, dtype):
    """``M`` itself when it is a CSR or CSC matrix of ``dtype``, else its CSR conversion."""
    if sp.issparse(M) and M.format in ("csr", "csc") and M.dtype == dtype:
        return M
    return sp.csr_matrix(M, dtype=dtype)


def _jacobi_radius(A, dinv: np.ndarray, n_iter: int = 15) -> float:
    """Spectral radius of ``D^{-1} A`` (power iteration on the similar ``D^{-1/2} A D^{-1/2}``), +5% margin."""
    s = np.sqrt(dinv)
    v = np.random.default_rng(0).standard_normal(A.shape[0]).astype(A.dtype)  # fixed seed: deterministic
    lam = 1.0
    for _ in range(n_iter):
        w = s * (A @ (s * v))
        lam = float(np.linalg.norm(w))
        v = w / lam
    return 1.05 * lam
