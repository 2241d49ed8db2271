"""STG18 (GRAD): LNEG against scikit-learn's LLE and an SLSQP solution of the local l1 problem."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as la
from scipy.optimize import minimize
from sklearn.datasets import make_swiss_roll
from sklearn.manifold import LocallyLinearEmbedding

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.methods.graph_kpca import LNEG
from eigenflow.spectral.methods.graph_kpca.lneg_weights import _gram, _design, local_weights_chunk


@pytest.fixture(scope="module")
def roll():
    X, t = make_swiss_roll(400, noise=0.05, random_state=0)
    return X, t


def test_degree1_no_l1_no_graph_equals_sklearn_lle(roll):
    X, _ = roll
    ref = LocallyLinearEmbedding(n_neighbors=10, n_components=2, reg=1e-3, eigen_solver="dense").fit(X)
    m = LNEG(2, n_neighbors=10, degree=1, l1=0.0, gamma=0.0).fit(X)
    assert np.max(la.subspace_angles(m.embedding_, ref.embedding_)) < 1e-6
    np.testing.assert_allclose(m.weights_.sum(axis=1), 1.0)  # LLE's affine constraint (eq. 6)


def test_l1_weights_solve_the_local_problem(roll):
    """FISTA + exact prox vs SLSQP on w^T G w + l1 ||w||_1, sum of linear weights = 1 (split w = u - v)."""
    X, _ = roll
    from eigenflow.spectral.methods.graph_kpca.graphs import knn_indices

    ind, _ = knn_indices(X, 6)
    l1, P, k = 0.05, 2, 6
    coef, _ = local_weights_chunk(X, ind, 0, 3, degree=P, l1=l1, reg=1e-3, expansion="centered",
                                  max_iter=5000, tol=1e-12)
    Z, scales = _design(X, ind, 0, 3, P, "centered")
    G = _gram(Z, k, 1e-3)
    for b in range(3):
        q = k * P

        def f(x):
            w = x[:q] - x[q:]
            return w @ G[b] @ w + l1 * x.sum()

        cons = {"type": "eq", "fun": lambda x: (x[:k] - x[q:q + k]).sum() - 1.0}
        x0 = np.concatenate([np.full(q, 0.1), np.zeros(q)])
        res = minimize(f, x0, method="SLSQP", bounds=[(0, None)] * (2 * q), constraints=[cons],
                       options={"ftol": 1e-14, "maxiter": 2000})
        w_ref = (res.x[:q] - res.x[q:]).reshape(P, k).T * scales[b]
        mine = coef[b]
        w_mine = mine.T.ravel() / np.repeat(scales[b], k)
        assert f(np.concatenate([np.maximum(w_mine, 0), np.maximum(-w_mine, 0)])) <= res.fun + 1e-9
        np.testing.assert_allclose(mine, w_ref, atol=1e-4)
        assert abs(mine[:, 0].sum() - 1.0) < 1e-10


def test_lneg_with_l1_and_graph_is_sparse_and_recovers_the_roll():
    X, t = make_swiss_roll(600, noise=0.05, random_state=0)
    m = LNEG(2, n_neighbors=10, degree=2, l1=0.01, gamma=0.1).fit(X)
    assert (np.abs(m.coef_) < 1e-12).mean() > 0.2  # l1 zeros coefficients
    corr = max(abs(np.corrcoef(m.embedding_[:, i], t)[0, 1]) for i in range(2))
    assert corr > 0.9  # the roll's arc parameter is one embedding coordinate
    np.testing.assert_allclose(m.transform(X), m.embedding_)
    Z = m.transform(X[:10] + 1e-3)
    assert np.max(np.abs(Z - m.embedding_[:10])) < 0.1 * np.max(np.abs(m.embedding_))


def test_dask_chunks_equal_in_process_chunks(roll):
    X, _ = roll
    a = LNEG(2, n_neighbors=8, degree=2, chunk_size=64).fit(X)
    b = LNEG(2, n_neighbors=8, degree=2, chunk_size=100, use_dask=True).fit(X)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-12)


def test_lneg_bad_inputs(roll):
    X, _ = roll
    with pytest.raises(ParameterError, match=r"degree must be an integer in \[1, 10\]; got 0"):
        LNEG(2, degree=0).fit(X)
    with pytest.raises(ParameterError, match=r"l1 must be a real number in \[0.0, inf\); got -1.0"):
        LNEG(2, l1=-1.0).fit(X)
    with pytest.raises(InputDataError, match=r"graph must have shape \(400, 400\)"):
        LNEG(2, gamma=1.0, graph=np.eye(3)).fit(X)
    with pytest.raises(ValueError, match="X has 2 features, but LNEG is expecting 3 features"):
        LNEG(2).fit(X).transform(X[:, :2])
