"""Nystrom landmarks, feature map and one-shot eigendecomposition against exact kernels."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.operators.kernels import make_kernel, pairwise_kernel
from eigenflow.spectral.operators.nystrom_features import NystromFeatures, nystrom_eigh, ridge_leverage_scores, select_landmarks

N = 300


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(0)
    return np.vstack([rng.normal(c, 0.5, size=(N // 3, 3)) for c in (-2.0, 0.0, 2.0)])


def test_all_points_as_landmarks_is_exact(X):
    K = pairwise_kernel(X, kernel="rbf", gamma=0.5)
    Phi = NystromFeatures("rbf", N, gamma=0.5, random_state=0).fit_transform(X)
    np.testing.assert_allclose(Phi @ Phi.T, K, atol=1e-7)


def test_error_decreases_with_landmarks(X):
    # relative Frobenius error ||K - Phi Phi^T|| / ||K||, mean over 3 seeds (uniform landmarks)
    K = pairwise_kernel(X, kernel="rbf", gamma=0.5)
    errors = []
    for m in (10, 40, 160):
        errs = [np.linalg.norm(K - (P := NystromFeatures("rbf", m, gamma=0.5, random_state=s).fit_transform(X)) @ P.T)
                for s in range(3)]
        errors.append(np.mean(errs) / np.linalg.norm(K))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.05


@pytest.mark.parametrize("method", ["uniform", "kmeans++", "kmeans", "rls"])
def test_landmark_methods_seeded(X, method):
    L1, idx1 = select_landmarks(X, 12, method=method, kernel=make_kernel("rbf", gamma=0.5), random_state=3)
    L2, idx2 = select_landmarks(X, 12, method=method, kernel=make_kernel("rbf", gamma=0.5), random_state=3)
    assert L1.shape == (12, 3)
    np.testing.assert_array_equal(L1, L2)
    if method == "kmeans":
        assert idx1 is None
    else:
        assert len(np.unique(idx1)) == 12
        np.testing.assert_array_equal(L1, X[idx1])


def test_ridge_leverage_scores_favour_isolated_points():
    # 200 points in a tight blob plus 3 isolated points: the isolated ones get the top scores
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 0.3, (200, 2)), [[8.0, 8.0], [-8.0, 8.0], [8.0, -8.0]]])
    scores = ridge_leverage_scores(X, 10, make_kernel("rbf", gamma=1.0), np.random.default_rng(0))
    assert set(np.argsort(scores)[-3:]) == {200, 201, 202}
    assert scores[200:].min() > 1.5 * np.median(scores[:200])


def test_dask_transform_equals_numpy(X):
    f = NystromFeatures("laplacian", 30, gamma=0.3, random_state=0, chunk_rows=64).fit(X)
    Pd = f.transform(da.from_array(X, chunks=(70, 3)))
    assert isinstance(Pd, da.Array)
    np.testing.assert_allclose(Pd.compute(), f.transform(X), atol=1e-12)


def test_state_round_trip(X):
    f = NystromFeatures("poly", 25, degree=3, coef0=1.0, method="kmeans++", random_state=0).fit(X)
    arrays, attrs = f.to_state()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    g = NystromFeatures.from_state(arrays, attrs)
    np.testing.assert_allclose(g.transform(X[:20]), f.transform(X[:20]))
    with pytest.raises(InputDataError, match="callable kernel cannot be stored"):
        NystromFeatures(lambda A, B: A @ B.T, 5, random_state=0).fit(X).to_state()


def test_normalized_one_shot_matches_dense(X):
    K = pairwise_kernel(X, kernel="rbf", gamma=0.5)
    d = K.sum(axis=1)
    w, U = sla.eigh(K / np.sqrt(np.outer(d, d)))
    f = NystromFeatures("rbf", N, gamma=0.5, random_state=0).fit(X)
    values, V, degrees = nystrom_eigh(X, 4, f, normalized=True, chunk_rows=64)
    np.testing.assert_allclose(values, w[::-1][:4], atol=1e-8)
    np.testing.assert_allclose(degrees, d, rtol=1e-8)
    assert abs(values[0] - 1.0) < 1e-8  # top eigenvector ~ sqrt(d), eigenvalue 1 (Fowlkes et al.)
    assert np.max(sla.subspace_angles(V, U[:, ::-1][:, :4])) < 1e-6


def test_non_psd_kernel_refused(X):
    with pytest.raises(InputDataError, match="no positive eigenvalue"):
        NystromFeatures(lambda A, B: -pairwise_kernel(A, B), 10, random_state=0).fit(X)


def test_bad_parameters(X):
    with pytest.raises(ParameterError, match=r"n_landmarks must be an integer in \[1, 300\]; got 301"):
        NystromFeatures("rbf", N + 1).fit(X)
    with pytest.raises(ParameterError, match=r"method must be one of"):
        NystromFeatures("rbf", 5, method="random").fit(X)
    with pytest.raises(ParameterError, match="not fitted"):
        NystromFeatures().transform(X)


def test_rank_keeps_the_leading_eigenpairs_and_is_stored():
    """``rank=r`` equals the full map's r leading columns (what GraphKPCA's nystrom_rank asks for)."""
    X = np.random.default_rng(5).standard_normal((120, 4))
    full = NystromFeatures("rbf", 40, gamma=0.3, random_state=0).fit(X)
    cut = NystromFeatures("rbf", 40, gamma=0.3, rank=7, random_state=0).fit(X)
    assert cut.n_components_ == 7
    np.testing.assert_array_equal(cut.eigenvalues_, full.eigenvalues_[:7])
    np.testing.assert_allclose(cut.transform(X), full.transform(X)[:, :7], atol=1e-12)
    back = NystromFeatures.from_state(*cut.to_state())
    assert back.rank == 7
    np.testing.assert_array_equal(back.transform(X), cut.transform(X))
    with pytest.raises(ParameterError, match=r"rank must be an integer in \[1, 40\]; got 41"):
        NystromFeatures("rbf", 40, rank=41).fit(X)


def test_non_psd_kernels_have_no_nystrom_map():
    from eigenflow.spectral.errors import NotPositiveDefiniteError

    X = np.random.default_rng(6).standard_normal((60, 3))
    with pytest.raises(ParameterError, match="kernel must be one of .*got 'sigmoid'"):
        NystromFeatures("sigmoid", 10).fit(X)
    with pytest.raises(NotPositiveDefiniteError, match="negative eigenvalue"):
        NystromFeatures(lambda A, B: -np.abs(A @ B.T) + 0.1, 20, random_state=0).fit(X)
