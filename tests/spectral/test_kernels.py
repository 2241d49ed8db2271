"""Kernels against scikit-learn's pairwise kernels; parameter validation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import pairwise

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.operators.kernels import kernel_diagonal, make_kernel, pairwise_kernel

rng = np.random.default_rng(0)
X, Y = rng.standard_normal((30, 4)), rng.standard_normal((20, 4))


@pytest.mark.parametrize("name,ref", [
    ("linear", lambda A, B: pairwise.linear_kernel(A, B)),
    ("poly", lambda A, B: pairwise.polynomial_kernel(A, B, degree=3, gamma=0.5, coef0=2.0)),
    ("rbf", lambda A, B: pairwise.rbf_kernel(A, B, gamma=0.5)),
    ("laplacian", lambda A, B: pairwise.laplacian_kernel(A, B, gamma=0.5)),
    ("cosine", lambda A, B: pairwise.cosine_similarity(A, B)),
])
def test_named_kernels_match_sklearn(name, ref):
    K = pairwise_kernel(X, Y, name, gamma=0.5, degree=3, coef0=2.0)
    np.testing.assert_allclose(K, ref(X, Y), atol=1e-12)
    np.testing.assert_allclose(kernel_diagonal(make_kernel(name, gamma=0.5, degree=3, coef0=2.0), X),
                               np.diag(pairwise_kernel(X, None, name, gamma=0.5, degree=3, coef0=2.0)), atol=1e-12)


def test_default_gamma_is_one_over_d():
    np.testing.assert_allclose(pairwise_kernel(X, Y, "rbf"), pairwise.rbf_kernel(X, Y, gamma=0.25))


def test_callable_kernel_and_its_checks():
    K = pairwise_kernel(X, Y, lambda A, B, s: s * A @ B.T, kernel_params={"s": 2.0})
    np.testing.assert_allclose(K, 2.0 * X @ Y.T)
    with pytest.raises(InputDataError, match=r"must return a finite \(30, 20\) array"):
        pairwise_kernel(X, Y, lambda A, B: np.ones((2, 2)))


@pytest.mark.parametrize("kwargs,match", [
    ({"kernel": "chi2"}, r"kernel must be one of .*got 'chi2'"),
    ({"gamma": 0.0}, r"gamma must be a real number in \(0.0, inf\); got 0.0"),
    ({"kernel": "poly", "degree": 0}, r"degree must be an integer in \[1, inf\); got 0"),
    ({"kernel": "poly", "coef0": -1.0}, r"coef0 must be a real number in \[0.0, inf\); got -1.0"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        pairwise_kernel(X, Y, **kwargs)


def test_feature_mismatch():
    with pytest.raises(InputDataError, match="same number of features"):
        pairwise_kernel(X, Y[:, :3])


@pytest.mark.parametrize("name", ["linear", "poly", "rbf", "laplacian", "cosine", "sigmoid"])
def test_defaults_are_scikit_learns(name):
    """Every named kernel, with no parameters, is scikit-learn's pairwise_kernels with its defaults
    ("poly" = degree 3, coef0 1, gamma 1/d: one meaning in the whole package)."""
    np.testing.assert_allclose(pairwise_kernel(X, Y, name), pairwise.pairwise_kernels(X, Y, metric=name),
                               rtol=1e-12, atol=1e-12)


def test_kernel_from_params_and_centering_match_scikit_learn():
    from sklearn.preprocessing import KernelCenterer

    from eigenflow.spectral.operators.kernels import center_gram, center_rows, kernel_from_params

    k = kernel_from_params("poly", {"degree": 2, "gamma": 1.0, "coef0": 0.0})
    np.testing.assert_allclose(k(X, Y), (X @ Y.T) ** 2, rtol=1e-12)  # CK08's <x, x'>^2
    K = k(X, X)
    centerer = KernelCenterer().fit(K)
    Kc, col, tot = center_gram(K)
    np.testing.assert_allclose(Kc, centerer.transform(K), atol=1e-10)
    np.testing.assert_allclose(center_rows(k(Y, X), col, tot), centerer.transform(k(Y, X)), atol=1e-10)
    with pytest.raises(ParameterError, match=r"kernel_params of a named kernel must be among .*got \['sigma'\]"):
        kernel_from_params("rbf", {"sigma": 1.0})
    with pytest.raises(ParameterError, match="kernel must be one of .*got 'sigmoid'"):
        kernel_from_params("sigmoid", None, psd=True)
