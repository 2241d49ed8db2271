"""Shared linear algebra of the GRAD estimators (paper 003): kernels, centering, eigen-steps, signs.

Small n: dense matrices and ``scipy.linalg.eigh``. (Large n: the estimators hand implicit operators of
:mod:`spectral.operators` to :func:`spectral.eigen.eigensolve`.)
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
from sklearn.metrics.pairwise import pairwise_kernels

from .._validation import check_choice
from ..eigen.signs import sign_flip
from ..errors import ParameterError

KERNELS = ("linear", "rbf", "poly", "cosine", "laplacian", "sigmoid")


def kernel_matrix(X, Y, kernel: str, params: dict | None) -> np.ndarray:
    """Gram matrix k(X_i, Y_j), (n_x, n_y). ``params`` are scikit-learn's (e.g. {"gamma": 0.5} for rbf)."""
    check_choice("kernel", kernel, KERNELS)
    try:
        return pairwise_kernels(X, Y, metric=kernel, **dict(params or {}))
    except TypeError as exc:
        raise ParameterError(f"kernel_params {params!r} are not valid for kernel={kernel!r}: {exc}") from None


def center_gram(K: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Double centering H K H (kernel PCA); returns (K_c, column means (n,), grand mean)."""
    col = K.mean(axis=0)
    tot = float(col.mean())
    return K - col[None, :] - col[:, None] + tot, col, tot


def center_rows(K_new: np.ndarray, col: np.ndarray, tot: float) -> np.ndarray:
    """Center a kernel block k(X_new, X_train) (m, n) with the training statistics (sklearn KernelCenterer)."""
    return K_new - col[None, :] - K_new.mean(axis=1, keepdims=True) + tot


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
