"""Generalized symmetric-definite problems ``A v = lambda B v`` (CK08 eq. 4, 7, 10).

Two ways to deal with a ``B`` that is singular or ill-conditioned (e.g. ``X C X^T`` with more features
than samples, CK08 Sect. 3.2):

* regularization: solve with ``B + reg * I`` (``reg > 0``); residuals are then those of the
  regularized pencil ``(A, B + reg I)``, the one actually solved;
* reduction (``reduce_B=True``): restrict to the range of ``B`` -- the PCA / KPCA reduction of CK08
  Sect. 3.2. With ``B = U S U^T`` and ``W = U_r S_r^{-1/2}`` over the eigenvalues above
  ``REDUCE_RTOL * max(S)``, solve the ``r x r`` standard problem ``W^T A W y = lambda y`` and return
  ``v = W y`` (so ``V^T B V = I``). It is exact when ``range(A) ⊆ range(B)`` (both built on the same data,
  as in the paper); otherwise the residuals against the full ``B`` say so.

Without either, ``B`` must be positive definite: explicit ``B`` up to ``PD_CHECK_MAX_N`` rows is checked with
a Cholesky factorization, larger ones by their diagonal (the iterative solvers surface later failures).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from eigenflow.spectral.eigen._problem import is_explicit
from eigenflow.spectral.eigen.dense import to_dense
from eigenflow.spectral.errors import NotPositiveDefiniteError

# Eigenvalues of B below REDUCE_RTOL * max eigenvalue count as zero in the range-of-B reduction.
REDUCE_RTOL = 1e-10
# Largest explicit B checked by a full Cholesky factorization (O(n^3) time, O(n^2) memory).
PD_CHECK_MAX_N = 4000


def regularize(B, reg: float):
    """Return ``B + reg * I`` (a new matrix / operator), or ``B`` itself when ``reg == 0``."""
    if reg == 0.0:
        return B
    if sp.issparse(B):
        return (B + reg * sp.identity(B.shape[0], format="csr")).tocsr()
    if isinstance(B, np.ndarray):
        return B + reg * np.eye(B.shape[0])
    from eigenflow.spectral.operators.linear import IdentityOperator, ScaledSum

    return ScaledSum([B, IdentityOperator(B.shape[0])], [1.0, reg])


def check_positive_definite(B, name: str = "B") -> None:
    """Raise :class:`NotPositiveDefiniteError` when ``B`` is visibly not positive definite."""
    if not is_explicit(B):
        return
    n = B.shape[0]
    diag = B.diagonal() if sp.issparse(B) else np.diag(B)
    if np.any(diag <= 0):
        i = int(np.flatnonzero(diag <= 0)[0])
        raise NotPositiveDefiniteError(_pd_message(name, f"diagonal entry {i} is {diag[i]:.3g} <= 0"))
    if n <= PD_CHECK_MAX_N:
        dense = B.toarray() if sp.issparse(B) else B
        try:
            sla.cholesky(dense, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            lam_min = float(sla.eigvalsh(dense, subset_by_index=[0, 0])[0])
            raise NotPositiveDefiniteError(
                _pd_message(name, f"its smallest eigenvalue is {lam_min:.3g}")
            ) from None


def _pd_message(name: str, why: str) -> str:
    return (
        f"{name} must be positive definite for the generalized problem A v = lambda {name} v, but {why}; "
        "pass reg > 0 to solve with B + reg * I, or reduce_B=True to restrict to the range of B "
        "(CK08 Sect. 3.2)"
    )


def range_basis(B, rtol: float = REDUCE_RTOL) -> np.ndarray:
    """``W = U_r S_r^{-1/2}`` (n, r) over the eigenvalues of ``B`` above ``rtol * max``; ``W^T B W = I``."""
    dense = _dense(B, "B")
    s, U = sla.eigh(dense)
    if s[-1] <= 0:
        raise NotPositiveDefiniteError(f"B has no positive eigenvalue (largest {s[-1]:.3g}): nothing to reduce to")
    neg = s < -rtol * s[-1] * 1e3
    if np.any(neg):
        raise NotPositiveDefiniteError(
            f"B must be positive semi-definite for reduce_B=True; its smallest eigenvalue is {s[0]:.3g} "
            f"(largest {s[-1]:.3g})"
        )
    keep = s > rtol * s[-1]
    return U[:, keep] / np.sqrt(s[keep])


def reduced_matrix(A, W: np.ndarray) -> np.ndarray:
    """``W^T A W`` (r, r), symmetrized against round-off."""
    AW = np.asarray(A @ W)
    M = W.T @ AW
    return (M + M.T) / 2


def _dense(M, name: str) -> np.ndarray:
    refusal = (f"reduce_B=True needs an explicit {name} or one with at most {PD_CHECK_MAX_N} rows; got an "
               f"operator with n={M.shape[0]}")
    return to_dense(M, name, max_n=PD_CHECK_MAX_N, sparse_limited=False, refusal=refusal)
