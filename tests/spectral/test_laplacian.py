"""Laplacian identities, comparison with scipy.sparse.csgraph, isolated nodes, connectivity checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse import csgraph

from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError, ParameterError
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.graph.laplacian import check_connected, connected_components, laplacian
from eigenflow.spectral.graph.weights import knn_weights


def _graph(n=120, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return knn_weights(*knn_graph(X, 6, method="exact"))


def test_identities_and_csgraph_reference():
    W = _graph()
    deg_ref = np.asarray(W.sum(axis=1)).ravel()
    L, deg = laplacian(W, "unnormalized")
    np.testing.assert_allclose(deg, deg_ref)
    np.testing.assert_allclose(np.asarray(L.sum(axis=1)).ravel(), 0, atol=1e-12)
    np.testing.assert_allclose(L.toarray(), csgraph.laplacian(W.toarray()), atol=1e-14)
    Ls, _ = laplacian(W, "symmetric")
    np.testing.assert_allclose(Ls.toarray(), csgraph.laplacian(W.toarray(), normed=True), atol=1e-14)
    vals = eigh(Ls.toarray(), eigvals_only=True)
    assert vals.min() > -1e-12 and vals.max() < 2 + 1e-12 and abs(vals[0]) < 1e-12
    Lrw, _ = laplacian(W, "random_walk")
    np.testing.assert_allclose(np.asarray(Lrw.sum(axis=1)).ravel(), 0, atol=1e-12)
    np.testing.assert_allclose(Lrw.toarray(), np.eye(120) - W.toarray() / deg[:, None], atol=1e-14)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(Lrw.toarray()).real), vals, atol=1e-10)


def test_isolated_nodes_have_zero_rows_and_no_nan():
    W = _graph(30).tolil()
    W[5, :] = 0
    W[:, 5] = 0
    W = W.tocsr()
    for norm in ("unnormalized", "symmetric", "random_walk"):
        L, deg = laplacian(W, norm)
        assert deg[5] == 0 and np.all(np.isfinite(L.data))
        assert L[5].nnz == 0 and L[:, 5].nnz == 0


def test_diagonal_of_W_is_ignored():
    W = _graph(40)
    Wd = W + sp.eye(40) * 3.0
    np.testing.assert_allclose(laplacian(Wd, "symmetric")[0].toarray(), laplacian(W, "symmetric")[0].toarray())


def test_components_sorted_by_size_and_check_connected():
    blocks = [np.ones((k, k)) - np.eye(k) for k in (3, 5, 1)]
    W = sp.block_diag(blocks).tocsr()
    n_comp, labels = connected_components(W)
    assert n_comp == 3
    np.testing.assert_array_equal(labels, [1, 1, 1, 0, 0, 0, 0, 0, 2])
    with pytest.raises(DisconnectedGraphError, match=r"3 connected components \(sizes 5, 3, 1\)"):
        check_connected(W)
    check_connected(_graph(50))


@pytest.mark.parametrize(
    "W, match",
    [
        (np.array([[0, 1.0], [0.5, 0]]), "must be symmetric"),
        (np.array([[0, -1.0], [-1.0, 0]]), "must be non-negative"),
        (np.array([[0, np.nan], [np.nan, 0]]), "NaN or inf"),
        (np.ones((2, 3)), r"square matrix; got shape \(2, 3\)"),
        (np.ones(3), "2-D square matrix"),
    ],
)
def test_bad_affinity(W, match):
    with pytest.raises(InputDataError, match=match):
        laplacian(W)


def test_bad_normalization():
    with pytest.raises(ParameterError, match=r"normalization must be one of .*'normed'"):
        laplacian(_graph(10), "normed")


def test_dense_and_signed_laplacians_match_csgraph_and_the_sparse_builder():
    """dense_laplacian == csgraph's D - W; signed graphs (DNE's W^I - W^E) give D - W with signed degrees."""
    from eigenflow.spectral.graph.laplacian import dense_laplacian

    rng = np.random.default_rng(0)
    A = rng.random((12, 12))
    W = np.triu(A, 1) + np.triu(A, 1).T
    L, d = dense_laplacian(W)
    np.testing.assert_allclose(L, csgraph.laplacian(W), atol=1e-14)
    np.testing.assert_allclose(d, W.sum(axis=1))
    S = W - 0.8 * (W > 0.5)  # signed
    with pytest.raises(InputDataError, match="non-negative"):
        dense_laplacian(S)
    Ld, _ = dense_laplacian(S, signed=True)
    Ls, ds = laplacian(sp.csr_matrix(S), signed=True)
    np.testing.assert_allclose(Ld, np.diag(S.sum(axis=1)) - S, atol=1e-14)
    np.testing.assert_allclose(Ls.toarray(), Ld, atol=1e-14)
    with pytest.raises(ParameterError, match="signed=True .* normalization='unnormalized'; got 'symmetric'"):
        laplacian(sp.csr_matrix(S), "symmetric", signed=True)
    with pytest.raises(InputDataError, match="symmetric"):
        dense_laplacian(np.triu(A))


@pytest.mark.parametrize("normalization", ["unnormalized", "symmetric", "random_walk"])
def test_row_block_assembly_matches_csgraph_with_self_loops_isolated_nodes_and_unsorted_input(normalization,
                                                                                                monkeypatch):
    """The Laplacian is written by row blocks: across several blocks, with self-loops, an isolated node and
    unsorted input indices it equals csgraph's, has sorted indices and leaves W untouched."""
    import eigenflow.spectral._sparse as sparse_helpers

    monkeypatch.setattr(sparse_helpers, "ROW_BLOCK", 7)
    W = _graph(60).tolil()
    W[9, :] = 0
    W[:, 9] = 0
    W = (W.tocsr() + sp.diags(np.linspace(0.0, 1.0, 60))).tocsr()
    W.indices, W.data = W.indices.copy(), W.data.copy()
    for r in range(60):  # reverse each row: unsorted indices
        lo, hi = W.indptr[r], W.indptr[r + 1]
        W.indices[lo:hi], W.data[lo:hi] = W.indices[lo:hi][::-1].copy(), W.data[lo:hi][::-1].copy()
    W.has_sorted_indices = False
    snapshot = (W.data.copy(), W.indices.copy())
    L, deg = laplacian(W, normalization)
    A = W.toarray()
    np.fill_diagonal(A, 0.0)
    if normalization == "random_walk":
        inv = np.divide(1.0, A.sum(1), out=np.zeros(60), where=A.sum(1) > 0)
        expected = np.diag((A.sum(1) > 0).astype(float)) - inv[:, None] * A
    else:
        expected = csgraph.laplacian(A, normed=normalization == "symmetric")
        expected[9, 9] = 0.0  # csgraph puts 1 on an isolated node's diagonal (module docstring)
    np.testing.assert_allclose(L.toarray(), expected, atol=1e-14)
    assert all(np.all(np.diff(L.indices[L.indptr[r]:L.indptr[r + 1]]) > 0) for r in range(60))
    assert L[9].nnz == 0 and deg[9] == 0
    assert np.array_equal(W.data, snapshot[0]) and np.array_equal(W.indices, snapshot[1])


def test_max_asymmetry_matches_the_sparse_difference():
    """The pattern-sharing comparison and the structurally asymmetric path both give max |M - M^T|."""
    from eigenflow.spectral._sparse import max_asymmetry

    W = _graph(80)
    assert max_asymmetry(W) == 0.0
    bumped = W.copy()
    bumped.data[5] *= 1.5  # same pattern, one value off
    assert max_asymmetry(bumped) == pytest.approx(abs(bumped - bumped.T).max())
    lil = W.tolil()
    lil[0, 79] = 0.25  # an entry without its mirror
    structural = lil.tocsr()
    assert max_asymmetry(structural) == pytest.approx(abs(structural - structural.T).max())
    duplicated = sp.csr_matrix((np.r_[W.data, 1.0], np.r_[W.indices, 3], np.r_[W.indptr[:-1], W.nnz + 1]),
                               shape=W.shape)  # one duplicate entry (0.0 + 1.0 at the end of the last row)
    assert max_asymmetry(duplicated) == pytest.approx(abs(duplicated - duplicated.T).max())
    assert max_asymmetry(sp.csr_matrix((4, 4))) == 0.0


def test_spd_lu_solves_a_shifted_laplacian_with_less_fill_than_colamd():
    """The Cholesky-ordered LU of an SPD matrix (a shifted normalized Laplacian of a kNN graph) solves it to
    round-off, against a dense solve, with fewer factor entries than splu's default ordering."""
    from scipy.sparse.linalg import splu

    from eigenflow.spectral._sparse import spd_lu

    L = laplacian(_graph(400), "symmetric")[0]
    M = sp.csc_matrix(L + 1e-3 * sp.identity(400))
    b = np.random.default_rng(0).normal(size=(400, 3))
    lu = spd_lu(M)
    np.testing.assert_allclose(lu.solve(b), np.linalg.solve(M.toarray(), b), rtol=1e-8, atol=1e-10)
    default = splu(M)
    assert lu.L.nnz + lu.U.nnz < default.L.nnz + default.U.nnz
