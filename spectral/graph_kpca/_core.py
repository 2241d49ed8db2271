"""Shared linear algebra of the GRAD estimators (paper 003): dense eigen-steps and training-point matches.

Kernels and centering are :mod:`spectral.kernels` (``kernel_from_params``, ``center_gram``, ``center_rows``),
signs :func:`spectral.eigen.sign_flip`.

Small n: dense matrices and ``scipy.linalg.eigh``. (Large n: the estimators hand implicit operators of
:mod:`spectral.operators` to :func:`spectral.eigen.eigensolve`.)
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la

from ..eigen.signs import sign_flip


def top_eigs_dense(M: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """d largest eigenpairs of a symmetric dense (n, n) matrix, descending: ``(values (d,), vectors (n, d))``."""
    n = M.shape[0]
    lam, V = la.eigh(M, subset_by_index=[n - d, n - 1])
    return lam[::-1], sign_flip(V[:, ::-1])


def bottom_eigs_dense(M: np.ndarray, d: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """d smallest eigenpairs after skipping ``skip`` (LLE drops the constant one), ascending."""
    lam, V = la.eigh(M, subset_by_index=[skip, skip + d - 1])
    return lam, sign_flip(V)




def training_matches(X_fit: np.ndarray, X: np.ndarray) -> np.ndarray:
    """For each row of X (m, D), the index of an identical row of X_fit (n, D), or -1 (exact equality)."""
    from sklearn.neighbors import NearestNeighbors

    _, ind = NearestNeighbors(n_neighbors=1).fit(X_fit).kneighbors(X)
    ind = ind[:, 0]
    same = np.all(X_fit[ind] == X, axis=1)
    return np.where(same, ind, -1)
