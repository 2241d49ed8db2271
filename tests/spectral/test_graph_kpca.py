"""STG18 (GRAD): GraphKPCA and MultiGraphKPCA against independent references.

References: scikit-learn KernelPCA / PCA, dense matrices assembled here from sklearn kernels and
scipy.sparse.csgraph Laplacians, graph kernels from numpy.linalg.inv / scipy.linalg.expm, eigh.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import gaussian_blobs
import scipy.linalg as la
import scipy.sparse as sp
from scipy.sparse.csgraph import laplacian as csgraph_laplacian
from sklearn.decomposition import PCA, KernelPCA
from sklearn.metrics.pairwise import rbf_kernel

from eigenflow.spectral.errors import InputDataError, ParameterAdjustedWarning, ParameterError
from eigenflow.spectral.methods.graph_kpca import GraphKPCA, MultiGraphKPCA
from eigenflow.spectral.methods.graph_kpca import graphs as G


def max_angle(A, B):
    return float(np.max(la.subspace_angles(A, B)))


def top_d(M, d):
    lam, V = la.eigh(M)
    return V[:, ::-1][:, :d]


@pytest.fixture(scope="module")
def blobs():
    X, y, _, _ = gaussian_blobs(60, 8, seed=0)
    return X, y


def random_graph(n, rng, p=0.05):
    A = sp.random(n, n, density=p, random_state=np.random.RandomState(int(rng.integers(1e6))))
    A = A + A.T
    A.setdiag(0)
    A.eliminate_zeros()
    return A.tocsr()


def centered_rbf(X, g):
    K = rbf_kernel(X, gamma=g)
    H = np.eye(len(X)) - 1.0 / len(X)
    return H @ K @ H


def test_gamma_zero_equals_sklearn_kernel_pca(blobs):
    X, _ = blobs
    Z = GraphKPCA(4, kernel="rbf", kernel_params={"gamma": 0.05}, gamma=0.0, scaling="sqrt_eigenvalue").fit_transform(X)
    R = KernelPCA(4, kernel="rbf", gamma=0.05, eigen_solver="dense").fit_transform(X)
    assert max_angle(Z, R) < 1e-8
    np.testing.assert_allclose(np.abs(Z), np.abs(R), atol=1e-8)


def test_linear_kernel_equals_pca(blobs):
    X, _ = blobs
    Z = GraphKPCA(3, kernel="linear", gamma=0.0, scaling="sqrt_eigenvalue").fit_transform(X)
    R = PCA(3, svd_solver="full").fit_transform(X)
    np.testing.assert_allclose(np.abs(Z), np.abs(R), atol=1e-8)


def test_eq13_user_graph_matches_dense_reference(blobs):
    X, _ = blobs
    rng = np.random.default_rng(1)
    A = random_graph(len(X), rng)
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, gamma=2.0, graph=A).fit(X)
    ref = top_d(centered_rbf(X, 0.05) - 2.0 * csgraph_laplacian(A.toarray()), 3)
    # the third eigenpair is the constant vector at eigenvalue 0 (H 1 = L 1 = 0): a null component without a
    # kNN-graph term in its extension, a column of zeros as in KernelPCA
    assert max_angle(m.embedding_[:, :2], ref[:, :2]) < 1e-8
    np.testing.assert_allclose(np.linalg.norm(m.embedding_[:, :2], axis=0), 1.0)
    assert m.eigenvalues_[2] == 0 and np.all(m.embedding_[:, 2] == 0)


@pytest.mark.parametrize("name,params,ref", [
    ("regularized", {"s": 1.5}, lambda L: np.linalg.inv(np.eye(len(L)) + 1.5**2 * L)),
    ("diffusion", {"s": 1.0}, lambda L: la.expm(-0.5 * L)),
    ("random_walk", {"a": 2.0, "p": 3}, lambda L: np.linalg.matrix_power(2.0 * np.eye(len(L)) - L, 3)),
])
def test_eq14_graph_kernels_match_closed_forms(blobs, name, params, ref):
    X, _ = blobs
    A = random_graph(len(X), np.random.default_rng(2))
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, gamma=3.0, graph=A, laplacian="symmetric",
                  graph_kernel=name, graph_kernel_params=params).fit(X)
    Lsym = csgraph_laplacian(A.toarray(), normed=True)
    expected = top_d(centered_rbf(X, 0.05) + 3.0 * ref(Lsym), 3)
    assert max_angle(m.embedding_, expected) < 1e-7


def test_eq24_constraints_from_labels_and_pairs(blobs):
    X, y = blobs
    n = len(X)
    yl = np.full(n, -1)
    labeled = np.random.default_rng(3).choice(n, 30, replace=False)
    yl[labeled] = y[labeled]
    m = GraphKPCA(2, kernel_params={"gamma": 0.05}, graph=None, gamma_must=0.5, gamma_cannot=0.5).fit(X, yl)
    AS = np.zeros((n, n))
    AD = np.zeros((n, n))
    for i in labeled:
        for j in labeled:
            if i != j:
                (AS if y[i] == y[j] else AD)[i, j] = 1.0
    ref = top_d(centered_rbf(X, 0.05) - 0.5 * csgraph_laplacian(AS) + 0.5 * csgraph_laplacian(AD), 2)
    assert max_angle(m.embedding_, ref) < 1e-8
    S = np.argwhere(np.triu(AS))
    D = np.argwhere(np.triu(AD))
    m2 = GraphKPCA(2, kernel_params={"gamma": 0.05}, graph=None, must_link=S, cannot_link=D, gamma_must=0.5,
                   gamma_cannot=0.5).fit(X)
    assert max_angle(m2.embedding_, ref) < 1e-8
    # "auto" (the default): 0.5 / the largest constraint degree (29 here: every labeled point is linked to the
    # 29 other labeled points)
    m3 = GraphKPCA(2, kernel_params={"gamma": 0.05}, graph=None).fit(X, yl)
    assert m3.gamma_must_ == m3.gamma_cannot_ == pytest.approx(0.5 / 29)
    g = 0.5 / 29
    ref3 = top_d(centered_rbf(X, 0.05) - g * csgraph_laplacian(AS) + g * csgraph_laplacian(AD), 2)
    assert max_angle(m3.embedding_, ref3) < 1e-8


def test_default_constraint_weights_keep_unlabeled_points_usable():
    """Defaults that work (gamma_must = gamma_cannot = "auto"): GraphKPCA fitted with labels on 20 COIL-20
    images per class of 10 objects (200 of 720 points) gives the unlabeled points an embedding where 1-NN on
    the labeled points is within 0.05 of kernel PCA's. The old default 0.5 makes the top eigenvectors class
    contrasts supported on the labeled points only: 0.29 here against 0.93 with "auto" and 0.95 for KPCA."""
    from tests.helpers import load_dataset
    from sklearn.neighbors import KNeighborsClassifier

    X, y = load_dataset("coil20")
    keep = y < 10
    X, y = X[keep], y[keep]
    rng = np.random.default_rng(0)
    lab = np.concatenate([rng.choice(np.flatnonzero(y == c), 20, replace=False) for c in range(10)])
    unl = np.setdiff1d(np.arange(len(y)), lab)
    semi = -np.ones_like(y)
    semi[lab] = y[lab]

    def nn_acc(Z):
        return np.mean(KNeighborsClassifier(1).fit(Z[lab], y[lab]).predict(Z[unl]) == y[unl])

    kpca = nn_acc(GraphKPCA(9, gamma=0.0, graph=None).fit(X).embedding_)
    assert nn_acc(GraphKPCA(9).fit(X, semi).embedding_) >= kpca - 0.05


@pytest.mark.parametrize("kwargs", [
    {"graph": "knn", "gamma": 1.0},
    {"graph": "knn", "gamma": 1.0, "laplacian": "symmetric"},
    {"graph": "knn", "gamma": 2.0, "laplacian": "symmetric", "graph_kernel": "diffusion"},
    {"graph": "knn", "gamma": 1.0, "solver": "nystrom", "n_landmarks": 60},
])
def test_transform_of_training_points_reproduces_fit(blobs, kwargs):
    X, y = blobs
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, random_state=0, **kwargs).fit(X)
    np.testing.assert_allclose(m.transform(X), m.embedding_, atol=1e-12)
    Z = m.transform(X[:5] + 1e-3)  # unseen points: finite, close to their source's neighbourhood
    assert np.all(np.isfinite(Z))


def test_out_of_sample_eq13_satisfies_augmented_eigen_equation(blobs):
    """With gamma = 0 the extension is the kernel PCA projection: compare with sklearn's transform."""
    X, _ = blobs
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, gamma=0.0, scaling="sqrt_eigenvalue").fit(X[:150])
    ref = KernelPCA(3, kernel="rbf", gamma=0.05, eigen_solver="dense").fit(X[:150])
    np.testing.assert_allclose(np.abs(m.transform(X[150:])), np.abs(ref.transform(X[150:])), atol=1e-8)


def _implicit_vs_dense(n):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((n, 5))
    kw = dict(kernel_params={"gamma": 0.2}, gamma=0.5, n_neighbors=8, random_state=0)
    dense = GraphKPCA(4, **kw).fit(X)
    imp = GraphKPCA(4, solver="nystrom", n_landmarks=n, tol=1e-9, **kw).fit(X)  # m = n: exact features
    assert max_angle(dense.embedding_, imp.embedding_) < 1e-6
    np.testing.assert_allclose(imp.eigenvalues_, dense.eigenvalues_, rtol=1e-8)
    approx = GraphKPCA(4, solver="nystrom", n_landmarks=n // 5, **kw).fit(X)  # a real low-rank approximation
    assert max_angle(dense.embedding_, approx.embedding_) < 0.1


def test_nystrom_implicit_path_equals_dense_path():
    _implicit_vs_dense(500)


@pytest.mark.slow
def test_nystrom_implicit_path_equals_dense_path_few_thousand():
    _implicit_vs_dense(3000)


def test_bad_inputs_raise_clear_errors(blobs):
    X, _ = blobs
    n = len(X)
    with pytest.raises(InputDataError, match=r"pair \(1, 2\) is both must_link and cannot_link"):
        GraphKPCA(2, graph=None, must_link=[[1, 2]], cannot_link=[[2, 1]]).fit(X)
    with pytest.raises(InputDataError, match=r"must_link indices must be in \[0, 179\]; got values in \[0, 500\]"):
        GraphKPCA(2, graph=None, must_link=[[0, 500]]).fit(X)
    with pytest.raises(InputDataError, match=r"graph must have shape \(180, 180\)"):
        GraphKPCA(2, graph=sp.identity(n - 1, format="csr")).fit(X)
    asym = sp.csr_matrix(([1.0], ([0], [1])), shape=(n, n))
    with pytest.raises(InputDataError, match="graph must be symmetric"):
        GraphKPCA(2, graph=asym).fit(X)
    with pytest.raises(InputDataError, match="weights must be >= 0"):
        GraphKPCA(2, graph=-(asym + asym.T)).fit(X)
    with pytest.raises(ParameterError, match=r"gamma must be a real number in \[0.0, inf\); got -1.0"):
        GraphKPCA(2, gamma=-1.0).fit(X)
    with pytest.raises(ParameterError, match="graph_kernel must be one of"):
        GraphKPCA(2, graph_kernel="heat").fit(X)
    with pytest.raises(ParameterError, match=r"graph_kernel_params\['a'\] must be >= the largest"):
        GraphKPCA(2, graph_kernel="random_walk", graph_kernel_params={"a": 0.5}).fit(X)
    with pytest.raises(ParameterError, match=r"n_components must be an integer in \[1, 180\]; got 0"):
        GraphKPCA(0).fit(X)
    with pytest.warns(ParameterAdjustedWarning, match=r"n_components=181 is larger than n_samples = 180; using n_components=180"):
        assert GraphKPCA(n + 1).fit(X).embedding_.shape == (n, n)


# ----------------------------------------------------------------------------- multi-kernel / multi-graph
def test_theta_beta_updates_never_increase_objective_and_stay_nonnegative(blobs):
    X, _ = blobs
    rng = np.random.default_rng(5)
    graphs = [random_graph(len(X), rng), random_graph(len(X), rng, 0.1)]
    m = MultiGraphKPCA(3, kernels=(("rbf", {"gamma": 0.05}), ("linear", None), ("poly", {"degree": 2})),
                       graphs=graphs, graph_kernel="regularized", gamma=5.0, lambda_theta=50.0,
                       lambda_beta=0.5, max_iter=20).fit(X)
    tr = np.asarray(m.objective_trace_)
    assert np.all(np.diff(tr) <= 1e-9 * np.abs(tr[:-1]))
    assert np.all(m.theta_ >= 0) and np.all(m.beta_ >= 0) and m.theta_.sum() > 0
    # fixed point of eq. 17 / 20 for the final embedding: theta_q = tr(V^T K_c^(q) V) / (2 lambda)
    Kc = [centered_rbf(X, 0.05)]
    V = m.embedding_
    np.testing.assert_allclose(m.theta_[0], max(np.trace(V.T @ Kc[0] @ V), 0) / 100.0, rtol=1e-3)


def test_multi_modal_hamming_mode_and_fixed_weights(blobs):
    X, _ = blobs
    rng = np.random.default_rng(6)
    Xb = (rng.random((len(X), 6)) > 0.5).astype(float)
    XX = np.hstack([X, Xb])
    m = MultiGraphKPCA(2, kernels=(("rbf", {"gamma": 0.05}),), modes=[(np.arange(8), "euclidean"),
                       (np.arange(8, 14), "hamming")], graph_kernel=None, learn_theta=False,
                       learn_beta=False, laplacian="unnormalized", gamma=0.3).fit(XX)
    # eq. 21 with theta = beta = 1: top eigenvectors of K_c - gamma (L^1 + L^2)
    L = sum(csgraph_laplacian(A.toarray()) for A in m.graphs_)
    ref = top_d(centered_rbf(XX, 0.05) - 0.3 * L, 2)
    assert max_angle(m.embedding_, ref) < 1e-8
    np.testing.assert_allclose(m.transform(XX), m.embedding_)
    with pytest.raises(ParameterError, match="learn_beta=True needs a graph_kernel"):
        MultiGraphKPCA(2, modes=[(np.arange(8), "euclidean")], graph_kernel=None).fit(XX)
    with pytest.raises(ParameterError, match=r"modes\[0\] columns must be in \[0, 13\]"):
        MultiGraphKPCA(2, modes=[(np.arange(20), "euclidean")]).fit(XX)


def test_state_round_trip_and_extension_with_given_neighbors(blobs):
    from sklearn.neighbors import NearestNeighbors

    X, _ = blobs
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, gamma=1.0, solver="nystrom", n_landmarks=80,
                  nystrom_rank=40, random_state=0).fit(X[:150])
    arrays, attrs = m.to_state()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    import json

    r = GraphKPCA.from_state(arrays, json.loads(json.dumps(attrs)))  # JSON-able attributes only (no pickle)
    ind, dist = m.knn_index_.query(X[150:], m.n_neighbors_)  # what transform uses (float32 distances)
    np.testing.assert_allclose(r.transform_with_neighbors(X[150:], ind, dist), m.transform(X[150:]), atol=1e-12)
    # scikit-learn's float64 search as the neighbours: the same up to the float32 rounding of the distances
    dist, ind = NearestNeighbors(n_neighbors=m.n_neighbors).fit(X[:150]).kneighbors(X[150:])
    np.testing.assert_allclose(r.transform_with_neighbors(X[150:], ind, dist), m.transform(X[150:]), rtol=1e-6,
                               atol=1e-9)
    np.testing.assert_array_equal(r.transform(X[150:]), m.transform(X[150:]))  # the index rebuilt from X_fit


@pytest.mark.parametrize("kw", [{"solver": "dense"}, {"solver": "dense", "graph_weight": "cosine"},
                                {"solver": "nystrom", "n_landmarks": 60, "graph_kernel": "regularized"}])
def test_state_round_trip_is_bit_identical(blobs, kw):
    import json

    X, _ = blobs
    m = GraphKPCA(3, kernel="poly", kernel_params={"degree": 2}, gamma=0.5, random_state=0, **kw).fit(X[:150])
    r = GraphKPCA.from_state(*(lambda a, t: (a, json.loads(json.dumps(t))))(*m.to_state()))
    np.testing.assert_array_equal(r.transform(X), m.transform(X))
    np.testing.assert_array_equal(r.transform(X[:150]), m.embedding_)


def test_transform_queries_the_index_built_at_fit(blobs, monkeypatch):
    """transform never refits a neighbour search: it queries knn_index_ (built once at fit)."""
    import eigenflow.spectral.neighbours.knn as knn_mod

    X, _ = blobs
    m = GraphKPCA(3, kernel_params={"gamma": 0.05}, gamma=1.0, n_neighbors=6).fit(X[:150])
    assert m.knn_index_.n_samples == 150

    def no_build(*a, **k):
        raise AssertionError("a kNN index was built in transform")

    monkeypatch.setattr(knn_mod.KNNIndex, "_build", classmethod(no_build))
    Z = m.transform(X[150:])
    ref = NearestNeighborsReference(X[:150], X[150:], 6)
    np.testing.assert_allclose(Z, m.transform_with_neighbors(X[150:], *ref), rtol=1e-6, atol=1e-9)


def NearestNeighborsReference(X_fit, X_new, k):
    """``(ind, dist)`` of scikit-learn's exact search (the reference for the index's answers)."""
    from sklearn.neighbors import NearestNeighbors

    dist, ind = NearestNeighbors(n_neighbors=k).fit(X_fit).kneighbors(X_new)
    return ind, dist


def test_precomputed_knn_equals_internal_search(blobs):
    from eigenflow.spectral.neighbours.knn import knn_graph

    X, _ = blobs
    ind, dist = knn_graph(X, 7, method="exact")
    a = GraphKPCA(3, kernel_params={"gamma": 0.05}, n_neighbors=7).fit(X)
    b = GraphKPCA(3, kernel_params={"gamma": 0.05}, precomputed_knn=(ind, dist)).fit(X)
    assert max_angle(a.embedding_, b.embedding_) < 1e-8
    with pytest.raises(InputDataError, match="indices must lie in"):
        GraphKPCA(3, precomputed_knn=(ind + 1000, dist)).fit(X)


def test_landmarks_above_n_are_clipped_with_a_warning():
    X = np.random.default_rng(0).normal(size=(60, 3))
    with pytest.warns(ParameterAdjustedWarning, match="n_landmarks=1000 is larger than n_samples = 60; using n_landmarks=60"):
        est = GraphKPCA(2, solver="nystrom").fit(X)
    assert est.embedding_.shape == (60, 2)


@pytest.mark.parametrize("weight", ["gaussian", "binary"])
def test_data_graph_weights_against_scikit_learn_knn(blobs, weight):
    """The kNN data graph (KNNIndex + spectral.graph.weights) equals exp(-d^2 / (2 sigma^2)) / 1 on the OR of
    scikit-learn's exact kNN relation."""
    from sklearn.neighbors import NearestNeighbors

    X = blobs[0][:120]
    dist, ind = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    dist, ind = dist[:, 1:], ind[:, 1:]
    vals = np.exp(-dist**2 / (2 * 0.7**2)) if weight == "gaussian" else np.ones_like(dist)
    ref = np.zeros((120, 120))
    ref[np.repeat(np.arange(120), 5), ind.ravel()] = vals.ravel()
    ref = np.maximum(ref, ref.T)
    A = G.data_graph(X, 5, weight=weight, sigma=0.7)
    np.testing.assert_allclose(A.toarray(), ref, rtol=1e-6, atol=0)


def test_multigraph_defaults_build_one_knn_graph(blobs):
    """Defaults that work: MultiGraphKPCA() (gamma = 1, no graphs / modes given) raised ParameterError; it now
    uses one kNN graph of all the features, the same fit as modes=[(all columns, "euclidean")]."""
    X, _ = blobs
    default = MultiGraphKPCA(2).fit(X)
    explicit = MultiGraphKPCA(2, modes=[(np.arange(X.shape[1]), "euclidean")]).fit(X)
    assert len(default.graphs_) == 1
    assert max_angle(default.embedding_, explicit.embedding_) < 1e-8


@pytest.mark.parametrize("n_components", [10, 16])
def test_nystrom_randomized_with_many_components_is_kernel_pca(n_components):
    """gamma=0 is kernel PCA: with every point a landmark (an exact Nystrom factor) the randomized eigensolver
    converges for 10 and more components on 1,000 points on circles (RBF kernel) and gives scikit-learn's
    ``KernelPCA`` projections (up to sign)."""
    from sklearn.datasets import make_circles
    from sklearn.decomposition import KernelPCA

    X, _ = make_circles(1000, factor=0.3, noise=0.05, random_state=0)
    ours = GraphKPCA(n_components, kernel_params={"gamma": 2.0}, gamma=0.0, solver="nystrom", n_landmarks=1000,
                     eigen_solver="randomized", scaling="sqrt_eigenvalue", random_state=0).fit_transform(X)
    theirs = KernelPCA(n_components, kernel="rbf", gamma=2.0, eigen_solver="dense").fit_transform(X)
    signs = np.sign(np.sum(ours * theirs, axis=0))
    np.testing.assert_allclose(ours * signs, theirs, atol=1e-5 * np.abs(theirs).max())  # the solver's tolerance
