"""The kernel of the kernel variants of CK08 and its (K)PCA / Nystrom feature maps.

The kernel is :mod:`spectral.operators.kernels` (scikit-learn's meaning of ``gamma``, ``degree``, ``coef0``); CK08's
own default, Sect. 5's "2nd-degree polynomial kernel k(x, x') = <x, x'>^2", is the estimators' explicit
default ``DEFAULT_KERNEL_PARAMS``. The Nystrom map ``Phi(x) = k(x, landmarks) M`` with ``M = V Lambda^(-1/2)``
from ``K_mm = V Lambda V^T`` (rank-truncated, CK08 Sect. 4) is
:class:`spectral.operators.nystrom_features.NystromFeatures` (``M`` = its ``normalization_``). With all training points
as landmarks and ``regularization="pca"``, :func:`centered_kpca_map` gives the KPCA features of the reduction of Sect. 3.2 (remark 1).
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.errors import NotPositiveDefiniteError
from eigenflow.spectral.methods.discriminant.solve import n_leading
from eigenflow.spectral.operators.kernels import Kernel, center_gram, kernel_from_params
from eigenflow.spectral.operators.nystrom_features import EIG_FLOOR, NystromFeatures

#: Sect. 5: "the 2nd-degree polynomial kernel k(x, x') = <x, x'>^2" (scikit-learn: (gamma <x,x'> + coef0)^degree)
DEFAULT_KERNEL_PARAMS = {"poly": {"degree": 2, "gamma": 1.0, "coef0": 0.0}}


def resolve_kernel(kernel, kernel_params: dict | None) -> tuple[Kernel, dict]:
    """The :class:`Kernel` of an estimator's ``(kernel, kernel_params)`` and the merged parameters (JSON-able
    for a named kernel): the paper's defaults of ``DEFAULT_KERNEL_PARAMS`` updated with ``kernel_params``."""
    if callable(kernel):
        params = dict(kernel_params or {})
    else:
        params = {**DEFAULT_KERNEL_PARAMS.get(kernel, {}), **(kernel_params or {})}
    return kernel_from_params(kernel, params), params


def landmark_map(X, kernel: Kernel, n_landmarks: int, random_state) -> NystromFeatures:
    """Nystrom map on ``n_landmarks`` uniform landmarks among the rows of X (numpy or dask (n, d0))."""
    return NystromFeatures.from_kernel(kernel, n_landmarks, random_state=random_state).fit(X)


def centered_kpca_map(K: np.ndarray, variance: float | None = None) -> np.ndarray:
    """``M = V_c Lambda_c^(-1/2)`` (n, r) from the centered Gram ``J K J = V_c Lambda_c V_c^T`` (KPCA, remark 1).

    ``K M`` are the centered KPCA features up to one constant row shift (``1^T V_c = 0``), a full-rank basis
    of the span of the centered feature vectors; one eigendecomposition replaces KPCA + a PCA of the features.
    Eigenvalues below ``EIG_FLOOR * max`` are dropped, as in the Nystrom map.
    """
    Kc = center_gram(K)[0]
    lam, V = np.linalg.eigh(0.5 * (Kc + Kc.T))
    top = max(float(lam[-1]), 0.0)
    if top <= 0:
        raise NotPositiveDefiniteError("the centered kernel matrix is zero: all training points coincide in feature space")
    keep = lam > EIG_FLOOR * top
    r = n_leading(lam[keep][::-1], variance)  # ``variance``: the leading KPCA directions explaining that fraction
    keep[: len(lam) - r] = False  # lam ascending: the r largest of the kept ones
    return V[:, keep] / np.sqrt(lam[keep])
