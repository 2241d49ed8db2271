"""Sharded kNN graph (spectral.neighbours.sharded) on a LocalCluster of 2 worker processes.

Oracle: scikit-learn's brute-force ``NearestNeighbors``. The default tests use the exact search per shard
(no numba compile in the workers) and check that the sharding, the shard-pair queries and the merge give the
exact graph; the NN-descent tests are ``slow``: every fresh worker process pays pynndescent's numba compile
(tens of seconds, more on a loaded machine).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.index import KNNIndex
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.neighbours.merge import ShardAnswer, merge_candidates
from eigenflow.spectral.neighbours.sharded import ROWS_PER_SHARD, build_shard_indexes, default_n_shards, sharded_knn_graph
from eigenflow.spectral.neighbours.sharded_query import query_shard_indexes
from eigenflow.spectral.neighbours.partition import part_distance_bounds
from eigenflow.spectral.metrics import knn_recall
from tests.spectral.test_knn import check_contract

K = 10


@pytest.fixture
def client(cluster):
    """A client of the module's 2-worker cluster, active (``distributed.get_client``) for one test only."""
    from distributed import Client

    with Client(cluster) as c:
        yield c


def _brute(X, k):
    """The oracle: scikit-learn brute-force kNN, the point itself removed (no duplicates in the data)."""
    idx = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X).kneighbors(X, return_distance=False)
    return idx[:, 1:]


def _data(n=1500, d=8, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


@pytest.mark.parametrize("n_shards", [1, 2, 5])
def test_exact_shards_give_the_exact_graph(client, n_shards):
    X = _data()
    indices, distances = sharded_knn_graph(X, K, n_shards=n_shards, shard_method="exact", random_state=0)
    check_contract(X, indices, distances, K)
    # exhaustive search per shard: the merged graph is the exact one, bit for bit
    ie, de = knn_graph(X, K, method="exact")
    np.testing.assert_array_equal(indices, ie)
    np.testing.assert_array_equal(distances, de)
    assert knn_recall(indices, _brute(X, K)) == 1.0


def test_dask_input_equals_numpy_input(client):
    import dask.array as da

    X = _data(1001)
    expected = sharded_knn_graph(X, K, n_shards=3, shard_method="exact", metric="cosine")
    got = sharded_knn_graph(da.from_array(X, chunks=(250, 8)), K, n_shards=3, shard_method="exact", metric="cosine")
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


def test_default_n_shards_rule(client):
    assert default_n_shards(10_000, 2) == 2
    assert default_n_shards(3 * ROWS_PER_SHARD + 1, 2) == 4
    assert default_n_shards(3, 8) == 1  # every shard keeps >= 2 rows
    # a shard's rows of X within SHARD_MEMORY_SHARE of the smallest worker memory limit
    assert default_n_shards(10_000, 2, x_bytes=2 * 10**9, worker_memory=2 * 10**9) == 8
    assert default_n_shards(10_000, 4, x_bytes=10**9, worker_memory=None) == 4  # no limit
    assert default_n_shards(10**6, 4, x_bytes=128 * 10**6, worker_memory=15 * 10**8) == 4  # 1e6 x 32: unchanged
    X = _data(40)
    indices, _ = sharded_knn_graph(X, 3, shard_method="exact")  # 2 workers: 2 shards
    np.testing.assert_array_equal(indices, knn_graph(X, 3, method="exact")[0])


def test_merge_breaks_distance_ties_by_the_smaller_index():
    a = (np.array([[7, 3]]), np.array([[1.0, 2.0]], np.float32))
    b = ShardAnswer(np.array([0]), np.array([[5, 1]]), np.array([[1.0, 2.0]], np.float32), 1)
    indices, distances = merge_candidates(3, a, b)
    np.testing.assert_array_equal(indices, [[5, 7, 1]])
    np.testing.assert_array_equal(distances, [[1.0, 1.0, 2.0]])
    assert indices.dtype == np.int64 and distances.dtype == np.float32


def test_merge_takes_answers_for_the_rows_they_list_and_orders_base_ties_by_index():
    """Rows no answer lists keep their base list (ties within it ordered by index); listed rows merge; without a
    base every row must be listed; a row with fewer than k candidates is an error."""
    base = (np.array([[4, 2], [9, 8], [6, 5]]), np.array([[1.0, 3.0], [2.0, 2.0], [0.5, 0.7]], np.float32))
    answer = ShardAnswer(np.array([2]), np.array([[20, 21]]), np.array([[0.6, 0.9]], np.float32), 3)
    indices, distances = merge_candidates(2, base, answer)
    np.testing.assert_array_equal(indices, [[4, 2], [8, 9], [6, 20]])
    np.testing.assert_array_equal(distances, np.array([[1.0, 3.0], [2.0, 2.0], [0.5, 0.6]], np.float32))
    brute = [sorted(zip(d, i))[:2] for i, d in zip([[4, 2], [9, 8], [6, 5, 20, 21]],
                                                   [[1.0, 3.0], [2.0, 2.0], [0.5, 0.7, 0.6, 0.9]])]
    np.testing.assert_array_equal(indices, [[i for _, i in row] for row in brute])
    halves = [ShardAnswer(np.array([0, 2]), base[0][[0, 2]], base[1][[0, 2]], 3),
              ShardAnswer(np.array([1]), base[0][[1]], base[1][[1]], 3)]
    np.testing.assert_array_equal(merge_candidates(2, None, *halves)[0], [[4, 2], [8, 9], [6, 5]])
    with pytest.raises(InputDataError, match="at least k=2 neighbours"):
        merge_candidates(2, None, halves[0])  # row 1 has no candidate
    with pytest.raises(InputDataError, match="same 3 rows"):
        merge_candidates(2, None, halves[0], ShardAnswer(np.array([0]), base[0][:1], base[1][:1], 4))


def test_no_client_is_a_clear_error():
    from distributed import get_client

    with pytest.raises(ValueError):
        get_client()  # precondition: no client is active in this test
    with pytest.raises(ParameterError, match=r"method='sharded' .*needs an active distributed\.Client"):
        knn_graph(_data(50), 3, method="sharded")
    with pytest.raises(ParameterError, match=r"n_shards must be an integer in \[1, 25\]; got 0"):
        knn_graph(_data(50), 3, method="sharded", n_shards=0)  # parameters are checked before the client


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "sharded", "n_shards": 0}, r"n_shards must be an integer in \[1, 25\]; got 0"),
        ({"method": "sharded", "n_shards": 26}, r"n_shards must be an integer in \[1, 25\]; got 26"),
        ({"method": "sharded", "n_shards": 2.0}, r"n_shards must be an integer in \[1, 25\]; got 2\.0"),
        ({"method": "sharded", "n_neighbors": 50}, r"n_neighbors must be an integer in \[1, 49\]; got 50"),
        ({"method": "exact", "n_shards": 2}, r"n_shards is used only by method='sharded'; got n_shards=2"),
    ],
)
def test_bad_parameters_name_the_parameter(client, kwargs, match):
    kwargs = {"n_neighbors": 3, **kwargs}
    with pytest.raises(ParameterError, match=match):
        knn_graph(_data(50), kwargs.pop("n_neighbors"), **kwargs)


def test_bad_shard_method(client):
    with pytest.raises(ParameterError, match=r"shard_method must be one of \['nndescent', 'exact'\]; got 'annoy'"):
        sharded_knn_graph(_data(50), 3, shard_method="annoy")


def _held_out_split(n=1500, d=8, n_held=300, seed=0):
    """``(X_fit (n - n_held, d), Q (n_held, d))``: a random split of :func:`_data`."""
    X = _data(n, d, seed)
    held = np.random.default_rng(seed + 1).permutation(n)[:n_held]
    fit = np.setdiff1d(np.arange(n), held)
    return X[fit], X[held]


def _query_all(sharded, blocks, k):
    futures = query_shard_indexes(sharded, blocks, k)
    answers = futures[0].client.gather(futures) if futures else []
    return np.vstack([a[0] for a in answers]), np.vstack([a[1] for a in answers])


@pytest.mark.parametrize("n_shards", [1, 3])
def test_held_out_queries_merge_every_shard_into_the_nearest_fit_points(client, n_shards):
    """Held-out points searched in every shard's index (exact shards: no numba compile in the workers): the merged
    candidates are the brute-force nearest fit points, with the distances of one index over all fit rows (the
    float64 refinement of every shard's answer), in blocks given as arrays and as futures."""
    X_fit, Q = _held_out_split()
    kc = 3 * K  # the out-of-sample map's candidates (spectral.embedding.eigenmaps.candidate_count)
    sharded = build_shard_indexes(X_fit, K, n_shards=n_shards, shard_method="exact", random_state=0, queried=True)
    blocks = [Q[:120], client.scatter(Q[120:], hash=False)]
    indices, distances = _query_all(sharded, blocks, kc)
    assert indices.shape == distances.shape == (Q.shape[0], kc)
    assert indices.dtype == np.int64 and distances.dtype == np.float32
    oracle = NearestNeighbors(n_neighbors=kc, algorithm="brute").fit(X_fit).kneighbors(Q, return_distance=False)
    assert knn_recall(indices, oracle) >= 0.99  # measured: 1.0
    ie, de = KNNIndex.build(X_fit, K, method="exact").query(Q, kc)  # one index of all fit rows
    np.testing.assert_array_equal(indices, ie)
    np.testing.assert_array_equal(distances, de)


def test_part_distance_bounds_never_exceed_the_true_distance_to_a_part():
    """The cut bounds of a bisection partition against the brute-force distance from query points to every row of
    each part: a lower bound everywhere, 0 for the part whose cells hold the point, and tight enough to prune."""
    from scipy.spatial.distance import cdist

    from eigenflow.spectral.neighbours.partition import bisection_partition_array

    X_fit, Q = _held_out_split(n=1200, n_held=200)
    parts = bisection_partition_array(X_fit, 5)
    bounds = part_distance_bounds(parts.splits, 5, Q)
    D = cdist(Q, X_fit)
    nearest = np.stack([D[:, parts.perm[a:b]].min(axis=1) for a, b in zip(parts.bounds[:-1], parts.bounds[1:])], 1)
    assert bounds.shape == (200, 5)
    assert np.all(bounds <= nearest + 1e-9)
    assert np.mean(bounds.min(axis=1) == 0) > 0.9  # in a part's cells (measured: all; a cut's gap holds none here)
    assert np.mean(bounds > 0) > 0.5  # measured: 0.80 of the (point, part) pairs get a positive bound
    np.testing.assert_array_equal(part_distance_bounds((), 5, Q), 0)


@pytest.mark.parametrize("n_shards", [2, 5])
def test_pruned_held_out_queries_equal_the_search_of_every_shard(client, n_shards):
    """With a bisection partition the held-out points skip the shards their cut bound puts beyond their k-th home
    candidate; with exact shard searches the answer is the brute-force one of all fit rows, with fewer searches."""
    X_fit, Q = _held_out_split(n=2000, n_held=400)
    kc = 3 * K
    sharded = build_shard_indexes(X_fit, K, n_shards=n_shards, shard_method="exact", partition="bisection",
                                  random_state=0, queried=True)
    futures, counts = query_shard_indexes(sharded, [Q[:150], Q[150:]], kc, with_search_counts=True)
    answers = client.gather(futures)
    indices, distances = np.vstack([a[0] for a in answers]), np.vstack([a[1] for a in answers])
    ie, de = KNNIndex.build(X_fit, K, method="exact").query(Q, kc)  # one index of all fit rows
    np.testing.assert_array_equal(indices, ie)
    np.testing.assert_array_equal(distances, de)
    searches = sum(client.gather(counts))
    assert Q.shape[0] <= searches < Q.shape[0] * n_shards  # every point in its home shard, not in all shards
    contiguous = build_shard_indexes(X_fit, K, n_shards=n_shards, shard_method="exact", random_state=0, queried=True)
    _, counts = query_shard_indexes(contiguous, [Q], kc, with_search_counts=True)
    assert sum(client.gather(counts)) == Q.shape[0] * n_shards  # no cuts: every shard, as before the pruning


def test_held_out_queries_take_every_candidate_of_shards_smaller_than_the_candidate_count(client):
    X_fit, Q = _held_out_split(n=80, n_held=20)  # 5 shards of 12 fit rows, 30 candidates: <= 12 from each
    sharded = build_shard_indexes(X_fit, 5, n_shards=5, shard_method="exact", queried=True)
    indices, distances = _query_all(sharded, [Q], 30)
    np.testing.assert_array_equal(indices, KNNIndex.build(X_fit, 5, method="exact").query(Q, 30)[0])
    assert np.all(np.diff(distances, axis=1) >= 0)


def test_held_out_queries_refuse_bad_input_naming_it(client):
    X_fit, Q = _held_out_split(n=200, n_held=40)
    sharded = build_shard_indexes(X_fit, 5, n_shards=2, shard_method="exact", queried=True)
    with pytest.raises(InputDataError, match=r"Q_blocks\[1\] must have 8 columns like the indexed X; got 5"):
        query_shard_indexes(sharded, [Q, Q[:, :5]], 10)
    with pytest.raises(ParameterError, match=r"n_neighbors must be an integer in \[1, 160\]; got 161"):
        query_shard_indexes(sharded, [Q], 161)
    bad = Q.copy()
    bad[3, 2] = np.nan
    with pytest.raises(InputDataError, match="NaN"):
        query_shard_indexes(sharded, [bad], 10)
    with pytest.raises(ParameterError, match=r"Q_blocks must be a list of row blocks .*; got ndarray"):
        query_shard_indexes(sharded, Q, 10)
    with pytest.raises(ParameterError, match=r"sharded must be the ShardIndexes of build_shard_indexes; got tuple"):
        query_shard_indexes((sharded.indexes, sharded.rows), [Q], 10)
    future = query_shard_indexes(sharded, [client.scatter(Q[:, :5], hash=False)], 10)[0]
    with pytest.raises(InputDataError, match="X_new must have 8 columns like the training data; got 5"):
        future.result()  # a future's block is checked on the worker, by the shard indexes' query
    assert query_shard_indexes(sharded, [], 10) == []


@pytest.mark.slow
def test_nndescent_shards_recall_reproducible_and_dask_equal(client):
    """NN-descent per shard: recall within 0.01 of single-process NN-descent; same seed, same graph;
    dask input, same graph. The single-process reference runs on a worker (compiled there already)."""
    import dask.array as da

    from eigenflow.spectral.datasets import make_swiss_roll_lifted

    X = make_swiss_roll_lifted(4000, random_state=0)[0].astype(np.float64)
    oracle = _brute(X, K)
    sharded = knn_graph(X, K, method="sharded", n_shards=3, random_state=1)
    check_contract(X, *sharded, K)
    single = client.submit(knn_graph, X, K, method="nndescent", random_state=1, n_jobs=1).result()
    r_sharded, r_single = knn_recall(sharded[0], oracle), knn_recall(single[0], oracle)
    assert r_sharded >= r_single - 0.01, (r_sharded, r_single)
    again = sharded_knn_graph(X, K, n_shards=3, random_state=1)
    lazy = sharded_knn_graph(da.from_array(X.astype(np.float32), chunks=(700, 32)), K, n_shards=3, random_state=1)
    for a, b, c in zip(sharded, again, lazy):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.slow
def test_nndescent_held_out_queries_recall(client):
    """NN-descent shards of the fit rows of the lifted Swiss roll, held-out points searched in every shard's
    index: recall of the merged candidates against brute force."""
    from eigenflow.spectral.datasets import make_swiss_roll_lifted

    X = make_swiss_roll_lifted(4000, random_state=0)[0]
    held = np.random.default_rng(1).random(X.shape[0]) < 0.2
    kc = 3 * K
    sharded = build_shard_indexes(X[~held], K, n_shards=4, partition="bisection", random_state=0, queried=True)
    indices, _ = _query_all(sharded, [X[held][:400], X[held][400:]], kc)
    oracle = NearestNeighbors(n_neighbors=kc, algorithm="brute").fit(X[~held]).kneighbors(X[held],
                                                                                         return_distance=False)
    assert knn_recall(indices, oracle) >= 0.99
