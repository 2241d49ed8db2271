"""distance_drift and knn_preservation against hand-computed figures and brute-force neighbour sets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from eigenflow.spectral.drift import distance_drift, knn_preservation
from eigenflow.spectral.errors import InputDataError, ParameterError

K = 10


@pytest.fixture(scope="module")
def fitted():
    """A Gaussian sample and each row's distance to its K-th nearest other row (the row itself excluded)."""
    X = np.random.default_rng(0).standard_normal((2000, 5))
    dist, idx = NearestNeighbors(n_neighbors=K + 1).fit(X).kneighbors(X)
    assert np.all(idx[:, 0] == np.arange(X.shape[0]))  # no duplicates: column 0 is the row itself
    return X, dist[:, K]


def _new_kth(X_fit, X_new):
    return NearestNeighbors(n_neighbors=K).fit(X_fit).kneighbors(X_new)[0][:, K - 1]


def test_figures_match_a_hand_computation():
    fitted_kth = np.arange(1.0, 101.0)  # quantile 0.9 at position 0.9 * 99 = 89.1: 90 + 0.1 = 90.1
    figures = distance_drift([1.0, 95.0, 200.0], fitted_kth, quantile=0.9)
    assert figures["threshold"] == pytest.approx(90.1)
    assert figures["share_beyond"] == pytest.approx(2 / 3)
    assert figures["expected_share"] == pytest.approx(0.1)
    assert figures["median_ratio"] == pytest.approx(95.0 / 50.5)
    assert figures["n_new"] == 3 and figures["quantile"] == 0.9
    assert json.loads(json.dumps(figures)) == figures
    assert {type(v) for v in figures.values()} <= {float, int}


def test_a_batch_from_the_fitted_distribution_is_not_flagged(fitted):
    X, fitted_kth = fitted
    X_new = np.random.default_rng(1).standard_normal((2000, 5))
    figures = distance_drift(_new_kth(X, X_new), fitted_kth)
    assert figures["share_beyond"] < 0.05
    assert figures["expected_share"] == pytest.approx(0.01)
    assert 0.95 < figures["median_ratio"] < 1.05
    # counting each fitted row as its own first neighbour shortens the fitted distances: the ratio reads high
    self_counted = NearestNeighbors(n_neighbors=K).fit(X).kneighbors(X)[0][:, K - 1]
    assert distance_drift(_new_kth(X, X_new), self_counted)["median_ratio"] > figures["median_ratio"]


def test_a_shifted_batch_is_beyond_the_threshold(fitted):
    X, fitted_kth = fitted
    X_new = np.random.default_rng(2).standard_normal((2000, 5)) + 5.0
    figures = distance_drift(_new_kth(X, X_new), fitted_kth)
    assert figures["share_beyond"] > 0.9
    assert figures["median_ratio"] > 2.0


def test_median_ratio_is_none_when_most_fitted_rows_are_duplicates():
    assert distance_drift([1.0, 2.0], [0.0, 0.0, 0.0, 1.0])["median_ratio"] is None


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.5, 1.5, float("nan"), "high", True])
def test_quantile_outside_the_open_interval_is_refused(quantile):
    with pytest.raises(ParameterError, match=r"quantile must be a real number in \(0.0, 1.0\)"):
        distance_drift([1.0], [1.0], quantile=quantile)


@pytest.mark.parametrize("new, fit, match", [
    ([], [1.0], r"new_kth must be a non-empty 1-D array of distances; got shape \(0,\)"),
    ([1.0], [], r"fitted_kth must be a non-empty 1-D array of distances; got shape \(0,\)"),
    ([[1.0, 2.0]], [1.0], r"new_kth .*got shape \(1, 2\)"),
    ([1.0, np.nan], [1.0], "new_kth must hold finite distances >= 0; got nan at index 1"),
    ([1.0], [np.inf, 1.0], "fitted_kth must hold finite distances >= 0; got inf at index 0"),
    ([-1.0], [1.0], "new_kth must hold finite distances >= 0; got -1.0 at index 0"),
    (["far"], [1.0], "new_kth must be a 1-D array of distances"),
])
def test_invalid_distances_are_refused(new, fit, match):
    with pytest.raises(InputDataError, match=match):
        distance_drift(new, fit)


@pytest.fixture(scope="module")
def high_dim():
    rng = np.random.default_rng(3)
    return rng.standard_normal((1000, 20)), rng.standard_normal((200, 20))


def test_identity_map_preserves_every_neighbourhood(high_dim):
    X_ref, X_new = high_dim
    assert knn_preservation(X_new, X_ref, X_new, X_ref, n_neighbors=K) == 1.0


def test_random_projection_loses_most_neighbourhoods(high_dim):
    X_ref, X_new = high_dim
    P = np.random.default_rng(4).standard_normal((20, 2))
    value = knn_preservation(X_new, X_ref, X_new @ P, X_ref @ P, n_neighbors=K)
    assert value < 0.3


def test_matches_brute_force_neighbour_sets(high_dim):
    X_ref, X_new = high_dim[0][:300], high_dim[1][:50]
    P = np.random.default_rng(5).standard_normal((20, 3))
    Z_ref, Z_new = X_ref @ P, X_new @ P

    def nearest(A, B):
        d = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)
        return np.argsort(d, axis=1)[:, :K]

    near_x, near_z = nearest(X_new, X_ref), nearest(Z_new, Z_ref)
    expected = np.mean([len(set(a) & set(b)) / K for a, b in zip(near_x, near_z)])
    assert knn_preservation(X_new, X_ref, Z_new, Z_ref, n_neighbors=K) == pytest.approx(expected)
    assert 0.0 < expected < 1.0


def test_invalid_knn_preservation_inputs_are_refused(high_dim):
    X_ref, X_new = high_dim[0][:30], high_dim[1][:5]
    Z_ref, Z_new = X_ref[:, :2], X_new[:, :2]
    with pytest.raises(ParameterError, match=r"n_neighbors must be an integer in \[1, 30\]; got 31"):
        knn_preservation(X_new, X_ref, Z_new, Z_ref, n_neighbors=31)
    with pytest.raises(ParameterError, match=r"n_neighbors must be an integer in \[1, 30\]; got 0"):
        knn_preservation(X_new, X_ref, Z_new, Z_ref, n_neighbors=0)
    assert 0.0 <= knn_preservation(X_new, X_ref, Z_new, Z_ref, n_neighbors=30) <= 1.0
    with pytest.raises(InputDataError, match=r"X_new \(5, 20\), X_ref \(30, 19\)"):
        knn_preservation(X_new, X_ref[:, 1:], Z_new, Z_ref)
    with pytest.raises(InputDataError, match=r"Z_new \(5, 2\), Z_ref \(30, 3\)"):
        knn_preservation(X_new, X_ref, Z_new, X_ref[:, :3])
    with pytest.raises(InputDataError, match=r"Z_new \(4, 2\)"):
        knn_preservation(X_new, X_ref, Z_new[:4], Z_ref, n_neighbors=3)
    with pytest.raises(InputDataError, match=r"Z_ref \(29, 2\)"):
        knn_preservation(X_new, X_ref, Z_new, Z_ref[:29], n_neighbors=3)
    with pytest.raises(InputDataError, match="X_new contains NaN"):
        knn_preservation(np.full((5, 20), np.nan), X_ref, Z_new, Z_ref)
    with pytest.raises(InputDataError, match="Z_ref"):
        knn_preservation(X_new, X_ref, Z_new, Z_ref[:, 0])

