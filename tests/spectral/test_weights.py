"""kNN weights against hand computations, symmetrizations, duplicates, out-of-sample rows."""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.graph.laplacian import laplacian
from eigenflow.spectral.graph.weights import fit_weight_params, knn_weights, query_weights

# Five points on a line, k = 2, no distance ties (worked out by hand):
#   x = 0, 1, 3, 7, 12 ; kNN: 0->{1 (1), 2 (3)}, 1->{0 (1), 2 (2)}, 2->{1 (2), 0 (3)},
#   3->{2 (4), 4 (5)}, 4->{3 (5), 2 (9)} ; k-th-neighbour distances sigma = 3, 2, 3, 5, 9.
LINE = np.array([[0.0], [1.0], [3.0], [7.0], [12.0]])
MUTUAL = [(0, 1), (0, 2), (1, 2), (3, 4)]  # both directions present
ONE_WAY = [(2, 3), (2, 4)]  # 3->2 and 4->2 only
D2 = {(0, 1): 1.0, (0, 2): 9.0, (1, 2): 4.0, (2, 3): 16.0, (3, 4): 25.0, (2, 4): 81.0}
SIGMA = [3.0, 2.0, 3.0, 5.0, 9.0]
HEAT_SIGMA = 3.5  # mean of the ten kNN distances 1,3,1,2,2,3,4,5,5,9


def _expected(kernel):
    return {e: kernel(D2[e], SIGMA[e[0]], SIGMA[e[1]]) for e in D2}


HAND = {
    "local_scaling": _expected(lambda d2, a, b: np.exp(-d2 / (a * b))),  # exp(-1/6), exp(-1), ...
    "hein_maier": _expected(lambda d2, a, b: np.exp(-d2 / max(a, b) ** 2)),  # exp(-1/9), exp(-1), ...
    "heat": _expected(lambda d2, a, b: np.exp(-d2 / HEAT_SIGMA**2)),
    "binary": _expected(lambda d2, a, b: 1.0),
}


@pytest.mark.parametrize("weighting", sorted(HAND))
@pytest.mark.parametrize("symmetrize", ["or", "and", "mean"])
def test_weights_match_hand_computation(weighting, symmetrize):
    idx, dist = knn_graph(LINE, 2, method="exact")
    W = knn_weights(idx, dist, weighting=weighting, symmetrize=symmetrize).toarray()
    expected = np.zeros((5, 5))
    for (i, j), w in HAND[weighting].items():
        one_way = (i, j) in ONE_WAY
        if symmetrize == "and" and one_way:
            continue
        expected[i, j] = expected[j, i] = 0.5 * w if (symmetrize == "mean" and one_way) else w
    np.testing.assert_allclose(W, expected, rtol=1e-12, atol=0)
    assert HAND["local_scaling"][(0, 1)] == pytest.approx(np.exp(-1 / 6))


def test_heat_explicit_sigma_and_scale_k():
    idx, dist = knn_graph(LINE, 2, method="exact")
    W = knn_weights(idx, dist, weighting="heat", sigma=2.0).toarray()
    assert W[0, 2] == pytest.approx(np.exp(-9 / 4))
    W1 = knn_weights(idx, dist, weighting="local_scaling", scale_k=1).toarray()
    # sigma_i = distance to the 1st neighbour: 1, 1, 2, 4, 5
    assert W1[3, 4] == pytest.approx(np.exp(-25 / 20))


def test_duplicates_and_underflow_give_no_nan():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    X[:8] = X[0]  # 8 copies: sigma_i = 0 for k = 3, floored
    idx, dist = knn_graph(X, 3, method="exact")
    for weighting in ("local_scaling", "hein_maier", "heat", "binary"):
        W = knn_weights(idx, dist, weighting=weighting)
        assert np.all(np.isfinite(W.data)) and W.data.min() > 0 and W.data.max() <= 1.0
        assert W[0, idx[0, 0]] == 1.0  # a duplicate has weight 1
        assert abs(W - W.T).max() == 0 and W.diagonal().max() == 0
    params, scales, _ = fit_weight_params(dist, weighting="local_scaling")
    assert params.floor == dist[dist > 0].min() and np.all(scales >= params.floor)
    # a tiny heat bandwidth underflows every weight: isolated nodes, still finite Laplacians
    W = knn_weights(idx, dist, weighting="heat", sigma=1e-6)
    for norm in ("unnormalized", "symmetric", "random_walk"):
        L, deg = laplacian(W, norm)
        assert np.all(np.isfinite(L.data)) and np.all(np.isfinite(deg))


def test_all_identical_points():
    idx, dist = knn_graph(np.ones((6, 3)), 2, method="exact")
    W = knn_weights(idx, dist, weighting="local_scaling")
    assert np.all(W.data == 1.0)
    params, _, _ = fit_weight_params(dist, weighting="heat")
    assert params.floor == 1.0 and params.sigma == 1.0


@pytest.mark.parametrize("symmetrize", ["or", "and", "mean"])
@pytest.mark.parametrize("weighting", ["local_scaling", "heat", "hein_maier"])
def test_query_rows_of_training_points_equal_training_rows(symmetrize, weighting):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    k = 6
    idx, dist = knn_graph(X, k, method="exact")
    W = knn_weights(idx, dist, weighting=weighting, symmetrize=symmetrize)
    params, scales, radii = fit_weight_params(dist, weighting=weighting, symmetrize=symmetrize)
    cidx, cdist_ = knn_graph(X, 3 * k, method="exact")  # candidates: 3k neighbours, self excluded
    Wq = query_weights(cidx, cdist_, params, scales, radii)
    # rows whose reverse neighbours all lie among their 3k candidates are reproduced exactly
    A = np.zeros((300, 300), dtype=bool)
    A[np.repeat(np.arange(300), k), idx.ravel()] = True
    covered = [i for i in range(300) if set(np.flatnonzero(A[:, i])) <= set(cidx[i])]
    assert len(covered) > 200  # 231 of 300 here: the rest have a reverse neighbour beyond 3k
    np.testing.assert_allclose(Wq[covered].toarray(), W[covered].toarray(), rtol=1e-12, atol=0)


def test_query_log_scale_keeps_far_points_finite():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(100, 2))
    idx, dist = knn_graph(X, 5, method="exact")
    params, scales, radii = fit_weight_params(dist, weighting="heat")
    far = np.array([[1e3, 1e3]])
    d = np.linalg.norm(X - far, axis=1)
    order = np.argsort(d)[:15]
    cand_i, cand_d = order[None, :], d[order][None, :]
    plain = query_weights(cand_i, cand_d, params, scales, radii)
    assert plain.nnz == 0  # every weight underflows
    scaled, shift = query_weights(cand_i, cand_d, params, scales, radii, return_log_scale=True)
    assert scaled.max() == 1.0 and np.isfinite(shift).all() and shift[0] < -700


def test_bad_inputs():
    idx, dist = knn_graph(LINE, 2, method="exact")
    with pytest.raises(ParameterError, match=r"weighting must be one of .*'gauss'"):
        knn_weights(idx, dist, weighting="gauss")
    with pytest.raises(ParameterError, match=r"symmetrize must be one of .*'xor'"):
        knn_weights(idx, dist, symmetrize="xor")
    with pytest.raises(ParameterError, match=r"sigma must be a real number in \(0.0, inf\); got -1.0"):
        knn_weights(idx, dist, weighting="heat", sigma=-1.0)
    with pytest.raises(ParameterError, match=r"scale_k must be an integer in \[1, 2\]; got 3"):
        knn_weights(idx, dist, scale_k=3)
    with pytest.raises(InputDataError, match="same shape"):
        knn_weights(idx, dist[:, :1])
    with pytest.raises(InputDataError, match="self-neighbours"):
        knn_weights(np.array([[0], [0]]), np.array([[1.0], [1.0]]))
    with pytest.raises(InputDataError, match=r"indices must lie in \[0, 4\]"):
        knn_weights(idx + 1, dist)
    with pytest.raises(InputDataError, match="finite and >= 0"):
        knn_weights(idx, -dist)


def _scipy_weights(idx, dist, weighting, symmetrize, sigma=None, scale_k=None):
    """W as scipy and numpy compute it: the directed rows through a COO matrix (repeated columns added), then
    ``A.maximum(A.T)`` / ``A.minimum(A.T)`` / ``(A + A.T) / 2``, diagonal and zeros dropped."""
    import scipy.sparse as sp

    from eigenflow.spectral.graph.weights import _exponent

    params, scales, _ = fit_weight_params(dist, weighting=weighting, symmetrize=symmetrize, sigma=sigma,
                                          scale_k=scale_k)
    n, k = idx.shape
    values = np.exp(_exponent(np.asarray(dist, dtype=np.float64), scales[:, None], scales[idx], params))
    A = sp.coo_matrix((values.ravel(), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n)).tocsr()
    A.sum_duplicates()
    W = {"or": A.maximum(A.T), "and": A.minimum(A.T), "mean": (A + A.T) * 0.5}[symmetrize].tocsr()
    W.setdiag(0)
    W.eliminate_zeros()
    W.sort_indices()
    return W


@pytest.mark.parametrize("symmetrize", ["or", "and", "mean"])
@pytest.mark.parametrize("weighting", ["local_scaling", "heat", "binary", "hein_maier"])
def test_compiled_weights_equal_scipy_bit_for_bit(weighting, symmetrize):
    """The compiled directed rows and symmetrization give scipy's matrix exactly: same structure, same bits
    (exact copies, zero distances and underflowing far neighbours included)."""
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(size=(300, 3)), np.zeros((4, 3)), rng.normal(size=(40, 3)) * 50.0])
    idx, dist = knn_graph(X, 7, method="exact")
    got = knn_weights(idx, dist, weighting=weighting, symmetrize=symmetrize)
    want = _scipy_weights(idx, dist, weighting, symmetrize)
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)
    assert got.has_sorted_indices and (got != got.T).nnz == 0


@pytest.mark.parametrize("dist_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("weighting", ["local_scaling", "heat", "hein_maier"])
def test_compiled_weights_both_paths_and_dtypes(weighting, repeat, dist_dtype):
    """float32 distances (read without a float64 copy) and float64 ones, a graph whose rows never repeat a column
    (the one-pass kernel) and one that lists a column twice (the general path, repeats added): scipy's bits."""
    rng = np.random.default_rng(5)
    idx, dist = knn_graph(rng.normal(size=(200, 4)), 6, method="exact")
    dist = dist.astype(dist_dtype)
    if repeat:
        idx = idx.copy()
        idx[[3, 50], 4] = idx[[3, 50], 2]
    got = knn_weights(idx, dist, weighting=weighting)
    want = _scipy_weights(idx, dist, weighting, "or")
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)
    from eigenflow.spectral.graph._weight_kernels import directed_csr

    ones = np.ones(idx.shape[0])
    indptr, _, _ = directed_csr(idx, dist, ones, ones, "heat", 1.0, np.int32)
    lengths = np.diff(indptr)  # a repeated column is one entry: rows 3 and 50 are one shorter
    assert lengths.tolist() == [5 if repeat and row in (3, 50) else 6 for row in range(idx.shape[0])]


def test_float32_distances_give_float64_scales_and_radii():
    """fit_weight_params reads float32 distances as they are; its scales and radii are float64, the same values."""
    rng = np.random.default_rng(6)
    _, dist = knn_graph(rng.normal(size=(100, 3)), 5, method="exact")
    params32, scales32, radii32 = fit_weight_params(dist, weighting="local_scaling")
    params64, scales64, radii64 = fit_weight_params(dist.astype(np.float64), weighting="local_scaling")
    assert scales32.dtype == radii32.dtype == np.float64
    assert np.array_equal(scales32, scales64) and np.array_equal(radii32, radii64)
    assert params32 == params64
