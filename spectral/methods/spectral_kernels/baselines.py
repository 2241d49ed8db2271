"""Baselines of LQCL09's Table 3 on the same graph: harmonic functions and the consistency method.

Both are scikit-learn's own estimators, given the paper's kNN graph through a callable kernel:

- harmonic functions (Zhu, Ghahramani & Lafferty 2003) = ``sklearn.semi_supervised.LabelPropagation``
  (hard clamping, iterates ``F <- D^-1 W F``);
- the consistency method (Zhou et al. 2004) = ``sklearn.semi_supervised.LabelSpreading`` with ``alpha``
  (iterates ``F <- alpha S F + (1 - alpha) Y``, ``S = D^-1/2 W D^-1/2``).

scikit-learn's kernels take feature rows, so the estimators are fitted on the point indices ``(n, 1)`` and the
callable looks the weights up in ``W`` (the same sparse matrix TSK uses); nothing is re-implemented.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.semi_supervised import LabelPropagation, LabelSpreading

from eigenflow.spectral._validation import check_float, check_int
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.graph.laplacian import check_affinity

#: Iteration budget: alpha = 0.99 contracts by 0.99 per step, so 1e-6 needs ~1,400 steps; the harmonic
#: iteration on a k = 6 graph of a few hundred points needs a few thousand.
DEFAULT_MAX_ITER = 20000
DEFAULT_TOL = 1e-7


class GraphLookupKernel:
    """Callable kernel for scikit-learn: ``kernel(A, B) = W[A[:, 0], B[:, 0]]`` with A, B index columns."""

    def __init__(self, W):
        self.W = check_affinity(W)

    def __call__(self, A, B):
        ia = np.asarray(A)[:, 0].astype(np.int64)
        ib = np.asarray(B)[:, 0].astype(np.int64)
        return sp.csr_matrix(self.W[ia][:, ib])


def _fit(est, W, y):
    y = np.asarray(y)
    n = check_affinity(W).shape[0]
    if y.shape != (n,):
        raise InputDataError(f"y must have shape ({n},) like W; got {y.shape}")
    if np.unique(y[y >= 0]).size < 2:
        raise InputDataError("y needs labeled points (>= 0) of at least 2 classes; -1 marks unlabeled points")
    return est.fit(np.arange(n, dtype=np.float64)[:, None], y)


def harmonic_function(W, y, *, max_iter: int = DEFAULT_MAX_ITER, tol: float = DEFAULT_TOL) -> np.ndarray:
    """Transductive labels (n,) of the harmonic-function method (Zhu et al. 2003) on graph ``W`` (n, n).

    ``y`` (n,) holds class labels >= 0 and -1 for unlabeled points.
    """
    max_iter = check_int("max_iter", max_iter, low=1)
    tol = check_float("tol", tol, low=0.0, low_inclusive=False)
    est = LabelPropagation(kernel=GraphLookupKernel(W), max_iter=max_iter, tol=tol)
    return _fit(est, W, y).transduction_


def consistency_method(W, y, *, alpha: float = 0.99, max_iter: int = DEFAULT_MAX_ITER,
                       tol: float = DEFAULT_TOL) -> np.ndarray:
    """Transductive labels (n,) of the consistency method (Zhou et al. 2004, alpha in (0, 1)) on graph ``W``."""
    alpha = check_float("alpha", alpha, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    max_iter = check_int("max_iter", max_iter, low=1)
    tol = check_float("tol", tol, low=0.0, low_inclusive=False)
    est = LabelSpreading(kernel=GraphLookupKernel(W), alpha=alpha, max_iter=max_iter, tol=tol)
    return _fit(est, W, y).transduction_
