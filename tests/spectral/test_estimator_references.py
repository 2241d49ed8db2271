"""The estimators against their references on the cases where they used to part: dense ``scipy.linalg.eigh``
of the same operator, scikit-learn's estimator on the same data and graph, the transductive result."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from sklearn.datasets import make_circles

from eigenflow import spectral


# ------------------------------------------------------------------ GraphKPCA at scale, randomized eigensolver
def test_graph_kpca_nystrom_randomized_matches_dense_eigh_of_its_operator():
    X = make_circles(1000, factor=0.3, noise=0.05, random_state=0)[0]
    m = spectral.GraphKPCA(10, kernel="rbf", gamma=0, solver="nystrom", eigen_solver="randomized",
                           random_state=0).fit(X)
    Phi = m.nystrom_.transform(X) - m._phi_mean  # the operator Phi Phi^T the solver was given
    w = sla.eigvalsh(Phi @ Phi.T)[::-1][:10]
    np.testing.assert_allclose(m.eigenvalues_, w, rtol=1e-6, atol=0)
    np.testing.assert_allclose(m.transform(X), m.embedding_, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ GraphKPCA: null eigenvalues, n_components
@pytest.mark.parametrize("X, d", [
    (np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]), 2),
    (make_circles(60, factor=0.3, noise=0.05, random_state=0)[0], 3),
])
def test_graph_kpca_null_eigenvalues_give_zero_columns_as_kernel_pca(X, d):
    from sklearn.decomposition import KernelPCA

    for scaling in ("unit", "sqrt_eigenvalue"):
        m = spectral.GraphKPCA(d, kernel="linear", gamma=0, scaling=scaling).fit(X)
        # training points reproduce the fit (duplicated points may take their twin's row: round-off apart)
        np.testing.assert_allclose(m.transform(X), m.embedding_, rtol=0, atol=1e-12)
        ref = KernelPCA(d, kernel="linear").fit(X)
        np.testing.assert_allclose(m.eigenvalues_, ref.eigenvalues_, rtol=1e-10, atol=1e-12)
        null = ref.eigenvalues_ == 0
        assert null.any() and np.all(m.embedding_[:, null] == 0)
        new = X[:3] + 0.1
        Z = m.transform(new)
        assert np.all(Z[:, null] == 0)
        if scaling == "sqrt_eigenvalue":  # KernelPCA's own scaling: equal up to column signs
            Zr = ref.transform(new)
            np.testing.assert_allclose(np.abs(Z), np.abs(Zr), atol=1e-10)


def test_graph_kpca_keeps_components_beyond_n_minus_2():
    from sklearn.decomposition import KernelPCA

    X = make_circles(40, factor=0.3, noise=0.05, random_state=1)[0]
    m = spectral.GraphKPCA(39, kernel="rbf", kernel_params={"gamma": 2.0}, gamma=0).fit(X)
    ref = KernelPCA(39, kernel="rbf", gamma=2.0, eigen_solver="dense").fit(X)
    assert m.embedding_.shape == (40, 39)
    np.testing.assert_allclose(m.eigenvalues_, ref.eigenvalues_, rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------------ LaplacianEigenmaps(affinity="rbf")
@pytest.mark.parametrize("dataset", ["moons", "digits"])
def test_rbf_eigenmaps_equal_scikit_learn_spectral_embedding(dataset):
    from sklearn.datasets import load_digits, make_moons
    from sklearn.manifold import SpectralEmbedding

    X = (make_moons(300, noise=0.05, random_state=0)[0] if dataset == "moons"
         else load_digits().data[:400] / 16.0)
    est = spectral.LaplacianEigenmaps(3, affinity="rbf", n_neighbors=10, random_state=0).fit(X)
    gamma = est.model_.features.gamma  # 1 / sigma^2; every point is a landmark (n <= 1000)
    assert est.model_.features.landmarks_.shape[0] == len(X)
    ref = SpectralEmbedding(3, affinity="rbf", gamma=gamma, eigen_solver="arpack", random_state=0).fit_transform(X)
    # both embeddings are D^-1/2 u_j (up to sign and scale): compare the unit columns
    for j in range(3):
        a, b = est.embedding_[:, j], ref[:, j]
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        assert min(np.abs(a - b).max(), np.abs(a + b).max()) <= 1e-8
    np.testing.assert_array_equal(est.transform(X), est.embedding_)


# ------------------------------------------------------------------ RSK's full spectrum out of sample
def _rsk_problem(name):
    from sklearn.datasets import load_digits, make_blobs, make_moons

    if name == "moons":
        X, y = make_moons(400, noise=0.1, random_state=0)
    elif name == "blobs":
        X, y = make_blobs(400, centers=4, cluster_std=0.7, random_state=0)
    else:
        d = load_digits()
        X, y = d.data[:800] / 16.0, d.target[:800]
    rng = np.random.default_rng(0)
    test = rng.permutation(len(X))[: len(X) // 4]
    train = np.setdiff1d(np.arange(len(X)), test)
    labels = np.full(len(X), -1)
    for c in np.unique(y):  # 10 % of each class's training points labeled
        of_c = train[y[train] == c]
        lab = rng.choice(of_c, size=max(2, of_c.size // 10), replace=False)
        labels[lab] = c
    return X, y, train, test, labels


@pytest.mark.parametrize("name", ["moons", "blobs", "digits"])
@pytest.mark.parametrize("alpha", [0.99, 0.2])
def test_rsk_full_spectrum_predict_agrees_with_transduction(name, alpha):
    X, y, train, test, labels = _rsk_problem(name)
    m = spectral.RSK(alpha, n_components=None, random_state=0).fit(X[train], labels[train])
    # reference: the same fit's transductive accuracy on its unlabeled points
    unlabeled = labels[train] == -1
    transductive = np.mean(m.transduction_[unlabeled] == y[train][unlabeled])
    predicted = np.mean(m.predict(X[test]) == y[test])
    assert predicted >= transductive - 0.05, (predicted, transductive)
    np.testing.assert_array_equal(m.predict(X[train]), m.transduction_)


# ------------------------------------------------------------------ TSK / RSK: scikit-learn's classifier API
def test_rsk_predict_proba_is_label_spreading_normalization():
    X, y, train, test, labels = _rsk_problem("blobs")
    m = spectral.RSK(0.99, n_components=None, random_state=0).fit(X[train], labels[train])
    P = m.predict_proba(X[test])
    assert P.shape == (test.size, 4) and np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_array_equal(m.classes_[P.argmax(axis=1)], m.predict(X[test]))
    # training points: the normalized transductive scores (LabelSpreading's label_distributions_)
    F = np.clip(m.scores_, 0, None)
    np.testing.assert_allclose(m.label_distributions_, F / F.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(m.predict_proba(X[train]), m.label_distributions_)


def test_binary_decision_function_and_class_weight_dict():
    X, y, train, test, labels = _rsk_problem("moons")
    for est in (spectral.RSK(n_components=20, random_state=0), spectral.TSK(20, random_state=0)):
        m = est.fit(X[train], labels[train])
        S = m.class_scores(X[test])
        P = m.predict_proba(X[test])
        np.testing.assert_allclose(m.decision_function(X[test]), P[:, 1] - P[:, 0])
        np.testing.assert_array_equal(m.predict(X[test]), m.classes_[(S[:, 1] > S[:, 0]).astype(int)])
    base = spectral.RSK(n_components=20, random_state=0).fit(X[train], labels[train])
    heavy = spectral.RSK(n_components=20, class_weight={1: 3.0}, random_state=0).fit(X[train], labels[train])
    np.testing.assert_allclose(heavy.scores_[:, 1], 3.0 * base.scores_[:, 1])
    np.testing.assert_allclose(heavy.scores_[:, 0], base.scores_[:, 0])
    with pytest.raises(spectral.ParameterError, match=r"class_weight has key 7, which is not one of the classes \[0, 1\]"):
        spectral.RSK(n_components=20, class_weight={7: 1.0}).fit(X[train], labels[train])


# ------------------------------------------------------------------ disconnected graphs, per component
def test_per_component_embeddings_do_not_coincide_and_keep_their_own_eigenmaps():
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs
    from sklearn.manifold import SpectralEmbedding
    from sklearn.metrics import normalized_mutual_info_score as nmi

    X, y = make_blobs(300, centers=[[0, 0], [30, 0], [0, 30]], cluster_std=1.0, random_state=0)
    est = spectral.LaplacianEigenmaps(2, n_neighbors=8, on_disconnected="per_component", random_state=0).fit(X)
    assert est.n_connected_components_ == 3
    Z = est.embedding_
    ref = SpectralEmbedding(2, affinity="nearest_neighbors", n_neighbors=8, random_state=0).fit_transform(X)
    assert nmi(y, KMeans(3, n_init=10, random_state=0).fit_predict(ref)) == 1.0  # the reference separates them
    assert nmi(y, KMeans(3, n_init=10, random_state=0).fit_predict(Z)) == 1.0
    # each component's rows, untranslated, are the eigenmap of its own subgraph
    labels = est.model_.component_labels
    offsets = est.model_.component_offsets
    W = est.affinity_matrix_
    for c in range(3):
        rows = np.flatnonzero(labels == c)
        own, _, _ = spectral.laplacian_eigenmaps_from_graph(W[rows][:, rows], 2, eigen_solver="dense")
        np.testing.assert_allclose(Z[rows] - offsets[c], own, atol=1e-8)
    np.testing.assert_array_equal(est.transform(X), Z)
    # a new point near a component lands near that component, not at another's place
    new = est.transform(X[:5] + 0.05)
    assert np.all(np.abs(new - Z[:5]).max(axis=1) < np.abs(offsets[1, 0] - offsets[0, 0]) / 4)


# ------------------------------------------------------------------ float32, feature names, set_output
TRANSFORMERS = ("LaplacianEigenmaps", "DNE", "MFA", "LFDA", "NSSE", "SupervisedLaplacianEigenmaps", "GraphKPCA",
                "MultiGraphKPCA", "LNEG")


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_float32_in_float32_out_and_named_columns_like_kernel_pca(name):
    from sklearn.datasets import make_moons
    from sklearn.decomposition import KernelPCA

    X, y = make_moons(120, noise=0.05, random_state=0)
    X32 = X.astype(np.float32)
    ref = KernelPCA(2).fit(X32)  # scikit-learn's convention: float32 kept
    assert ref.transform(X32).dtype == np.float32
    est = getattr(spectral, name)(random_state=0) if "random_state" in getattr(spectral, name)().get_params() \
        else getattr(spectral, name)()
    Z32 = est.fit_transform(X32, y)
    assert Z32.dtype == np.float32 and est.transform(X32[:7]).dtype == np.float32
    assert est.transform(X[:7]).dtype == np.float64
    # the same numbers as the float64 result of the same (float32-valued) input, rounded
    np.testing.assert_array_equal(Z32, est.fit_transform(X32.astype(np.float64), y).astype(np.float32))
    names = est.get_feature_names_out()
    assert list(names) == [f"{name.lower()}{i}" for i in range(Z32.shape[1])]
    df = est.set_output(transform="pandas").transform(X[:5])
    assert list(df.columns) == list(names) and df.shape == (5, Z32.shape[1])


def test_pipeline_point_outputs_keep_a_float32_chunk_float32():
    from sklearn.datasets import make_moons

    from eigenflow.tasks.registry import EMBEDDING, get_entry, point_outputs

    X, _ = make_moons(150, noise=0.05, random_state=0)
    X32 = X.astype(np.float32)
    model = spectral.GraphKPCA(2).fit(X32)
    out32 = point_outputs(get_entry("graph_kpca"), model, X32[:20] + np.float32(0.01))
    out64 = point_outputs(get_entry("graph_kpca"), model, (X32[:20] + np.float32(0.01)).astype(np.float64))
    assert out32[EMBEDDING].dtype == np.float32 and out64[EMBEDDING].dtype == np.float64
    np.testing.assert_array_equal(out32[EMBEDDING], out64[EMBEDDING].astype(np.float32))
