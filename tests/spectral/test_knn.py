"""kNN graphs and KNNIndex: brute-force oracle (scipy cdist), duplicates, both methods' shared contract."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from tests.helpers import load_dataset
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.index import EXACT_MAX_SAMPLES, KNNIndex
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.metrics import knn_recall


def _blobs(n=300, d=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) + 4.0 * rng.integers(0, 3, size=(n, 1))


def check_contract(X, indices, distances, k):
    """The contract shared by every method: shapes, dtypes, no self, sorted, true distances."""
    n = X.shape[0]
    assert indices.shape == (n, k) and distances.shape == (n, k)
    assert indices.dtype == np.int64 and distances.dtype == np.float32
    assert not np.any(indices == np.arange(n)[:, None])
    assert np.all(np.diff(distances, axis=1) >= 0)
    assert all(np.unique(row).size == k for row in indices)
    true = np.linalg.norm(X[:, None, :] - X[indices], axis=2)
    np.testing.assert_allclose(distances, true, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_exact_equals_brute_force(metric):
    X = _blobs()
    k = 7
    indices, distances = knn_graph(X, k, method="exact", metric=metric)
    D = cdist(X, X, metric={"manhattan": "cityblock"}.get(metric, metric))
    np.fill_diagonal(D, np.inf)
    ref = np.argsort(D, axis=1, kind="stable")[:, :k]
    assert knn_recall(indices, ref) == 1.0
    np.testing.assert_allclose(distances, np.take_along_axis(D, ref, axis=1), rtol=1e-6, atol=1e-7)
    if metric == "euclidean":
        check_contract(X, indices, distances, k)


def test_duplicates_drop_the_point_itself_not_a_twin():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    X[10:16] = X[10]  # 6 copies of one point: more than k + 1 = 4, so the point may miss its own list
    X[30:32] = X[30]  # a pair of twins
    indices, distances = knn_graph(X, 3, method="exact")
    check_contract(X, indices, distances, 3)
    for i in range(10, 16):
        assert set(indices[i]) <= set(range(10, 16)) - {i}
        assert np.all(distances[i] == 0.0)
    assert indices[30, 0] == 31 and indices[31, 0] == 30
    assert distances[30, 0] == 0.0 and distances[31, 0] == 0.0


def test_exact_query_contract_and_identity_at_distance_zero():
    X = _blobs(200)
    X_new = _blobs(40, seed=5)
    index = KNNIndex.build(X, 6, method="exact")
    idx, dist = index.query(X_new, 9)
    D = cdist(X_new, X)
    ref = np.argsort(D, axis=1, kind="stable")[:, :9]
    assert idx.dtype == np.int64 and dist.dtype == np.float32 and idx.shape == (40, 9)
    assert knn_recall(idx, ref) == 1.0
    idx_train, dist_train = index.query(X[:20], 4)
    assert np.array_equal(idx_train[:, 0], np.arange(20)) and np.all(dist_train[:, 0] == 0.0)


def test_index_pickles_and_rebuilds_from_params():
    X = _blobs(150)
    index = KNNIndex.build(X, 5, method="exact", random_state=3)
    clone = pickle.loads(pickle.dumps(index))
    rebuilt = KNNIndex.rebuild(X, index.params)
    q = _blobs(10, seed=9)
    for other in (clone, rebuilt):
        for a, b in zip(index.query(q, 5), other.query(q, 5)):
            np.testing.assert_array_equal(a, b)
    assert rebuilt.params == index.params and index.params["method"] == "exact"


@pytest.mark.parametrize("metric", ["euclidean", "cosine", pytest.param("manhattan", marks=pytest.mark.slow)])
def test_nndescent_queries_search_in_parallel_with_the_serial_answers(metric):
    """The index's queries run pynndescent's parallel search over numba's threads (euclidean, cosine; manhattan
    searches serially); their answers are those of pynndescent's serial search of the same index (built with the
    same seed on one thread; the random state, shared between the threads, drives only tie-breaks and leaves
    smaller than k), and a second call gives the same."""
    from eigenflow.spectral.neighbours.index import NNDESCENT_QUERY_EPSILON
    from eigenflow.spectral.neighbours.nndescent_kernels import CachedNNDescent  # pynndescent's NNDescent

    X, Q = _blobs(3000, d=8).astype(np.float32), _blobs(2500, d=8, seed=11).astype(np.float32)
    index = KNNIndex.build(X, 10, method="nndescent", metric=metric, random_state=0, n_jobs=1)
    found, again = index.query(Q, 30)[0], index.query(Q, 30)[0]
    serial = CachedNNDescent(X, metric=metric, n_neighbors=11, random_state=index.seed, n_jobs=1, compressed=False,
                             parallel_batch_queries=False)
    expected = serial.query(Q, k=30, epsilon=NNDESCENT_QUERY_EPSILON)[0]
    np.testing.assert_array_equal(found, again)
    np.testing.assert_array_equal(np.sort(found, axis=1), np.sort(expected, axis=1))


def test_an_index_reports_the_bytes_of_its_arrays():
    """``sys.getsizeof`` (what Dask weighs before moving an index between workers) counts X once (scikit-learn's
    index holds the same array) and the graph."""
    X = _blobs(500, d=16)
    index = KNNIndex.build(X, 7, method="exact")
    graph = sum(a.nbytes for a in index.neighbor_graph())
    assert X.nbytes + graph <= sys.getsizeof(index) < X.nbytes + graph + 10_000


def test_auto_threshold_picks_exact_below():
    X = _blobs(100)
    assert KNNIndex.build(X, 5, method="auto").method == "exact"
    assert EXACT_MAX_SAMPLES > 100


def test_auto_rule_bounds_points_and_values():
    """'auto' is exact below EXACT_MAX_SAMPLES points and EXACT_MAX_CELLS values of X (n * d), NN-descent above
    either: the measured crossovers (1e6 points at d = 32, ~2.5e5 at d = 128)."""
    from eigenflow.spectral.neighbours.index import EXACT_MAX_CELLS, auto_method

    assert auto_method(EXACT_MAX_SAMPLES - 1, 8) == "exact"
    assert auto_method(EXACT_MAX_SAMPLES, 8) == "nndescent"
    assert auto_method(100_000, 128) == "exact" and auto_method(300_000, 128) == "nndescent"
    assert auto_method(EXACT_MAX_CELLS // 64 - 1, 64) == "exact"
    assert auto_method(EXACT_MAX_CELLS // 64, 64) == "nndescent"
    assert auto_method(30_000, 16) == "exact" and auto_method(999_999, 32) == "exact"


def test_nndescent_small_graph_contract(cluster):
    """The default test of pynndescent's graph, on a worker of the module's cluster (which loads the kernels from
    the compiled-code cache), as the flows run it."""
    from distributed import Client

    X = _blobs(600, d=8).astype(np.float32)
    X[100:103] = X[100]  # duplicates: the point itself is dropped, twins stay at distance 0
    exact, _ = knn_graph(X, 10, method="exact")
    with Client(cluster) as client:
        indices, distances = client.submit(knn_graph, X, 10, method="nndescent", random_state=0, n_jobs=1).result()
    check_contract(X.astype(np.float64), indices, distances, 10)
    assert knn_recall(indices, exact) >= 0.95
    assert set(indices[100, :2]) == {101, 102} and np.all(distances[100, :2] == 0.0)


@pytest.mark.parametrize(("method", "x_dtype"), [("exact", np.float64), ("nndescent", np.float64),
                                                 ("nndescent", np.float32)])
def test_points_are_the_training_rows(method, x_dtype):
    """``KNNIndex.points(rows)`` equals ``X[rows]`` (values and dtype) before and after ``prepare``, also when the
    prepared index keeps only pynndescent's reordered copy of the points (float32 X)."""
    X = _blobs(500, d=6).astype(x_dtype)
    rows = np.array([499, 0, 17, 17, 250])
    index = KNNIndex.build(X, 5, method=method, random_state=0, n_jobs=1)
    for state in (index, index.prepare()):
        got = state.points(rows)
        assert got.dtype == X.dtype
        np.testing.assert_array_equal(got, X[rows])
    if method == "nndescent" and x_dtype == np.float32:
        assert index._X is None  # read through the index's own copy


@pytest.mark.parametrize("x_dtype", [np.float64, np.float32])
def test_nndescent_query_by_blocks_equals_one_call(monkeypatch, x_dtype):
    """An NN-descent query converts ``QUERY_BLOCK_ROWS`` rows at a time: the same answers as one block, for float32
    and float64 queries of the same values (pynndescent searches each row on its own)."""
    from eigenflow.spectral.neighbours import index as index_module

    X = _blobs(3000, d=8).astype(x_dtype)
    index = KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1)
    q = _blobs(2500, d=8, seed=7).astype(np.float32)
    monkeypatch.setattr(index_module, "QUERY_BLOCK_ROWS", 10**9)
    whole = index.query(q, 5)
    monkeypatch.setattr(index_module, "QUERY_BLOCK_ROWS", 1000)  # blocks of 1000, 1000 and 500 rows
    for answer in (index.query(q, 5), index.query(q.astype(np.float64), 5)):
        for a, b in zip(answer, whole):
            np.testing.assert_array_equal(a, b)
    assert whole[0].dtype == np.int64 and whole[1].dtype == np.float32 and whole[0].shape == (2500, 5)


@pytest.mark.slow
def test_nndescent_query_and_pickle():
    """Queries compile another set of numba functions (~60-100 s under load): slow."""
    X = _blobs(600, d=8)
    index = KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1)
    q = _blobs(30, d=8, seed=7)
    qi, qd = index.query(q, 5)
    assert qi.dtype == np.int64 and qd.dtype == np.float32 and qi.shape == (30, 5)
    assert knn_recall(qi, np.argsort(cdist(q, X), axis=1)[:, :5]) >= 0.95
    ti, td = index.query(X[:10], 3)
    assert np.array_equal(ti[:, 0], np.arange(10)) and np.all(td[:, 0] == 0.0)
    clone = pickle.loads(pickle.dumps(index))
    np.testing.assert_array_equal(clone.query(q, 5)[0], qi)
    unprepared_bytes = len(pickle.dumps(KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1)))
    prepared = KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1).prepare()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(prepared)).query(q, 5)[0], qi)  # same as lazy
    # prepared: NN-descent's own neighbour heaps ((n, k + 1) int32 + float32) are dropped, the refined graph stays
    assert len(pickle.dumps(prepared)) <= unprepared_bytes - 0.9 * X.shape[0] * 11 * 8
    for a, b in zip(prepared.neighbor_graph(), index.neighbor_graph()):
        np.testing.assert_array_equal(a, b)
    rebuilt = KNNIndex.rebuild(X, index.params)  # same seed, n_jobs=1: the same graph (documented)
    for a, b in zip(rebuilt.neighbor_graph(), index.neighbor_graph()):
        np.testing.assert_array_equal(a, b)
    # float32 X: the prepared index keeps one copy of the points (pynndescent's reordered one), same answers
    X32, q32 = X.astype(np.float32), q.astype(np.float32)
    lazy = KNNIndex.build(X32, 10, method="nndescent", random_state=0, n_jobs=1)
    one_copy = KNNIndex.build(X32, 10, method="nndescent", random_state=0, n_jobs=1).prepare()
    assert one_copy._X is None and lazy._X is not None
    np.testing.assert_array_equal(one_copy.training_points, X32)
    found, dist = one_copy.query(q32, 5)
    np.testing.assert_array_equal(found, pickle.loads(pickle.dumps(lazy)).query(q32, 5)[0])
    np.testing.assert_allclose(dist, cdist(q32.astype(np.float64), X32.astype(np.float64))[
        np.arange(30)[:, None], found], rtol=1e-6)
    assert sys.getsizeof(one_copy) < sys.getsizeof(lazy.prepare()) + X32.nbytes  # lazy dropped its copy too


@pytest.mark.slow
def test_nndescent_recall_on_usps():
    X, _ = load_dataset("usps")
    k = 15
    exact, _ = knn_graph(X, k, method="exact")
    approx, dist = knn_graph(X, k, method="nndescent", random_state=0)
    check_contract(X, approx, dist, k)
    assert knn_recall(approx, exact) >= 0.95
    index = KNNIndex.build(X[:8000], k, method="nndescent", random_state=0)
    q_exact = KNNIndex.build(X[:8000], k, method="exact").query(X[8000:], k)[0]
    assert knn_recall(index.query(X[8000:], k)[0], q_exact) >= 0.95


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_neighbors": 0}, ParameterError, r"n_neighbors must be an integer in \[1, 9\]; got 0"),
        ({"n_neighbors": 10}, ParameterError, r"n_neighbors must be an integer in \[1, 9\]; got 10"),
        ({"n_neighbors": 2.5}, ParameterError, r"n_neighbors must be an integer"),
        ({"n_neighbors": 3, "method": "annoy"}, ParameterError, r"method must be one of .*'annoy'"),
        ({"n_neighbors": 3, "metric": "hamming"}, ParameterError, r"metric must be one of .*'hamming'"),
        ({"n_neighbors": 3, "n_jobs": 0}, ParameterError, r"n_jobs must be an integer in \[1, \d+\]; got 0"),
    ],
)
def test_bad_parameters(kwargs, error, match):
    X = _blobs(10)
    with pytest.raises(error, match=match):
        knn_graph(X, **kwargs)


def test_bad_data():
    X = _blobs(10)
    X[4, 1] = np.nan
    with pytest.raises(InputDataError, match=r"Input X contains NaN. \(first bad row index is 4\)"):
        knn_graph(X, 3)
    with pytest.raises(InputDataError, match=r"Found array with 1 sample\(s\) \(shape=\(1, 3\)\) while a minimum of 2"):
        knn_graph(np.zeros((1, 3)), 1)
    index = KNNIndex.build(_blobs(10), 3)
    with pytest.raises(InputDataError, match="X_new must have 5 columns"):
        index.query(np.zeros((2, 4)), 3)
    with pytest.raises(ParameterError, match=r"n_neighbors must be an integer in \[1, 10\]; got 11"):
        index.query(np.zeros((2, 5)), 11)


def test_n_jobs_above_numba_threads_is_a_clear_error():
    import numba

    X = np.random.default_rng(0).normal(size=(50, 3))
    top = int(numba.config.NUMBA_NUM_THREADS)
    with pytest.raises(ParameterError, match=rf"n_jobs must be .*{top}.*got {top + 1}"):
        KNNIndex.build(X, 5, method="exact", n_jobs=top + 1)


def test_knn_mask_from_distances_matches_the_index_and_restricts_candidates():
    """The dense-distance kNN relation equals KNNIndex's graph (no ties in Gaussian data); ``allowed`` and a
    per-row k restrict it (label graphs)."""
    from scipy.spatial.distance import cdist

    from eigenflow.spectral.neighbours.index import knn_mask_from_distances

    X = np.random.default_rng(11).standard_normal((60, 4))
    D2 = cdist(X, X, "sqeuclidean")
    mask = knn_mask_from_distances(D2, 5)
    idx, _ = knn_graph(X, 5, method="exact")
    ref = np.zeros((60, 60), dtype=bool)
    ref[np.repeat(np.arange(60), 5), idx.ravel()] = True
    np.testing.assert_array_equal(mask, ref)
    y = np.arange(60) % 3
    same = (y[:, None] == y[None, :]) & ~np.eye(60, dtype=bool)
    m = knn_mask_from_distances(D2, np.full(60, 30), same)  # more than the 19 allowed: capped
    np.testing.assert_array_equal(m, same)
    m = knn_mask_from_distances(D2, 2, same)
    assert m.sum(axis=1).tolist() == [2] * 60 and not (m & ~same).any()


# --- the exact path: the same graph as scikit-learn's float64 brute force followed by the refinement -------------

def _grid_with_copies() -> np.ndarray:
    """Integer grid points (many equal distances) shifted off the origin, plus exact copies: 25 of one point (more
    than k + 1) and a pair. (262, 3) float64."""
    grid = np.stack(np.meshgrid(np.arange(1, 8), np.arange(1, 8), np.arange(1, 6), indexing="ij"), -1).reshape(-1, 3)
    return np.vstack([grid, np.repeat(grid[[40]], 25, axis=0), grid[[100, 100]]]).astype(np.float64)


def brute_force_then_refine(X, Q, k, metric, graph):
    """The reference: scikit-learn's ``NearestNeighbors(algorithm="brute")`` in float64 lists each query's ``w``
    nearest training points (the query itself dropped from a training graph's lists), listed in index order and
    refined (:func:`spectral.neighbours._refine._refine_rows`: float64 distances, stable sort), first k kept. ``w`` is
    wide enough that every point tied at the k-th distance is listed: asserted (scikit-learn's w-th distance exceeds
    the k-th refined one), since a tie cut by scikit-learn's own selection would make the reference arbitrary."""
    from sklearn.neighbors import NearestNeighbors

    from eigenflow.spectral.neighbours._refine import METRIC_CODES, _refine_rows

    n = X.shape[0]
    w = min(n, k + 1 + 60)
    dist, cand = NearestNeighbors(n_neighbors=w, algorithm="brute", metric=metric).fit(
        X.astype(np.float64)).kneighbors(Q.astype(np.float64))
    if graph:  # drop the point itself (else the last column), as the training graph does
        own = cand == np.arange(n)[:, None]
        keep = np.ones(cand.shape, dtype=bool)
        keep[np.arange(n), np.where(own.any(axis=1), own.argmax(axis=1), w - 1)] = False
        cand, dist = cand[keep].reshape(n, w - 1), dist[keep].reshape(n, w - 1)
    found, refined = _refine_rows(X, np.ascontiguousarray(Q), np.sort(cand, axis=1), METRIC_CODES[metric])
    assert w == n or np.all(dist[:, -1] > refined[:, k - 1] + 1e-9), "widen the reference's candidate lists"
    return found[:, :k], refined[:, :k].astype(np.float32)


def full_sort_reference(X, Q, k, metric, graph):
    """The definition: every training point (but the query itself in a graph) refined in index order, first k."""
    from eigenflow.spectral.neighbours._refine import METRIC_CODES, _refine_rows

    n = X.shape[0]
    cand = np.tile(np.arange(n), (Q.shape[0], 1))
    if graph:
        cand = cand[~np.eye(n, dtype=bool)].reshape(n, n - 1)
    found, refined = _refine_rows(X, np.ascontiguousarray(Q), cand, METRIC_CODES[metric])
    return found[:, :k], refined[:, :k].astype(np.float32)


@pytest.fixture(params=[None, (16, 1)], ids=["defaults", "small-leaves-one-extra"])
def exact_settings(request, monkeypatch):
    """The default settings, and leaves of 16 rows with a single extra candidate: many leaves pruned, and most rows
    with a tie at the k-th place searched again with more candidates."""
    from eigenflow.spectral.neighbours import exact as knn_exact

    if request.param is not None:
        monkeypatch.setattr(knn_exact, "LEAF_SIZE", request.param[0])
        monkeypatch.setattr(knn_exact, "EXTRA_CANDIDATES", request.param[1])
    return request.param


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_exact_graph_and_queries_equal_brute_force_then_refinement(metric, dtype, exact_settings):
    """Ties (grid points, exact copies) resolve to the smaller index at the k-th place and within rows, exactly as
    scikit-learn's float64 brute force listing every tied point, then the refinement."""
    X = _grid_with_copies().astype(dtype)
    Q = np.vstack([X[:30], X[[40, 261]], X[50:80] + 0.5]).astype(dtype)  # training points, copies, between points
    k = 10
    index = KNNIndex.build(X, k, method="exact", metric=metric)
    for got, ref in zip(index.neighbor_graph(), brute_force_then_refine(X, X, k, metric, graph=True)):
        np.testing.assert_array_equal(got, ref)
    for kq in (1, 7, 30):
        for got, ref in zip(index.query(Q, kq), brute_force_then_refine(X, Q, kq, metric, graph=False)):
            np.testing.assert_array_equal(got, ref)
    if metric != "cosine":  # (cosine: the grid points on the same ray are at distance 0 too)
        copies = np.r_[40, 245:270]  # the 26 equal rows: each lists the 10 first of the others, at distance 0
        idx, dist = index.neighbor_graph()
        for i in copies:
            np.testing.assert_array_equal(idx[i], copies[copies != i][:k])
        assert np.all(dist[copies] == 0.0)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_exact_certifies_near_ties_that_float32_cannot_order(metric, exact_settings):
    """400 points at distance 1 +- 1e-11 of a centre (float32 cannot tell them apart; the scan's candidates are
    re-ranked in float64 and the centre's row is searched again until proven), far from the origin; cosine also
    with all-zero rows (distance 0 to each other, 1 to the others)."""
    rng = np.random.default_rng(3)
    V = rng.normal(size=(400, 6))
    V *= (1 + 1e-11 * rng.normal(size=(400, 1))) / np.linalg.norm(V, axis=1, keepdims=True)
    X = np.vstack([np.zeros((1, 6)), V]) + 50.0
    if metric == "cosine":
        X[[5, 9, 13]] = 0.0
    for k in (3, 20):
        index = KNNIndex.build(X, k, method="exact", metric=metric)
        for got, ref in zip(index.neighbor_graph(), full_sort_reference(X, X, k, metric, graph=True)):
            np.testing.assert_array_equal(got, ref)
        Q = X[[0, 5, 100]] + np.array([[0.0], [0.0], [1e-12]])
        for got, ref in zip(index.query(Q, k), full_sort_reference(X, Q, k, metric, graph=False)):
            np.testing.assert_array_equal(got, ref)


def test_exact_large_copy_groups_threads_and_pickles():
    """A group of 300 equal rows (and 200 all-zero rows under cosine) costs one search, not 300 wide ones; one
    thread gives the same graph; a pickle leaves the float32 copy out and answers the same."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1200, 5))
    X[100:400] = X[7]
    X[500:700] = 0.0
    for metric in ("euclidean", "cosine"):
        index = KNNIndex.build(X, 12, method="exact", metric=metric)
        graph = index.neighbor_graph()
        for got, ref in zip(graph, full_sort_reference(X, X, 12, metric, graph=True)):
            np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(graph[0][150], np.r_[7, 100:111])
        for got, ref in zip(KNNIndex.build(X, 12, method="exact", metric=metric, n_jobs=1).neighbor_graph(), graph):
            np.testing.assert_array_equal(got, ref)
        index.prepare()
        clone = pickle.loads(pickle.dumps(index))
        assert clone._index._points is None and len(pickle.dumps(index)) < X.nbytes + 2 * graph[0].nbytes
        Q = np.vstack([X[:20], np.zeros((3, 5)), rng.normal(size=(10, 5))])
        for a, b, ref in zip(index.query(Q, 40), clone.query(Q, 40), full_sort_reference(X, Q, 40, metric, False)):
            np.testing.assert_array_equal(a, ref)
            np.testing.assert_array_equal(b, ref)


def test_neighbor_graph_without_copies_gives_the_index_arrays_and_loads_cached_kernels():
    """``neighbor_graph(copy=False)`` gives the index's own arrays (no 1e6 x k copies), equal to the copies, and
    writable: weighting them runs the kernels the cache holds (numba would compile read-only variants again)."""
    from eigenflow.spectral.graph.weights import knn_weights

    X = np.random.default_rng(2).normal(size=(120, 3))
    index = KNNIndex.build(X, 5, method="exact")
    arrays, copies = index.neighbor_graph(copy=False), index.neighbor_graph()
    for array, copy, own in zip(arrays, copies, index.neighbor_graph(copy=False)):
        assert np.array_equal(array, copy) and array.dtype == copy.dtype
        assert array is own and not np.shares_memory(array, copy)
        assert array.flags.writeable
    W = knn_weights(*arrays)
    assert (W != knn_weights(*copies)).nnz == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coordinates_too_large_for_the_search_are_refused_in_one_line(dtype):
    """Coordinates around 1e30 (finite, even in float32) would overflow the float32 squared distances of the search
    and corrupt the graph: refused before any search, naming the magnitude; 1e14 gives the graph of the unscaled
    data."""
    from eigenflow.spectral.errors import InputDataError
    from eigenflow.spectral.neighbours.index import KNNIndex

    X = np.random.default_rng(0).normal(size=(300, 5)).astype(dtype)
    for method in ("exact", "nndescent"):
        with pytest.raises(InputDataError, match=r"X has coordinates up to 3\.\d+e\+30 in absolute value; the kNN "
                                                 r"search accepts at most 1e\+15"):
            KNNIndex.build(X * dtype(1e30), 10, method=method, random_state=0)
    index = KNNIndex.build(X, 10, method="exact")
    with pytest.raises(InputDataError, match="X_new has coordinates up to"):
        index.query(X[:3] * dtype(1e30), 5)
    scaled = KNNIndex.build(X * dtype(2.0 ** 46), 10, method="exact").neighbor_graph()[0]  # 7e13, exact in floats
    np.testing.assert_array_equal(scaled, index.neighbor_graph()[0])
