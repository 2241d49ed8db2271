"""LaplacianEigenmaps against scikit-learn's spectral_embedding and dense eigh; Nystrom out-of-sample."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import eigh
from sklearn.datasets import make_swiss_roll
from sklearn.exceptions import NotFittedError
from sklearn.manifold import spectral_embedding

from tests.helpers import load_dataset
from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps, LaplacianEigenmapsModel, laplacian_eigenmaps_from_graph
from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError, ParameterAdjustedWarning, ParameterError
from eigenflow.spectral.neighbours.knn import knn_graph
from eigenflow.spectral.metrics import max_subspace_angle, one_nn_accuracy


N = 300  # dense references stay cheap


@pytest.fixture(scope="module")
def roll():
    X, t = make_swiss_roll(N, random_state=0)
    return X, t


@pytest.fixture(scope="module")
def fitted(roll):
    return LaplacianEigenmaps(3, n_neighbors=10, eigen_solver="dense", random_state=0).fit(roll[0])


def test_matches_sklearn_spectral_embedding(fitted):
    ref = spectral_embedding(fitted.affinity_matrix_, n_components=3, eigen_solver="arpack", eigen_tol=1e-12,
                             random_state=0, norm_laplacian=True, drop_first=True)
    assert max_subspace_angle(ref, fitted.embedding_) < 1e-6
    # same convention column by column (D^-1/2 u, same sign rule)
    np.testing.assert_allclose(fitted.embedding_, ref, atol=1e-8 * np.abs(ref).max())
    assert fitted.eigen_solver_ == "dense" and fitted.embedding_.shape == (N, 3)


def test_eigenvalues_match_dense_reference(fitted):
    W = fitted.affinity_matrix_.toarray()
    d = W.sum(axis=1)
    L_sym = np.eye(N) - W / np.sqrt(np.outer(d, d))
    vals, vecs = eigh(L_sym)
    np.testing.assert_allclose(fitted.eigenvalues_, vals[1:4], atol=1e-12)
    assert max_subspace_angle(vecs[:, 1:4] / np.sqrt(d)[:, None], fitted.embedding_) < 1e-8


@pytest.mark.parametrize("solver, angle", [("arpack", 1e-6), ("lobpcg", 1e-3), ("randomized", 1e-3)])
def test_sparse_solvers_agree_with_dense(fitted, solver, angle):
    # tolerance per solver: arpack converges to machine precision here; lobpcg and the randomized solver
    # stop at the eigensolve default tolerance (residual 1e-6 relative), angle ~ residual / eigen-gap
    emb, vals, info = laplacian_eigenmaps_from_graph(fitted.affinity_matrix_, 3, eigen_solver=solver,
                                                     random_state=0)
    assert info["eigen_solver"] == solver and info["converged"]
    assert max_subspace_angle(emb, fitted.embedding_) < angle
    np.testing.assert_allclose(vals, fitted.eigenvalues_, rtol=1e-3)


def test_unnormalized_matches_dense_reference(fitted, roll):
    est = LaplacianEigenmaps(3, n_neighbors=10, normalization="unnormalized", eigen_solver="dense").fit(roll[0])
    W = est.affinity_matrix_.toarray()
    vals, vecs = eigh(np.diag(W.sum(axis=1)) - W)
    np.testing.assert_allclose(est.eigenvalues_, vals[1:4], atol=1e-10)
    assert max_subspace_angle(vecs[:, 1:4], est.embedding_) < 1e-8


def test_random_walk_equals_symmetric(fitted, roll):
    est = LaplacianEigenmaps(3, n_neighbors=10, normalization="random_walk", eigen_solver="dense").fit(roll[0])
    np.testing.assert_allclose(est.embedding_, fitted.embedding_, atol=1e-10)


@pytest.mark.parametrize("normalization", ["symmetric", "unnormalized"])
def test_transform_of_training_points(roll, normalization):
    X = roll[0]
    est = LaplacianEigenmaps(3, n_neighbors=10, normalization=normalization, eigen_solver="dense").fit(X)
    np.testing.assert_array_equal(est.transform(X), est.embedding_)  # the distance-0 rule
    # the Nystrom formula itself, applied to the training rows (candidates: 3k neighbours, self excluded),
    # reproduces the fit wherever the candidates hold every reverse neighbour of the row
    idx, dist = knn_graph(X, 30, method="exact")
    Z, _ = est.model_._extend(idx, dist)
    Wq_rows = est.affinity_matrix_
    A = (Wq_rows > 0).toarray()
    covered = np.array([set(np.flatnonzero(A[i])) <= set(idx[i]) for i in range(N)])
    assert covered.mean() > 0.7
    scale = np.abs(est.embedding_).max()
    np.testing.assert_allclose(Z[covered], est.embedding_[covered], atol=1e-9 * scale)


def test_transform_is_transform_candidates_of_the_index_candidates(fitted):
    """transform = the index's n_candidates nearest training points, then transform_candidates (a sharded fit
    passes candidates found per shard)."""
    model = fitted.model_
    X_new, _ = make_swiss_roll(40, random_state=5)
    assert model.n_candidates == 30  # CANDIDATE_FACTOR * n_neighbors
    idx, dist = model.index.query(X_new, model.n_candidates)
    np.testing.assert_array_equal(model.transform_candidates(idx, dist), fitted.transform(X_new))
    with pytest.raises(InputDataError, match=r"at least n_neighbors=10 candidates per row \(n_candidates=30\); got 9"):
        model.transform_candidates(idx[:, :9], dist[:, :9])
    with pytest.raises(InputDataError, match=r"indices must lie in \[0, 299\]; got values in \[-1, "):
        model.transform_candidates(np.where(idx == idx[0, 0], -1, idx), dist)
    with pytest.raises(InputDataError, match=r"same shape; got \(40, 30\) and \(40, 29\)"):
        model.transform_candidates(idx, dist[:, 1:])


def test_held_out_points_land_near_their_neighbours():
    X, y = load_dataset("usps")
    perm = np.random.default_rng(0).permutation(X.shape[0])[:1600]
    tr, te = perm[:1200], perm[1200:]
    est = LaplacianEigenmaps(10, n_neighbors=10, eigen_solver="arpack", random_state=0).fit(X[tr])
    Z_te = est.transform(X[te])
    joint = LaplacianEigenmaps(10, n_neighbors=10, eigen_solver="arpack", random_state=0).fit(X[perm])
    acc_oos = one_nn_accuracy(est.embedding_, y[tr], Z_te, y[te])
    acc_transductive = one_nn_accuracy(joint.embedding_[:1200], y[tr], joint.embedding_[1200:], y[te])
    # measured: out-of-sample 0.853, transductive 0.855
    assert acc_oos >= acc_transductive - 0.03 and acc_oos > 0.8


def test_far_query_point_is_finite_and_stays_consistent():
    X, _ = make_swiss_roll(300, random_state=1)
    est = LaplacianEigenmaps(2, n_neighbors=8, weighting="heat", eigen_solver="dense").fit(X)
    Z = est.transform(np.array([[1e4, 1e4, 1e4]]))
    nearest = np.argmin(np.linalg.norm(X - 1e4, axis=1))
    assert np.all(np.isfinite(Z))
    # all weight on the nearest training point in the limit: f(x) = f(nearest) / mu
    np.testing.assert_allclose(Z[0], est.embedding_[nearest] / (1 - est.eigenvalues_), rtol=1e-6)


def _two_blobs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(size=(n, 2)), rng.normal(size=(n // 2, 2)) + 100.0])


def test_disconnected_graph_raises():
    with pytest.raises(DisconnectedGraphError, match=r"2 connected components \(sizes 120, 60\)"):
        LaplacianEigenmaps(2, n_neighbors=5).fit(_two_blobs())


def test_disconnected_graph_per_component():
    X = _two_blobs()
    est = LaplacianEigenmaps(2, n_neighbors=5, on_disconnected="per_component", eigen_solver="dense").fit(X)
    W = est.affinity_matrix_
    assert est.n_connected_components_ == 2
    offsets = est.model_.component_offsets
    for c, nodes in enumerate((np.arange(120), np.arange(120, 180))):
        ref = spectral_embedding(W[nodes][:, nodes], n_components=2, eigen_solver="arpack", eigen_tol=1e-12,
                                 random_state=0)
        assert max_subspace_angle(ref, est.embedding_[nodes] - offsets[c]) < 1e-6
    # a new point next to the second blob is extended within that blob's component
    x_new = X[150:151] + 0.01
    idx, _ = knn_graph(X, 5, method="exact")
    assert np.all(idx[150] >= 120)
    np.testing.assert_allclose(est.transform(x_new), est.transform(X[150:151]), atol=0.3 * np.abs(est.embedding_[120:]).max())


def test_isolated_point_gets_zeros_per_component():
    W = sp.csr_matrix(np.pad(np.ones((30, 30)) - np.eye(30), ((0, 1), (0, 1))))
    emb, vals, info = laplacian_eigenmaps_from_graph(W, 2, on_disconnected="per_component")
    # its own eigenmap is zeros, translated by its component's offset
    assert np.all(emb[30] == info["component_offsets"][1]) and np.all(np.isfinite(emb))
    assert info["component_solvers"][1] == "none" and info["component_offsets"][1, 0] > 0


def test_model_state_round_trip(fitted, roll):
    arrays, attrs = fitted.model_.to_state()
    json.dumps(attrs)
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "fiu" for a in arrays.values())
    model = LaplacianEigenmapsModel.from_state(arrays, json.loads(json.dumps(attrs)))
    with pytest.raises(ParameterError, match="rebuild_index"):
        model.transform(roll[0][:3])
    model.rebuild_index(roll[0])
    X_new = roll[0][:50] + 0.05
    np.testing.assert_allclose(model.transform(X_new), fitted.transform(X_new), rtol=1e-12)
    with pytest.raises(InputDataError, match="kind='laplacian_eigenmaps'"):
        LaplacianEigenmapsModel.from_state(arrays, {**attrs, "kind": "other"})
    with pytest.raises(InputDataError, match="the index has 20 points; the model was fitted on 300"):
        model.rebuild_index(roll[0][:20])


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_components": 0}, r"n_components must be an integer in \[1, 48\]; got 0"),
        ({"n_components": 1.5}, r"n_components must be an integer in \[1, 48\]; got 1.5"),
        ({"n_neighbors": 0}, r"n_neighbors must be an integer in \[1, 49\]; got 0"),
        ({"eigen_solver": "magic"}, r"eigen_solver must be one of .*'magic'"),
        ({"weighting": "cosine"}, r"weighting must be one of .*'cosine'"),
        ({"normalization": "l1"}, r"normalization must be one of .*'l1'"),
        ({"on_disconnected": "ignore"}, r"on_disconnected must be one of .*'ignore'"),
        ({"knn_method": "faiss"}, r"knn_method must be one of .*'faiss'"),
        ({"affinity": "nearest_neighbors"}, r"affinity must be one of \['knn', 'rbf'\]; got 'nearest_neighbors'"),
        ({"eigen_solver": "nystrom"},
         r"eigen_solver='nystrom' does not apply to affinity='knn': affinity='knn' takes eigen_solver in "
         r"\['auto', 'dense', 'arpack', 'lobpcg', 'randomized'\], affinity='rbf' takes eigen_solver in "
         r"\['auto', 'nystrom'\]"),
        ({"affinity": "rbf", "eigen_solver": "arpack"}, r"eigen_solver='arpack' does not apply to affinity='rbf'"),
    ],
)
def test_bad_parameters(params, match):
    X = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.raises(ParameterError, match=match):
        LaplacianEigenmaps(**{"n_neighbors": 5, **params}).fit(X)


@pytest.mark.parametrize(
    "params, match, used",
    [
        ({"n_components": 49}, r"n_components=49 is larger than n_samples - 2 = 48; using n_components=48", (48, 5)),
        ({"n_neighbors": 50}, r"n_neighbors=50 is larger than n_samples - 1 = 49; using n_neighbors=49", (2, 49)),
    ],
)
def test_data_size_parameters_are_clipped_with_a_warning(params, match, used):
    X = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.warns(ParameterAdjustedWarning, match=match):
        est = LaplacianEigenmaps(**{"n_neighbors": 5, **params}).fit(X)
    assert est.embedding_.shape == (50, used[0])
    assert est.model_.weight_params.n_neighbors == used[1]


def test_bad_data(fitted):
    with pytest.raises(ValueError, match="NaN"):
        LaplacianEigenmaps().fit(np.array([[0.0, np.nan]] * 20))
    with pytest.raises(ValueError, match="3 features"):
        fitted.transform(np.zeros((2, 4)))
    with pytest.raises(NotFittedError):
        LaplacianEigenmaps().transform(np.zeros((2, 3)))


def _dense_heat_reference(X, k_nn, n_components):
    """Dense reference: the fully connected heat kernel with sigma = mean kNN distance, no self-loops, normalized."""
    _, dist = knn_graph(X, k_nn, method="exact")
    sigma = dist.astype(np.float64).mean()
    K = np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2) / sigma**2)
    np.fill_diagonal(K, 0.0)
    d = K.sum(axis=1)
    mu, U = eigh(K / np.sqrt(np.outer(d, d)))
    return U[:, ::-1][:, 1 : n_components + 1] / np.sqrt(d)[:, None], 1 - mu[::-1][1 : n_components + 1], sigma


def test_nystrom_solver_all_landmarks_equals_dense_heat_kernel(roll):
    X = roll[0]
    est = LaplacianEigenmaps(3, affinity="rbf", n_neighbors=10, eigen_solver="nystrom", random_state=0).fit(X)
    ref, vals, _ = _dense_heat_reference(X, 10, 3)
    assert est.eigen_solver_ == "nystrom" and est.affinity_matrix_ is None
    assert max_subspace_angle(ref, est.embedding_) < 1e-8
    np.testing.assert_allclose(est.eigenvalues_, vals, atol=1e-10)
    np.testing.assert_allclose(est.transform(X), est.embedding_, atol=1e-10 * np.abs(est.embedding_).max())


def test_nystrom_with_fewer_landmarks_and_state_round_trip(roll):
    from eigenflow.spectral.embedding.nystrom_eigenmaps import NystromEigenmapsModel, nystrom_eigenmaps

    X = roll[0]
    ref, vals, sigma = _dense_heat_reference(X, 10, 2)
    # measured angles (seeds 0-2): 100 landmarks 0.13-0.21 rad, 200: 0.03-0.05, 250: ~0.013, 300: 0
    angles = [max_subspace_angle(ref, nystrom_eigenmaps(X, 2, sigma, random_state=0, n_landmarks=m)[0])
              for m in (100, 250)]
    assert angles[1] < angles[0] and angles[1] < 0.03
    emb, lam, model, info = nystrom_eigenmaps(X, 2, sigma, random_state=0, n_landmarks=200)
    assert info["n_landmarks"] == 200
    np.testing.assert_allclose(model.transform(X), emb, atol=1e-8 * np.abs(emb).max())
    arrays, attrs = model.to_state()
    json.dumps(attrs)
    clone = NystromEigenmapsModel.from_state(arrays, json.loads(json.dumps(attrs)))
    clone.rebuild_index(X)
    np.testing.assert_array_equal(clone.transform(X[:20] + 0.1), model.transform(X[:20] + 0.1))


def test_nystrom_refuses_unnormalized(roll):
    with pytest.raises(ParameterError, match="normalization must be 'symmetric' or 'random_walk'"):
        LaplacianEigenmaps(2, affinity="rbf", n_neighbors=10, normalization="unnormalized").fit(roll[0])


@pytest.mark.parametrize("affinity", ["knn", "rbf"])
def test_estimator_state_round_trip_is_bit_identical(roll, affinity):
    X = roll[0]
    est = LaplacianEigenmaps(2, affinity=affinity, n_neighbors=10, random_state=np.random.default_rng(1)).fit(X)
    arrays, attrs = est.to_state()
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "fiu" for a in arrays.values())
    back = LaplacianEigenmaps.from_state(arrays, json.loads(json.dumps(attrs)))
    X_new = np.vstack([X[:30] + 0.07, X[30:40]])
    np.testing.assert_array_equal(back.transform(X_new), est.transform(X_new))
    np.testing.assert_array_equal(back.embedding_, est.embedding_)
    assert back.get_params()["affinity"] == affinity and back.eigen_solver_ == est.eigen_solver_
    with pytest.raises(InputDataError, match="kind='LaplacianEigenmaps'"):
        LaplacianEigenmaps.from_state(arrays, {**attrs, "kind": "laplacian_eigenmaps"})


def test_metrics_helpers():
    from eigenflow.spectral.metrics import knn_recall

    Z_train = np.array([[0.0], [1.0], [10.0]])
    assert one_nn_accuracy(Z_train, [0, 0, 1], np.array([[0.4], [9.0], [2.0]]), [0, 1, 1]) == pytest.approx(2 / 3)
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(20, 3)))
    R = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))[0]
    assert max_subspace_angle(Q, -Q @ R) < 1e-12
    assert max_subspace_angle(Q[:, :1], Q[:, 1:2]) == pytest.approx(np.pi / 2)
    assert knn_recall(np.array([[1, 2], [0, 3]]), np.array([[2, 1], [0, 2]])) == 0.75
    with pytest.raises(InputDataError, match="same number of columns"):
        one_nn_accuracy(Z_train, [0, 0, 1], np.zeros((2, 2)), [0, 1])


def test_one_component_graph_is_freed_before_the_eigensolve(roll, monkeypatch):
    """A W passed without another reference (as the flow's eigensolve stage does) is released once its
    Laplacian exists: the eigensolve runs without it (one graph less at the stage's peak)."""
    import weakref

    import eigenflow.spectral.embedding.eigenmaps as emb

    refs = []

    def make_graph():
        idx, dist = knn_graph(roll[0], 10, method="exact")
        from eigenflow.spectral.graph.weights import knn_weights

        W = knn_weights(idx, dist)
        refs.append(weakref.ref(W.data))
        return W

    alive_at_solve = []
    solve = emb.eigensolve

    def watching(*args, **kwargs):
        alive_at_solve.append(refs[0]() is not None)
        return solve(*args, **kwargs)

    monkeypatch.setattr(emb, "eigensolve", watching)
    Z, values, info = laplacian_eigenmaps_from_graph(make_graph(), 2, eigen_solver="lobpcg", random_state=0)
    assert alive_at_solve == [False] and info["converged"] and Z.shape == (N, 2)


@pytest.mark.parametrize("as_frame", [False, True])
def test_float32_in_float32_out_embedding_and_transform(as_frame):
    """As scikit-learn's dtype-preserving transformers: float32 input (an array or a DataFrame of float32 columns)
    gives a float32 ``embedding_``, ``fit_transform`` and ``transform``; float64 input float64."""
    import pandas as pd

    from eigenflow.spectral import LaplacianEigenmaps

    X = np.random.default_rng(0).normal(size=(400, 5)).astype(np.float32)
    data = pd.DataFrame(X) if as_frame else X
    model = LaplacianEigenmaps(2, random_state=0)
    Z = model.fit_transform(data)
    assert (Z.dtype, model.embedding_.dtype, model.transform(data[:5]).dtype) == (np.float32,) * 3
    assert LaplacianEigenmaps(2, random_state=0).fit(X.astype(np.float64)).embedding_.dtype == np.float64


def test_a_warm_start_from_a_nearly_equal_graph_saves_iterations_and_changes_nothing_else():
    """The start of a refit: the embedding of 9/10 of the rows and the out-of-sample map of the rest start LOBPCG on
    the graph of all rows; it converges to the same pairs (reference: the cold start) in fewer iterations."""
    from eigenflow.spectral.datasets import make_swiss_roll_lifted
    from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps, laplacian_eigenmaps_from_graph
    from eigenflow.spectral.graph.weights import knn_weights
    from eigenflow.spectral.neighbours.knn import knn_graph

    X, _, _ = make_swiss_roll_lifted(11000, random_state=0)
    before = LaplacianEigenmaps(n_components=6, n_neighbors=15, knn_method="exact", random_state=0).fit(X[:10000])
    initial = np.vstack([before.embedding_, before.transform(X[10000:])])
    W = knn_weights(*knn_graph(X, 15, method="exact", random_state=0))
    cold = laplacian_eigenmaps_from_graph(W.copy(), 6, eigen_solver="lobpcg", random_state=0)
    warm = laplacian_eigenmaps_from_graph(W.copy(), 6, eigen_solver="lobpcg", random_state=0, initial=initial)
    assert warm[2]["start_vectors"] == "used" and cold[2]["start_vectors"] is None
    print("LOBPCG iterations cold / warm:", cold[2]["n_iter"], warm[2]["n_iter"])
    assert warm[2]["n_iter"] < cold[2]["n_iter"]
    np.testing.assert_allclose(warm[1], cold[1], rtol=1e-4)
    for j in range(6):
        np.testing.assert_allclose(np.abs(warm[0][:, j] @ cold[0][:, j]) / (np.linalg.norm(warm[0][:, j]) *
                                                                           np.linalg.norm(cold[0][:, j])), 1, atol=1e-4)
    with pytest.raises(InputDataError, match=r"initial must be finite coordinates \(n, j\) with n = 11000 nodes"):
        laplacian_eigenmaps_from_graph(W.copy(), 6, eigen_solver="lobpcg", initial=initial[:10])
