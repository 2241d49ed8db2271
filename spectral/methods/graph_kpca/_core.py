"""Shared linear algebra of the GRAD estimators (STG18): dense eigen-steps and training-point matches.

Kernels and centering are :mod:`spectral.operators.kernels` (``kernel_from_params``, ``center_gram``, ``center_rows``),
signs :func:`spectral.eigen.sign_flip`, kNN search :class:`spectral.neighbours.index.KNNIndex` (built once at fit over
the training points, queried by ``transform``, rebuilt once by ``from_state``).

Small n: dense matrices and ``scipy.linalg.eigh``. (Large n: the estimators hand implicit operators of
:mod:`spectral.operators.linear` to :func:`spectral.eigen.eigensolve`.)
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la

from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.neighbours.index import KNNIndex

#: kNN search of the GRAD estimators: exact (scikit-learn's search inside KNNIndex, as the paper's graphs);
#: the flows pass NN-descent graphs at scale through ``precomputed_knn``.
KNN_METHOD = "exact"


def top_eigs_dense(M: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """d largest eigenpairs of a symmetric dense (n, n) matrix, descending: ``(values (d,), vectors (n, d))``."""
    n = M.shape[0]
    lam, V = la.eigh(M, subset_by_index=[n - d, n - 1])
    return lam[::-1], sign_flip(V[:, ::-1])


def bottom_eigs_dense(M: np.ndarray, d: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """d smallest eigenpairs after skipping ``skip`` (LLE drops the constant one), ascending."""
    lam, V = la.eigh(M, subset_by_index=[skip, skip + d - 1])
    return lam, sign_flip(V)




def training_index(X_fit: np.ndarray, n_neighbors: int = 1) -> KNNIndex:
    """The :class:`KNNIndex` over the training points X_fit (n, D), built once at fit (exact search)."""
    return KNNIndex.build(X_fit, min(n_neighbors, X_fit.shape[0] - 1), method=KNN_METHOD)


def training_matches(index: KNNIndex, X: np.ndarray) -> np.ndarray:
    """For each row of X (m, D), the position of an identical training point, or -1: ``(m,)`` int64.

    A query equal to a training point finds it at distance exactly 0 (KNNIndex recomputes the distances of
    the selected pairs in float64 from the coordinates).
    """
    ind, dist = index.query(X, 1)
    return np.where(dist[:, 0] == 0, ind[:, 0], -1)
