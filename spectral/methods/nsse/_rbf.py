"""Gaussian RBF interpolator of NSSE (OV19, eqs. 6-8) with a regularized, factorized Psi.

``Psi_ij = exp(-||x_i - x_j||^2 / sigma^2)`` is symmetric positive definite for distinct points, but its
condition number explodes as sigma grows (eigenvalues decay like those of a heat kernel). It is never
inverted explicitly. Every quantity uses the ridge-regularized matrix

    Psi_r = Psi + ridge * I,      ridge = RIDGE (default 1e-8, absolute; Psi has a unit diagonal),

so that the objective of the Y-step (eigendecomposition of Psi) and of the sigma-step (Cholesky of
Psi_r) is the same function and the alternating scheme stays monotone. The price is that the
interpolator reproduces the training embedding up to ``ridge * ||C||``:  Psi C = Y - ridge * C.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from eigenflow.spectral.methods.nsse._graphs import squared_distances

#: Default ridge added to Psi. Psi has ones on its diagonal and eigenvalues <= N, so 1e-8 bounds the
#: condition number of Psi_r by N / 1e-8 (2e11 at N = 2,000): Cholesky stays accurate in float64 while
#: the reproduction error ridge * ||C|| stays far below the scale of Y (entries ~ 1/sqrt(N)).
RIDGE = 1e-8

#: Rows of new points per block in :func:`rbf_interpolate` (block x N kernel values in memory).
_BLOCK_ENTRIES = 4_000_000

#: Lipschitz constant of phi(r) = exp(-r^2/sigma^2) is sqrt(2) e^{-1/2} / sigma (OV19, Sect. 4.1).
_LPHI = np.sqrt(2.0) * np.exp(-0.5)


def psi_matrix(D2: np.ndarray, sigma: float) -> np.ndarray:
    """``Psi (N, N)`` with ``Psi_ij = exp(-D2_ij / sigma^2)`` (OV19, eq. 7)."""
    return np.exp(-D2 / sigma**2)


def psi_eig(D2: np.ndarray, sigma: float, ridge: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Eigendecomposition of ``Psi_r = Psi + ridge I``.

    Returns
    -------
    lam : ndarray (N,)
        Eigenvalues of Psi_r, ascending; round-off negatives of Psi are clipped to 0 before adding the ridge.
    U : ndarray (N, N)
        Orthonormal eigenvectors.
    cond : float
        Condition number ``lam_max / lam_min`` of Psi itself (``inf`` if Psi is numerically singular),
        reported in ``history_``.
    """
    lam, U = linalg.eigh(psi_matrix(D2, sigma), driver="evd", check_finite=False)  # evd: divide and conquer
    cond = float(lam[-1] / lam[0]) if lam[0] > 0 else float("inf")
    return np.maximum(lam, 0.0) + ridge, U, cond


def psi_inv2(lam: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``Psi_r^{-2} (N, N) = U diag(lam^-2) U^T`` from the factorization of :func:`psi_eig`."""
    G = U / lam[None, :]  # (N, N), columns u_j / lam_j
    return G @ G.T


def regularity_term(D2: np.ndarray, Y: np.ndarray, sigma: float, ridge: float) -> float:
    """``tr(Y^T Psi_r^{-2} Y) = ||Psi_r^{-1} Y||_F^2 = ||C||_F^2`` (OV19, eq. 7), by Cholesky.

    If Psi_r is not numerically positive definite for Cholesky (round-off at very large sigma),
    the same quantity is computed from the clipped eigendecomposition used by the Y-step.
    """
    Psi = psi_matrix(D2, sigma)
    Psi[np.diag_indices_from(Psi)] += ridge
    try:
        C = linalg.cho_solve(linalg.cho_factor(Psi, lower=True, check_finite=False), Y, check_finite=False)
    except linalg.LinAlgError:
        lam, U, _ = psi_eig(D2, sigma, ridge)
        C = U @ ((U.T @ Y) / lam[:, None])
    return float(np.sum(C * C))


def rbf_coefficients(D2: np.ndarray, Y: np.ndarray, sigma: float, ridge: float) -> np.ndarray:
    """Interpolation coefficients ``C = Psi_r^{-1} Y``, ``(N, d)``, by a Cholesky solve (OV19, eq. 7)."""
    Psi = psi_matrix(D2, sigma)
    Psi[np.diag_indices_from(Psi)] += ridge
    return linalg.cho_solve(linalg.cho_factor(Psi, lower=True, check_finite=False), Y, check_finite=False)


def rbf_interpolate(X_new: np.ndarray, centers: np.ndarray, coef: np.ndarray, sigma: float) -> np.ndarray:
    """Evaluate ``f(x) = sum_i c_i exp(-||x - x_i||^2 / sigma^2)`` (OV19, eq. 6) on ``X_new (m, n)``.

    Computed in row blocks so that at most ~4e6 kernel values are held at once. Returns ``(m, d)``.
    """
    m, N = X_new.shape[0], centers.shape[0]
    out = np.empty((m, coef.shape[1]), dtype=np.float64)
    step = max(1, _BLOCK_ENTRIES // max(N, 1))
    for start in range(0, m, step):
        block = X_new[start : start + step]
        out[start : start + step] = np.exp(-squared_distances(block, centers) / sigma**2) @ coef
    return out


def lipschitz_bound(coef: np.ndarray, sigma: float) -> float:
    """Lipschitz constant ``L = sqrt(N) L_phi ||C||_F`` of the interpolator (OV19, Lemma / eq. 8)."""
    return float(np.sqrt(coef.shape[0]) * _LPHI / sigma * np.linalg.norm(coef))
