"""Nystrom feature map used by the at-scale GRAD path: K_y ~= Phi Phi^T, Phi = K(X, Z) U_r Lambda_r^-1/2.

Local, clearly-marked adapter (the project's :mod:`spectral.nystrom` belongs to the solvers helper and
had not landed when this was written). Landmarks Z (m, D) are a uniform sample without replacement;
eigenvalues of K_ZZ below ``rcond * lambda_max`` are dropped (rank r <= m), so the map is stable.
With m = n the approximation is exact: Phi Phi^T = K (up to the dropped null space).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la

from .._validation import check_int
from ._core import kernel_matrix

#: relative eigenvalue floor of K_ZZ: below this the pseudo-inverse square root amplifies round-off
_RCOND = 1e-10


def fit_nystrom(X, n_landmarks: int, kernel: str, params: dict | None, rng: np.random.Generator):
    """Choose landmarks and the map: returns ``(landmarks (m, D), proj (m, r))`` with Phi = K(X, Z) @ proj."""
    n = X.shape[0]
    m = check_int("n_landmarks", n_landmarks, low=1)
    m = min(m, n)
    idx = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    Z = np.array(X[idx], dtype=np.float64)
    Kzz = kernel_matrix(Z, Z, kernel, params)
    lam, U = la.eigh(Kzz)
    keep = lam > _RCOND * max(float(lam[-1]), np.finfo(float).tiny)
    return Z, U[:, keep] / np.sqrt(lam[keep])


def nystrom_features(X, landmarks, proj, kernel: str, params: dict | None, chunk_rows: int = 65536):
    """Phi (n, r) = K(X, Z) @ proj, computed by row chunks so that K(X, Z) is never held whole."""
    out = np.empty((X.shape[0], proj.shape[1]), dtype=np.float64)
    for i0 in range(0, X.shape[0], chunk_rows):
        out[i0:i0 + chunk_rows] = kernel_matrix(X[i0:i0 + chunk_rows], landmarks, kernel, params) @ proj
    return out
