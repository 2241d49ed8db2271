"""Kernel evaluations and the (K)PCA / Nyström feature map used by the kernel variants of paper 000.

``kernel_matrix`` evaluates ``k(X, Y)`` with scikit-learn's ``pairwise_kernels`` (the reference
implementation) or a user callable ``k(X, Y) -> (n, m)``. ``landmark_features`` returns ``M = V Lambda^(-1/2)``
from ``K_mm = V Lambda V^T`` (rank-truncated), so that ``Phi(x) = k(x, landmarks) M`` are the Nyström
features (paper 000 Sect. 4); with all training points as landmarks, ``Phi(X) = V Lambda^(1/2)`` are the
KPCA features of the reduction of Sect. 3.2 (remark 1).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics.pairwise import PAIRWISE_KERNEL_FUNCTIONS, pairwise_kernels

from ..errors import InputDataError, NotPositiveDefiniteError, ParameterError

#: Sect. 5: "the 2nd-degree polynomial kernel k(x, x') = <x, x'>^2" (scikit-learn: (gamma <x,x'> + coef0)^degree)
DEFAULT_KERNEL_PARAMS = {"poly": {"degree": 2, "gamma": 1.0, "coef0": 0.0}}
#: eigenvalues of K_mm below this fraction of the largest are dropped (pseudo-inverse, Sect. 4)
KERNEL_RANK_RTOL = 1e-10


def kernel_matrix(X: np.ndarray, Y: np.ndarray, kernel, params: dict) -> np.ndarray:
    """``k(X, Y)`` of shape (n, m) for a kernel name of scikit-learn or a callable ``k(X, Y)``."""
    if callable(kernel):
        K = np.asarray(kernel(X, Y, **params), dtype=np.float64)
        if K.shape != (len(X), len(Y)):
            raise InputDataError(f"kernel callable must return shape {(len(X), len(Y))}; got {K.shape}")
        return K
    if kernel not in PAIRWISE_KERNEL_FUNCTIONS:
        raise ParameterError(f"kernel must be one of {sorted(PAIRWISE_KERNEL_FUNCTIONS)} or a callable; got {kernel!r}")
    return pairwise_kernels(X, Y, metric=kernel, **params)


def landmark_features(landmarks: np.ndarray, kernel, params: dict, K: np.ndarray | None = None) -> np.ndarray:
    """``M = V Lambda^(-1/2)`` (m, r) from the eigendecomposition of ``K_mm = k(landmarks, landmarks)``.

    Eigenvalues below ``KERNEL_RANK_RTOL * lambda_max`` are dropped (pseudo-inverse). Raises
    :class:`NotPositiveDefiniteError` when K_mm has a clearly negative eigenvalue (not a kernel).
    """
    K = kernel_matrix(landmarks, landmarks, kernel, params) if K is None else K
    lam, V = np.linalg.eigh(0.5 * (K + K.T))
    top = max(float(lam[-1]), 0.0)
    if top <= 0:
        raise NotPositiveDefiniteError("the kernel matrix of the landmarks is zero or negative: not a kernel")
    if lam[0] < -1e-6 * top:
        raise NotPositiveDefiniteError(
            f"the kernel matrix has a negative eigenvalue {lam[0]:.3g} (largest {top:.3g}): not positive semidefinite"
        )
    keep = lam > KERNEL_RANK_RTOL * top
    return V[:, keep] / np.sqrt(lam[keep])


def centered_kpca_map(K: np.ndarray) -> np.ndarray:
    """``M = V_c Lambda_c^(-1/2)`` (n, r) from the centered Gram ``J K J = V_c Lambda_c V_c^T`` (KPCA, remark 1).

    ``K M`` are the centered KPCA features up to one constant row shift (``1^T V_c = 0``), a full-rank basis
    of the span of the centered feature vectors; one eigendecomposition replaces KPCA + a PCA of the features.
    """
    Kc = K - K.mean(axis=0) - K.mean(axis=1)[:, None] + K.mean()
    lam, V = np.linalg.eigh(0.5 * (Kc + Kc.T))
    top = max(float(lam[-1]), 0.0)
    if top <= 0:
        raise NotPositiveDefiniteError("the centered kernel matrix is zero: all training points coincide in feature space")
    keep = lam > KERNEL_RANK_RTOL * top
    return V[:, keep] / np.sqrt(lam[keep])
