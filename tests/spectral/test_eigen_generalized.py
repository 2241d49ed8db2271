"""Generalized problems ``A v = lambda B v`` (CK08 eq. 4, 7, 10) against ``scipy.linalg.eigh(A, B)``.

Tolerances: dense 1e-10 (round-off), arpack 1e-8, lobpcg 1e-6 (absolute on eigenvalues of O(1));
B-orthonormality ``V^T B V = I`` to 1e-8.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

from eigenflow.spectral.eigen import eigensolve
from eigenflow.spectral.errors import NotPositiveDefiniteError, ParameterError

N = 150


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def pencil():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((N, N))
    A = (M + M.T) / 2
    G = rng.standard_normal((N, N))
    B = G @ G.T / N + 0.5 * np.eye(N)
    return A, B, sla.eigh(A, B)


@pytest.mark.parametrize("solver,atol", [("dense", 1e-10), ("arpack", 1e-8), ("lobpcg", 1e-6)])
@pytest.mark.parametrize("which", ["smallest", "largest"])
def test_generalized_matches_eigh(pencil, solver, atol, which):
    A, B, (w, U) = pencil
    opts = {"max_iter": 5000} if solver == "lobpcg" else {}
    if solver == "arpack" and which == "smallest":
        opts = {"sigma": -100.0}  # a user-supplied lower bound (A's entries are O(1), B >= 0.5 I)
    res = eigensolve(A, 3, B=B, which=which, solver=solver, random_state=0, **opts)
    ref = w[:3] if which == "smallest" else w[::-1][:3]
    np.testing.assert_allclose(res.values, ref, atol=atol)
    np.testing.assert_allclose(res.vectors.T @ B @ res.vectors, np.eye(3), atol=1e-8)
    recomputed = np.linalg.norm(A @ res.vectors - B @ res.vectors * res.values, axis=0)
    np.testing.assert_allclose(res.residuals, recomputed, rtol=1e-6, atol=1e-12)


def test_arpack_refuses_unbounded_default_shift(pencil):
    A, B, _ = pencil
    with pytest.raises(ParameterError, match="cannot bound the spectrum of the pencil"):
        eigensolve(A, 3, B=B, which="smallest", solver="arpack")


def test_singular_B_refused_without_reg(pencil):
    A = pencil[0]
    B = np.diag(np.r_[np.zeros(5), np.ones(N - 5)])
    with pytest.raises(NotPositiveDefiniteError, match="B must be positive definite.*reg > 0"):
        eigensolve(A, 3, B=B, solver="dense")


def test_reg_solves_regularized_pencil(pencil):
    A = pencil[0]
    B = np.diag(np.r_[np.zeros(5), np.ones(N - 5)])
    res = eigensolve(A, 3, B=B, reg=1e-3, solver="dense")
    np.testing.assert_allclose(res.values, sla.eigh(A, B + 1e-3 * np.eye(N), eigvals_only=True)[:3], atol=1e-10)


def test_reduce_B_is_ck08_pca_reduction():
    # linear form of CK08 (eq. 7) with more features (d0=40) than samples (n=12): X W X^T and
    # X C X^T are singular; the reduction to range(X) (PCA) gives an exact, B-orthonormal solution
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 12))  # (d0, n), columns are samples as in the paper
    Wg = rng.random((12, 12))
    Wg = (Wg + Wg.T) / 2
    Cg = np.diag(Wg.sum(1)) - Wg + 0.1 * np.eye(12)
    A, B = X @ Wg @ X.T, X @ Cg @ X.T
    with pytest.raises(NotPositiveDefiniteError):
        eigensolve(A, 2, B=B, solver="dense")
    res = eigensolve(A, 2, B=B, reduce_B=True, which="largest")
    # independent reference: PCA basis P of the data, then eigh on the projected pencil
    P = np.linalg.svd(X, full_matrices=False)[0]
    ref = sla.eigh(P.T @ A @ P, P.T @ B @ P, eigvals_only=True)[::-1][:2]
    np.testing.assert_allclose(res.values, ref, rtol=1e-8)
    np.testing.assert_allclose(res.vectors.T @ B @ res.vectors, np.eye(2), atol=1e-8)
    assert res.converged and res.info["reduced_dimension"] == 12


def test_reduce_B_needs_dense(pencil):
    A, B, _ = pencil
    with pytest.raises(ParameterError, match="reduce_B=True solves the reduced problem densely"):
        eigensolve(A, 2, B=B, reduce_B=True, solver="lobpcg")


def test_reg_without_B_refused():
    with pytest.raises(ParameterError, match="generalized problems only"):
        eigensolve(np.eye(5), 2, reg=1e-3)
