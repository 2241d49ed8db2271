"""The estimators against their references on the cases where they used to part: dense ``scipy.linalg.eigh``
of the same operator, scikit-learn's estimator on the same data and graph, the transductive result."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from sklearn.datasets import make_circles

import spectral


# ------------------------------------------------------------------ GraphKPCA at scale, randomized eigensolver
def test_graph_kpca_nystrom_randomized_matches_dense_eigh_of_its_operator():
    X = make_circles(1000, factor=0.3, noise=0.05, random_state=0)[0]
    m = spectral.GraphKPCA(10, kernel="rbf", gamma=0, solver="nystrom", eigen_solver="randomized",
                           random_state=0).fit(X)
    Phi = m.nystrom_.transform(X) - m._phi_mean  # the operator Phi Phi^T the solver was given
    w = sla.eigvalsh(Phi @ Phi.T)[::-1][:10]
    np.testing.assert_allclose(m.eigenvalues_, w, rtol=1e-6, atol=0)
    np.testing.assert_allclose(m.transform(X), m.embedding_, rtol=0, atol=1e-12)
