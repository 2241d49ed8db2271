"""The row-sharded normalized Laplacian and its LOBPCG (spectral.eigen.sharded) on a 2-worker LocalCluster.

Oracles: the single-process Laplacian (spectral.graph.laplacian.laplacian), dense scipy.linalg.eigh of it, and
the single-process LOBPCG + AMG solver (spectral.eigen.eigensolve), on the kNN graph of a lifted Swiss roll.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.spectral.eigen import eigensolve
from eigenflow.spectral.eigen.sharded import MIN_SHARD_ROWS, DistributedLaplacian
from eigenflow.spectral.eigen.sharded_solve import distributed_eigensolve, laplacian_eigenmaps_distributed
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph.laplacian import laplacian, laplacian_rows
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.graph.weights import knn_weights

from tests.helpers import local_cluster

N = 2000
K_PAIRS = 6


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    with local_cluster(2) as address, Client(address) as c:
        yield c


@pytest.fixture(scope="module")
def graph():
    """``(X, idx, W, L, degrees, dense eigenpairs)`` of a 2000-point Swiss roll, k = 10."""
    X, _, _ = make_swiss_roll_lifted(N, random_state=0)
    idx, dist = knn_graph(X, 10, method="exact")
    W = knn_weights(idx, dist)
    L, degrees = laplacian(W, "symmetric")
    values, vectors = scipy.linalg.eigh(L.toarray(), subset_by_index=[0, K_PAIRS - 1])
    return X, idx, W, L, degrees, (values, vectors)


@pytest.fixture(scope="module")
def single(graph):
    """The single-process LOBPCG + AMG pairs of the same L (the solver the distributed one must match)."""
    return eigensolve(graph[3], K_PAIRS, solver="lobpcg", random_state=0)


def _angle_degrees(A, B) -> float:
    return float(np.degrees(scipy.linalg.subspace_angles(A, B)).max())


@pytest.mark.parametrize("normalization", ["symmetric", "random_walk"])
def test_laplacian_rows_are_the_rows_of_laplacian(graph, normalization):
    W = graph[2].tolil()
    W[5, 5] = 3.0  # a self-loop: ignored by both
    W = W.tocsr()
    L, degrees = laplacian(W, normalization)
    for lo, hi in [(0, 700), (700, 1300), (1300, N)]:
        rows = laplacian_rows(W[lo:hi], degrees, lo, normalization)
        assert abs(rows - L[lo:hi]).max() < 1e-15


@pytest.mark.parametrize("n_blocks, partition", [(1, "none"), (3, "rcm"), (4, "coordinates")])
def test_distributed_product_equals_the_single_process_product(client, graph, n_blocks, partition):
    X, _, W, L, degrees, _ = graph
    op = DistributedLaplacian.from_weights(W, n_blocks, partition=partition,
                                           coordinates=X if partition == "coordinates" else None)
    assert op.n_blocks == n_blocks and sorted(op.perm.tolist()) == list(range(N))
    V = np.random.default_rng(0).standard_normal((N, 3))
    Lp = L[op.perm][:, op.perm]
    np.testing.assert_allclose(op @ V, Lp @ V, atol=1e-13)
    np.testing.assert_allclose(op.degrees, degrees[op.perm])
    assert op.norm_bound() == pytest.approx(abs(L).sum(axis=1).max())
    # the shards hold most edges: the fraction reported is the one of W under the partition
    assert op.stats["inside_fraction"] == pytest.approx(op.stats["inside_fraction_W"])
    assert op.stats["inside_fraction"] > (0.9 if n_blocks > 1 else 0.999)
    # traffic of one product: V at every shard's columns out, the n x b result back
    assert op.traffic["product_bytes_back"] == N * 3 * 8
    assert op.traffic["product_bytes_out"] == sum(c.size for c in op.cols) * 3 * 8
    assert N * 3 * 8 <= op.traffic["product_bytes_out"] < 1.5 * N * 3 * 8  # own rows + halo


@pytest.mark.parametrize("n_blocks, partition, preconditioner, start, dense_work", [
    pytest.param(3, "rcm", "two_level", "coarse", "row_blocks", marks=pytest.mark.slow),
    (2, "coordinates", "block_amg", "random", "row_blocks")])
def test_distributed_lobpcg_matches_dense_and_single_process(client, graph, single, n_blocks, partition,
                                                             preconditioner, start, dense_work):
    X, _, W, L, _, (ref_values, ref_vectors) = graph
    op = DistributedLaplacian.from_weights(W, n_blocks, partition=partition,
                                           coordinates=X if partition == "coordinates" else None)
    res = distributed_eigensolve(op, K_PAIRS, random_state=0, preconditioner=preconditioner, start=start,
                                 max_iter=3000, dense_work=dense_work)
    tol = 1e-6 * abs(L).sum(axis=1).max()  # the single-process default: DEFAULT_RTOL * ||L||_inf
    assert res.converged and res.solver == "lobpcg"
    np.testing.assert_allclose(res.values, ref_values, atol=tol)
    # residuals recomputed here on the single-process L, in the original node order
    resid = np.linalg.norm(L @ res.vectors - res.vectors * res.values, axis=0)
    assert resid.max() <= tol
    np.testing.assert_allclose(resid, res.residuals, rtol=1e-6, atol=1e-12)
    assert _angle_degrees(res.vectors, single.vectors) < 1.0
    assert _angle_degrees(res.vectors, ref_vectors) < 1.0
    traffic = res.info["traffic"]
    assert traffic["bytes_per_iteration"] > 0 and traffic["products"] >= res.n_iter
    assert traffic["preconditioner_calls"] >= (res.n_iter - 1 if preconditioner else 0)
    info = res.info["distributed"]
    assert info["n_blocks"] == n_blocks and info["start"] == start and info["dense_work"] == dense_work
    assert info["preconditioner"] == (preconditioner or "none")
    if start == "coarse":
        assert info["coarse"]["coarse_n"] >= K_PAIRS
    if dense_work == "row_blocks":  # no (n, b) block through the driver: halo rows only, the final residuals
        # too (computed on the workers); the (n, k) vectors are gathered once, at the end, because asked
        assert traffic["product_bytes_out"] == traffic["product_bytes_back"] == 0
        assert traffic["halo_bytes"] > 0 and res.info["gathered_bytes"] == N * K_PAIRS * 8
        coarse_bytes = 2 * info["coarse"]["coarse_n"] * K_PAIRS * 8 if preconditioner == "two_level" else 0
        assert traffic["preconditioner_bytes"] == 0  # the coarse blocks go between the shards and the coarse worker
        assert traffic["coarse_bytes"] <= traffic["preconditioner_calls"] * coarse_bytes
        assert (traffic["coarse_bytes"] > 0) == (preconditioner == "two_level")


@pytest.mark.slow
def test_row_block_lobpcg_takes_the_iterations_of_scipys_lobpcg(client, graph):
    """Same start, preconditioner and tolerance: the row-block iteration is scipy's (+-2 iterations), and the
    converged subspaces agree to round-off of the tolerance (the driver path's own check against dense eigh is
    through this agreement)."""
    op = DistributedLaplacian.from_weights(graph[2], 3)
    rows = distributed_eigensolve(op, 4, random_state=1, preconditioner="block_amg", start="random")
    driver = distributed_eigensolve(op, 4, random_state=1, preconditioner="block_amg", start="random",
                                    dense_work="driver")
    assert abs(rows.n_iter - driver.n_iter) <= 2, (rows.n_iter, driver.n_iter)
    assert _angle_degrees(rows.vectors, driver.vectors) < 0.1
    np.testing.assert_allclose(rows.values, driver.values, atol=1e-6 * 2)


@pytest.mark.slow
def test_the_operator_can_be_solved_again_with_another_preconditioner(client, graph):
    op = DistributedLaplacian.from_weights(graph[2], 2)
    first = distributed_eigensolve(op, 3, random_state=0)
    second = distributed_eigensolve(op, 3, random_state=0, preconditioner="block_amg", start="random")
    assert op._coarse_lu is None and second.info["distributed"]["coarse"] is None
    assert first.converged and second.converged and _angle_degrees(first.vectors, second.vectors) < 0.1


def test_without_preconditioner(client, graph):
    op = DistributedLaplacian.from_weights(graph[2], 2, partition="none")
    res = distributed_eigensolve(op, 3, preconditioner=None, max_iter=5, raise_on_failure=False, random_state=0)
    assert res.n_iter < 10 and not res.converged  # scipy counts its initial and final residuals too
    assert res.info["distributed"]["preconditioner"] == "none" and res.info["distributed"]["start"] == "random"
    assert res.info["traffic"]["preconditioner_calls"] == 0 and res.info["traffic"]["products"] >= res.n_iter


@pytest.mark.slow
def test_distributed_eigenmap_matches_laplacian_eigenmaps_from_graph(client, graph):
    _, _, W, _, degrees, (ref_values, ref_vectors) = graph
    op = DistributedLaplacian.from_weights(W, 2)
    emb, values, res = laplacian_eigenmaps_distributed(op, 3, random_state=1)
    # laplacian_eigenmaps_from_graph's convention: f_j = D^-1/2 u_j, j = 1..k (its dense run: same eigh)
    np.testing.assert_allclose(values, ref_values[1:4], atol=1e-5)
    ref_emb = ref_vectors[:, 1:4] / np.sqrt(degrees)[:, None]
    assert emb.shape == (N, 3) and _angle_degrees(emb, ref_emb) < 1.0
    assert np.all(np.abs(emb).max(axis=0) == emb.max(axis=0))  # sign rule: largest-|.| entry positive
    # gather=False: the embedding stays as row parts on the shards' workers; put back in the original order it
    # is the gathered one bit for bit (same solve)
    from eigenflow.spectral.eigen._sharded_vectors import gather_original_order

    parts, values_kept, res_kept = laplacian_eigenmaps_distributed(op, 3, random_state=1, gather=False)
    assert res_kept.vectors is None and len(parts) == 2
    assert [f.result().shape for f in parts] == [(hi - lo, 3) for lo, hi in zip(op.bounds[:-1], op.bounds[1:])]
    np.testing.assert_array_equal(values_kept, values)
    np.testing.assert_array_equal(gather_original_order(op, parts), emb)
    np.testing.assert_array_equal(res_kept.residuals, res.residuals)
    with pytest.raises(ParameterError, match="gather must be True, or False with dense_work='row_blocks'"):
        distributed_eigensolve(op, 3, gather=False, dense_work="driver")


def test_sign_rule_on_row_parts_is_sign_flip_in_the_original_order(client, graph):
    """Ties of |.| across shards go to the smallest original row, as np.argmax on the gathered columns."""
    from eigenflow.spectral.eigen._sharded_vectors import gather_original_order, signed_parts
    from eigenflow.spectral.eigen.signs import sign_flip

    op = DistributedLaplacian.from_weights(graph[2], 3, partition="rcm")
    rng = np.random.default_rng(0)
    V = rng.uniform(-1, 1, (N, 4))
    last, first = op.perm[op.bounds[1]], op.perm[op.bounds[2]]  # rows of shards 1 and 2
    lo, hi = sorted((last, first))
    V[lo, 0], V[hi, 0] = -2.0, 2.0  # tie: the smaller original row's value (-2) decides
    V[lo, 1], V[hi, 1] = 2.0, -2.0
    V[:, 2] = 0.0  # all-zero column kept
    parts = [client.scatter(V[op.perm[a:b]], workers=[w]) for a, b, w in zip(op.bounds[:-1], op.bounds[1:],
                                                                            op.workers)]
    signed = gather_original_order(op, signed_parts(op, parts))
    np.testing.assert_array_equal(signed, sign_flip(V))
    assert signed[lo, 0] == 2.0 and signed[lo, 1] == 2.0


def _directed_blocks(idx, bounds):
    """Directed binary kNN weights A (n, n) and its row blocks."""
    rows = np.repeat(np.arange(N), idx.shape[1])
    A = sp.csr_matrix((np.ones(rows.size), (rows, idx.ravel())), shape=(N, N))
    return A, [A[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("how", ["or", "and", "mean"])
def test_symmetrization_by_shard_pair_exchange(client, graph, how):
    idx = graph[1]
    bounds = [0, 600, 1500, N]
    A, blocks = _directed_blocks(idx, bounds)
    futures = [client.scatter(b, hash=False) for b in blocks]
    ref = {"or": A.maximum(A.T), "and": A.minimum(A.T), "mean": (A + A.T) * 0.5}[how]
    op = DistributedLaplacian.from_blocks(futures, symmetrize=how)
    L, _ = laplacian(ref, "symmetric")
    V = np.random.default_rng(1).standard_normal((N, 2))
    np.testing.assert_allclose(op @ V, L @ V, atol=1e-13)
    assert op.n_blocks == 3 and list(op.bounds) == bounds


@pytest.mark.parametrize("weighting, symmetrize", [("local_scaling", "or"), ("heat", "and"), ("hein_maier", "mean")])
def test_weights_built_per_shard_equal_knn_weights(client, graph, weighting, symmetrize):
    X = graph[0]
    idx, dist = knn_graph(X, 10, method="exact")
    W = knn_weights(idx, dist, weighting=weighting, symmetrize=symmetrize)
    bounds = [0, 700, 1400, N]
    parts = list(zip(bounds[:-1], bounds[1:]))
    op = DistributedLaplacian.from_knn_blocks([client.scatter(idx[lo:hi], hash=False) for lo, hi in parts],
                                              [dist[lo:hi] for lo, hi in parts], weighting=weighting,
                                              symmetrize=symmetrize)
    L, degrees = laplacian(W, "symmetric")
    np.testing.assert_allclose(op.degrees, degrees, rtol=1e-12)
    V = np.random.default_rng(2).standard_normal((N, 2))
    np.testing.assert_allclose(op @ V, L @ V, atol=1e-12)
    assert op.stats["weight_params"]["weighting"] == weighting


def test_knn_blocks_of_partition_parts(client, graph):
    """Shards holding the parts of a row partition (``perm``): the operator is L in the partition's order and
    maps back to the original order; the inside fraction is the partition's."""
    from eigenflow.spectral.neighbours.partition import bisection_partition_array

    X, _, W, L, degrees, _ = graph
    idx, dist = knn_graph(X, 10, method="exact")
    parts = bisection_partition_array(X, 3)
    perm, bounds = parts.perm, parts.bounds
    parts = [perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    op = DistributedLaplacian.from_knn_blocks([client.scatter(idx[r], hash=False) for r in parts],
                                              [dist[r] for r in parts], perm=perm)
    np.testing.assert_array_equal(op.perm, perm)
    np.testing.assert_allclose(op.to_original_order(op.degrees[:, None]).ravel(), degrees, rtol=1e-12)
    V = np.random.default_rng(3).standard_normal((N, 2))
    np.testing.assert_allclose(op @ V, L[perm][:, perm] @ V, atol=1e-12)
    label = np.empty(N, dtype=np.int64)
    label[perm] = np.repeat(np.arange(3), np.diff(bounds))
    rows, cols = W.nonzero()
    assert op.stats["inside_fraction"] == pytest.approx(np.mean(label[rows] == label[cols]))
    assert op.stats["inside_fraction"] > 0.93  # measured 0.951 (contiguous ranges of this data: 0.338)
    with pytest.raises(InputDataError, match=r"perm must be a permutation of 0 \.\. 1999 \(every row once\)"):
        DistributedLaplacian.from_knn_blocks([idx[r] for r in parts], [dist[r] for r in parts],
                                             perm=np.zeros(N, dtype=np.int64))
    with pytest.raises(InputDataError, match=r"perm must be an integer array of shape \(2000,\); got float64 \(5,\)"):
        DistributedLaplacian.from_knn_blocks([idx[r] for r in parts], [dist[r] for r in parts], perm=np.zeros(5))


def test_from_knn_blocks_checks_its_blocks(client, graph):
    idx, dist = knn_graph(graph[0], 10, method="exact")
    bad = idx[1000:].copy()
    bad[3, 0] = 1003
    with pytest.raises(InputDataError, match="must not contain self-neighbours"):
        DistributedLaplacian.from_knn_blocks([idx[:1000], bad], [dist[:1000], dist[1000:]])
    with pytest.raises(InputDataError, match="same number of neighbours; got \\[9, 10\\]"):
        DistributedLaplacian.from_knn_blocks([idx[:1000], idx[1000:, :9]], [dist[:1000], dist[1000:, :9]])
    with pytest.raises(ParameterError, match=r"weighting must be one of \['local_scaling', 'heat', 'binary', "
                                             r"'hein_maier'\]; got 'gauss'"):
        DistributedLaplacian.from_knn_blocks([idx[:1000], idx[1000:]], [dist[:1000], dist[1000:]], weighting="gauss")


def test_from_blocks_checks_symmetry(client, graph):
    A, blocks = _directed_blocks(graph[1], [0, 1000, N])
    with pytest.raises(InputDataError, match=r"W must be symmetric; max \|W - W\^T\| = 1"):
        DistributedLaplacian.from_blocks(blocks)
    W = graph[2]
    op = DistributedLaplacian.from_blocks([W[:1000], W[1000:]])  # symmetric blocks pass the check
    assert op.n_blocks == 2


def test_bad_parameters_name_parameter_range_and_value(client, graph):
    X, _, W, _, _, _ = graph
    high = N // MIN_SHARD_ROWS
    with pytest.raises(ParameterError, match=rf"n_blocks must be an integer in \[1, {high}\]; got 0"):
        DistributedLaplacian.from_weights(W, 0)
    with pytest.raises(ParameterError, match=rf"n_blocks must be an integer in \[1, {high}\]; got {high + 1}"):
        DistributedLaplacian.from_weights(W, high + 1)
    with pytest.raises(ParameterError, match=rf"n_blocks must be an integer in \[1, {high}\]; got 2.5"):
        DistributedLaplacian.from_weights(W, 2.5)
    with pytest.raises(ParameterError, match=r"partition must be one of \['rcm', 'coordinates', 'none'\]; got 'metis'"):
        DistributedLaplacian.from_weights(W, 2, partition="metis")
    with pytest.raises(ParameterError, match="partition='coordinates' needs coordinates"):
        DistributedLaplacian.from_weights(W, 2, partition="coordinates")
    with pytest.raises(InputDataError, match=r"coordinates must be a finite \(2000, d\) array; got shape \(10, 32\)"):
        DistributedLaplacian.from_weights(W, 2, partition="coordinates", coordinates=X[:10])
    with pytest.raises(ParameterError, match=r"normalization must be one of \['symmetric', 'random_walk'\]; got 'x'"):
        DistributedLaplacian.from_weights(W, 2, normalization="x")
    with pytest.raises(ParameterError, match=r"symmetrize must be one of \['or', 'and', 'mean'\]; got 'max'"):
        DistributedLaplacian.from_blocks([W[:1000], W[1000:]], symmetrize="max")
    with pytest.raises(ParameterError, match=rf"at least {MIN_SHARD_ROWS} rows; got sizes \[10, 1990\]"):
        DistributedLaplacian.from_blocks([W[:10], W[10:]])
    with pytest.raises(InputDataError, match="row blocks must be"):
        DistributedLaplacian.from_blocks([W[:1000], W[1000:1500]])
    op = DistributedLaplacian.from_weights(W, 2)
    with pytest.raises(ParameterError, match=rf"n_components must be an integer in \[1, {N - 1}\]; got 0"):
        distributed_eigensolve(op, 0)
    choices = r"\['block_amg', 'two_level'\]"
    with pytest.raises(ParameterError, match=rf"preconditioner must be one of {choices}; got 'amg'"):
        distributed_eigensolve(op, 3, preconditioner="amg")
    with pytest.raises(ParameterError, match=r"start must be one of \['auto', 'coarse', 'random'\]; got 'ml'"):
        distributed_eigensolve(op, 3, start="ml")
    with pytest.raises(ParameterError, match="preconditioner='two_level' needs start='coarse'"):
        distributed_eigensolve(op, 3, start="random")
    with pytest.raises(ParameterError, match="start='coarse' needs the block AMG preconditioner"):
        distributed_eigensolve(op, 3, preconditioner=None, start="coarse")
    with pytest.raises(ParameterError, match=r"coarse_size must be an integer in \[1, inf\); got 0"):
        distributed_eigensolve(op, 3, coarse_size=0)
    with pytest.raises(ParameterError, match=r"dense_work must be one of \['row_blocks', 'driver'\]; got 'gpu'"):
        distributed_eigensolve(op, 3, dense_work="gpu")
    with pytest.raises(ParameterError, match="op must be a DistributedLaplacian; got csr_matrix"):
        distributed_eigensolve(W, 3)


def test_row_block_orthonormalization_falls_back_to_tsqr_and_drops_dependent_columns(client):
    """[X, W] with a column of W inside span(X): Cholesky-QR refuses it, Householder TSQR runs and drops that
    column; the rest of W comes back orthonormal and orthogonal to X. Independent columns: Cholesky-QR2, no drop."""
    from eigenflow.spectral.placement import scatter_to
    from eigenflow.spectral.eigen._sharded_lobpcg import _Blocks, _orthonormal_complement

    rng = np.random.default_rng(0)
    workers = sorted(client.scheduler_info()["workers"])
    X = np.linalg.qr(rng.standard_normal((600, 3)))[0]
    W = rng.standard_normal((600, 3))
    blocks = _Blocks(client, workers)

    def solve(W):
        parts = lambda A: [scatter_to(client, A[:300], workers[0]), scatter_to(client, A[300:], workers[1])]
        Xp, Wp = parts(X), parts(W)
        gram = np.hstack([X, W]).T @ np.hstack([X, W])
        Q, dropped, fallback = _orthonormal_complement(blocks, Xp, Wp, 3, gram)
        return np.vstack(client.gather(Q)), dropped, fallback

    Q, dropped, fallback = solve(W)
    assert (dropped, fallback) == (0, 0) and Q.shape == (600, 3)
    np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-12)
    assert np.abs(X.T @ Q).max() < 1e-12
    W[:, 1] = 2.0 * X[:, 0] - X[:, 2] + 1e-15 * rng.standard_normal(600)  # inside span(X) up to round-off
    Q, dropped, fallback = solve(W)
    assert (dropped, fallback) == (1, 1) and Q.shape == (600, 2)
    np.testing.assert_allclose(Q.T @ Q, np.eye(2), atol=1e-12)
    assert np.abs(X.T @ Q).max() < 1e-12
    # the kept columns span W's independent part
    rest = W[:, [0, 2]] - X @ (X.T @ W[:, [0, 2]])
    assert np.degrees(scipy.linalg.subspace_angles(Q, rest)).max() < 1e-6


def test_renumbering_by_parts_asks_only_for_foreign_ids_and_refuses_unknown_ones():
    """The worker-side renumbering (original rows -> operator rows) of spectral.graph.sharded, as its tasks run
    on the workers: each shard looks up only the ids it does not hold, in the other shards; an id no shard holds
    is refused, named."""
    from eigenflow.spectral.graph.sharded import foreign_ids, lookup_ids, renumbered
    from eigenflow.spectral.graph.halo import split_by_owner

    rows = [np.array([2, 5, 7]), np.array([0, 1, 9]), np.array([3, 4, 6, 8])]  # shard q: operator rows bounds[q]..
    bounds = np.array([0, 3, 6, 10])
    idx = np.array([[5, 9], [2, 0], [7, 8]])  # shard 0's neighbour lists, original rows
    ids = foreign_ids(idx, rows[0])
    np.testing.assert_array_equal(ids, [0, 8, 9])  # its own rows 2, 5, 7 are not asked for
    found = [lookup_ids(rows[q], ids, int(bounds[q])) for q in (1, 2)]
    got = renumbered(idx, rows[0], 0, ids, *found)
    inverse = np.empty(10, dtype=np.int64)
    inverse[np.concatenate(rows)] = np.arange(10)
    np.testing.assert_array_equal(got, inverse[idx])
    with pytest.raises(InputDataError, match="kNN indices must be rows of the shards; 1 are not, e.g. 11"):
        bad = np.array([[11, 9]])
        renumbered(bad, rows[0], 0, foreign_ids(bad, rows[0]),
                   *[lookup_ids(rows[q], foreign_ids(bad, rows[0]), int(bounds[q])) for q in (1, 2)])
    assert [p.tolist() for p in split_by_owner(np.array([1, 2, 4, 9]), bounds)] == [[1, 2], [4], [9]]


def test_the_coarse_problem_goes_to_the_worker_holding_the_fewest_rows(client, graph):
    from eigenflow.spectral.placement import least_loaded_worker

    a, b = sorted(client.scheduler_info()["workers"])
    assert least_loaded_worker(client, [a, b], [300, 100]) == b
    assert least_loaded_worker(client, [b, a, b], [100, 150, 100]) == a
    assert least_loaded_worker(client, [a], [10]) == b  # a worker without a shard holds no rows
    _, _, W, _, _, _ = graph
    op = DistributedLaplacian.from_weights(W, 3)  # 3 shards on 2 workers: one worker holds two
    rows = {w: 0 for w in (a, b)}
    for w, n_rows in zip(op.workers, np.diff(op.bounds)):
        rows[w] += int(n_rows)
    # where the coarse problem goes is set up before the first iteration: two iterations show it (the converged
    # two-level solves are tested above)
    res = distributed_eigensolve(op, K_PAIRS, random_state=0, preconditioner="two_level", start="coarse", max_iter=2,
                                 raise_on_failure=False)
    assert res.info["distributed"]["coarse"]["coarse_worker"] == min(rows, key=rows.get)
    assert rows[a] != rows[b]
