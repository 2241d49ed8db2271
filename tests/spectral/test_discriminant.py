"""CK08 estimators (DNE, MFA, LFDA) against textbook dense computations written from the paper's definitions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from sklearn.neighbors import NearestNeighbors
from tests.helpers import load_dataset

from eigenflow.spectral.errors import InputDataError, NotPositiveDefiniteError, ParameterAdjustedWarning, ParameterError
from eigenflow.spectral.methods.discriminant import DNE, LFDA, MFA


def blobs(n_per=15, n_classes=3, d=5, seed=0, n_unlabeled=0, spread=3.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=spread, size=(n_classes, d))
    X = np.vstack([c + rng.normal(size=(n_per, d)) for c in centers])
    y = np.repeat(np.arange(n_classes), n_per)
    if n_unlabeled:
        X = np.vstack([X, centers[rng.integers(0, n_classes, n_unlabeled)] + rng.normal(size=(n_unlabeled, d))])
        y = np.concatenate([y, -np.ones(n_unlabeled, int)])
    return X, y


# ----------------------------------------------------------------------------- textbook references
def textbook_label_graphs(X, y, k):
    """W^I / W^E of Sect. 2.1.2 by explicit loops over the labeled points."""
    n = len(X)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    WI, WE = np.zeros((n, n)), np.zeros((n, n))
    lab = [i for i in range(n) if y[i] >= 0]
    for i in lab:
        same = sorted((D[i, j], j) for j in lab if j != i and y[j] == y[i])
        diff = sorted((D[i, j], j) for j in lab if y[j] != y[i])
        for _, j in same[:k]:
            WI[i, j] = WI[j, i] = 1.0
        for _, j in diff[:k]:
            WE[i, j] = WE[j, i] = 1.0
    return WI, WE


def textbook_lfda(WI, y):
    lab = y >= 0
    n = lab.sum()
    m = len(y)
    Wb, Ww = np.zeros((m, m)), np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            if i == j or not (lab[i] and lab[j]):
                continue
            if y[i] == y[j]:
                nk = np.sum(y == y[i])
                Wb[i, j] = WI[i, j] * (1 / nk - 1 / n)
                Ww[i, j] = WI[i, j] / nk
            else:
                Wb[i, j] = -1 / n
    return Wb, Ww


def textbook_problem(X, y, method, k):
    """``(A, B)`` of the supervised generalized problem ``A v = lambda B v`` of Sect. 2.1.2 (eq. 7)."""
    WI, WE = textbook_label_graphs(X, y, k)
    if method == "DNE":
        return scatter(X, WI - WE), np.eye(X.shape[1])
    if method == "MFA":
        return scatter(X, WI), scatter(X, WE)
    Wb, Ww = textbook_lfda(WI, y)
    return scatter(X, Wb), scatter(X, Ww)


def scatter(X, W):
    """sum_ij w_ij (x_i - x_j)(x_i - x_j)^T / 2 = X^T (D - W) X (the cost of eq. 5)."""
    S = np.zeros((X.shape[1], X.shape[1]))
    for i in range(len(X)):
        for j in range(len(X)):
            diff = X[i] - X[j]
            S += 0.5 * W[i, j] * np.outer(diff, diff)
    return S


def local_scaling_graph(X, k):
    """W^(2) of eq. 15 (exp(-d^2 / (sigma_i sigma_j))), kNN OR-symmetrized, with scikit-learn's kNN."""
    dist, idx = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)
    dist, idx = dist[:, 1:], idx[:, 1:]
    sig = dist[:, -1]
    W = np.zeros((len(X), len(X)))
    for i in range(len(X)):
        for m in range(k):
            j = idx[i, m]
            W[i, j] = W[j, i] = np.exp(-dist[i, m] ** 2 / (sig[i] * sig[j]))
    return W


def assert_same_columns(A, B, atol=1e-6):
    """Columns equal up to sign."""
    assert A.shape == B.shape
    for a, b in zip(A.T, B.T):
        s = np.sign(a @ b) or 1.0
        np.testing.assert_allclose(a, s * b, atol=atol * max(1.0, np.abs(b).max()))


# ----------------------------------------------------------------------------- against dense eigh
@pytest.mark.parametrize("method", ["DNE", "MFA", "LFDA"])
def test_linear_supervised_matches_textbook(method):
    X, y = blobs(seed=1)
    k = 3
    vals, vecs = scipy.linalg.eigh(*textbook_problem(X, y, method, k))
    d = int(np.sum(vals < -1e-9 * np.abs(vals).max())) if method == "DNE" else 3
    est = {"DNE": DNE, "MFA": MFA, "LFDA": LFDA}[method](n_neighbors=k, reg_eps=0.0).fit(X, y)
    assert est.n_components_ == d
    np.testing.assert_allclose(est.eigenvalues_, vals[:d], rtol=1e-7, atol=1e-9)
    assert_same_columns(est.coef_, vecs[:, :d])
    Xn = np.random.default_rng(5).normal(size=(4, X.shape[1]))
    Z_ref = (Xn - X.mean(0)) @ vecs[:, :d]
    assert_same_columns(est.transform(Xn), Z_ref)


def test_semi_supervised_lfda_matches_textbook():
    X, y = blobs(n_per=12, seed=2, n_unlabeled=20)
    k, gamma = 3, 0.5
    WI, _ = textbook_label_graphs(X, y, k)
    Wb, Ww = textbook_lfda(WI, y)
    A = scatter(X, Wb + gamma * local_scaling_graph(X, k))  # eq. 12: W = W^(1) + gamma W^(2)
    vals, vecs = scipy.linalg.eigh(A, scatter(X, Ww))
    est = LFDA(n_neighbors=k, gamma=gamma, reg_eps=0.0).fit(X, y)
    np.testing.assert_allclose(est.eigenvalues_, vals[:3], rtol=1e-7, atol=1e-12)
    assert_same_columns(est.coef_, vecs[:, :3])


@pytest.mark.parametrize("method", ["MFA", "LFDA"])
def test_small_classes_keep_matches_textbook(method):
    """A class with 1 or 2 labeled points (< k = 3) kept as labeled: Neig^I = its other points (Sect. 2.1.2)."""
    X, y = blobs(n_per=12, n_classes=4, seed=4)
    y = y.copy()
    y[np.flatnonzero(y == 2)[2:]] = -1  # class 2: 2 labeled points
    y[np.flatnonzero(y == 3)[1:]] = -1  # class 3: a singleton
    lab = y >= 0
    Xl, yl = X[lab], y[lab]
    vals, vecs = scipy.linalg.eigh(*textbook_problem(Xl, yl, method, 3))
    with pytest.raises(InputDataError, match="class 2 has 2 labeled points.*small_classes='keep'"):
        {"MFA": MFA, "LFDA": LFDA}[method](reg_eps=0.0).fit(X, y)
    est = {"MFA": MFA, "LFDA": LFDA}[method](reg_eps=0.0, small_classes="keep").fit(X, y)
    assert est.n_components_ == 4
    np.testing.assert_allclose(est.eigenvalues_, vals[:4], rtol=1e-7, atol=1e-9)
    assert_same_columns(est.coef_, vecs[:, :4])


def test_transductive_dne_is_eq4():
    X, y = blobs(n_per=10, seed=3, n_unlabeled=12)
    WI, WE = textbook_label_graphs(X, y, 3)
    W = WI - WE + 0.3 * local_scaling_graph(X, 3)
    L = np.diag(W.sum(1)) - W
    vals, vecs = np.linalg.eigh(L)
    est = DNE(n_components=2, gamma=0.3, mode="transductive").fit(X, y)
    np.testing.assert_allclose(est.eigenvalues_ * (1 + 1e-4), vals[:2], rtol=1e-8)  # C + eps I with C = I
    assert_same_columns(est.embedding_, vecs[:, :2] / np.sqrt(1 + 1e-4))


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("cls", [DNE, MFA, LFDA])
@pytest.mark.parametrize("mode", ["linear", "kernel"])
def test_gamma_zero_equals_supervised(cls, mode):
    X, y = blobs(seed=4, n_unlabeled=15)
    lab = y >= 0
    semi = cls(gamma=0.0, mode=mode, n_components=2).fit(X, y)
    sup = cls(gamma=0.0, mode=mode, n_components=2).fit(X[lab], y[lab])
    np.testing.assert_allclose(semi.transform(X), sup.transform(X), atol=1e-10)


def test_no_labels_ss_dne_is_lpp_style():
    X, _ = blobs(seed=5)
    y = -np.ones(len(X), int)
    W2 = local_scaling_graph(X, 4)
    vals, vecs = np.linalg.eigh(scatter(X, W2))  # X^T L^(2) X a = lambda a (C = I)
    est = DNE(n_components=2, gamma=1.0, manifold_neighbors=4).fit(X, y)
    np.testing.assert_allclose(est.eigenvalues_, vals[:2], rtol=1e-8)
    assert_same_columns(est.coef_, vecs[:, :2])


@pytest.mark.parametrize("cls", [DNE, MFA, LFDA])
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_linear_kernel_equals_linear_variant(cls, gamma):
    X, y = blobs(seed=6, n_unlabeled=10)
    Xn = np.random.default_rng(0).normal(size=(5, X.shape[1]))
    lin = cls(gamma=gamma, regularization="pca", n_components=2).fit(X, y)
    ker = cls(gamma=gamma, mode="kernel", kernel="linear", regularization="pca", n_components=2).fit(X, y)
    np.testing.assert_allclose(ker.eigenvalues_, lin.eigenvalues_, rtol=1e-6, atol=1e-9)
    assert_same_columns(ker.transform(Xn), lin.transform(Xn), atol=1e-6)
    assert_same_columns(ker.embedding_, lin.embedding_, atol=1e-6)


@pytest.mark.parametrize("cls", [DNE, MFA, LFDA])
def test_nystrom_all_landmarks_equals_exact_kernel(cls):
    X, y = blobs(n_per=10, seed=7, n_unlabeled=10, spread=1.0)  # overlapping: W^(2) connected
    kw = dict(gamma=0.2, mode="kernel", kernel="rbf", kernel_params={"gamma": 0.05}, regularization="pca",
              n_components=2)
    exact = cls(**kw).fit(X, y)
    nys = cls(n_landmarks=len(X), random_state=0, **kw).fit(X, y)
    Xn = X[:5] + 0.1
    np.testing.assert_allclose(nys.eigenvalues_, exact.eigenvalues_, rtol=1e-6, atol=1e-10)
    assert_same_columns(nys.transform(Xn), exact.transform(Xn), atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "kernel"])
def test_fit_transform_equals_transform(mode):
    X, y = blobs(seed=8, n_unlabeled=10)
    est = MFA(mode=mode, gamma=0.1)
    Z = est.fit_transform(X, y)
    np.testing.assert_allclose(Z, est.transform(X), atol=1e-12)
    assert Z.shape == (len(X), 3)  # default d = c for MFA / LFDA


def test_scalings_of_remark_2():
    X, y = blobs(seed=9)
    base = LFDA().fit(X, y)
    unit = LFDA(scaling="unit_norm").fit(X, y)
    np.testing.assert_allclose(np.linalg.norm(unit.coef_, axis=0), 1.0)
    sq = LFDA(scaling="sqrt_eigenvalue").fit(X, y)
    np.testing.assert_allclose(np.abs(sq.coef_), np.abs(base.coef_) * np.sqrt(np.abs(base.eigenvalues_)))
    both = LFDA(scaling="sqrt_eigenvalue_unit_norm").fit(X, y)
    np.testing.assert_allclose(np.linalg.norm(both.coef_, axis=0), np.sqrt(np.abs(base.eigenvalues_)))


@pytest.mark.parametrize("mode,regularization", [("linear", "eps"), ("kernel", "pca"), ("kernel", "eps"),
                                                  ("transductive", "eps")])
@pytest.mark.parametrize("start", ["identity", "sqrt_eigenvalue"])
def test_rescaled_equals_a_refit(mode, regularization, start):
    X, y = blobs(seed=11, n_unlabeled=6)
    fitted = MFA(mode=mode, gamma=0.2, regularization=regularization, scaling=start).fit(X, y)
    for scaling in ("identity", "unit_norm", "sqrt_eigenvalue", "sqrt_eigenvalue_unit_norm"):
        refit = MFA(mode=mode, gamma=0.2, regularization=regularization, scaling=scaling).fit(X, y)
        again = fitted.rescaled(scaling)
        assert again.scaling == scaling and fitted.scaling == start
        np.testing.assert_allclose(again.embedding_, refit.embedding_, rtol=1e-9, atol=1e-9)
        if mode != "transductive":
            np.testing.assert_allclose(again.transform(X[:7]), refit.transform(X[:7]), rtol=1e-9, atol=1e-9)


def test_rescaled_errors():
    X, y = blobs(seed=12)
    est = LFDA().fit(X, y)
    with pytest.raises(ParameterError, match="scaling"):
        est.rescaled("whitened")
    restored = LFDA.from_state(*est.to_state())
    with pytest.raises(ParameterError, match="component_norms_"):
        restored.rescaled("unit_norm")


def test_directions_without_spread_are_left_out():
    """C + eps I: a constant feature solves MFA with eigenvalue 0 (A w = C w = 0); it must not be a component."""
    X, y = blobs(seed=13)
    X = np.hstack([X[:, :2], np.full((len(X), 1), 3.0), X[:, 2:]])  # feature 2 constant
    eps = MFA(2, regularization="eps", scaling="identity").fit(X, y)
    assert eps.n_null_ == 1
    assert np.all(eps.embedding_.std(axis=0) > 1e-3)
    assert np.allclose(eps.coef_[2], 0.0, atol=1e-8)
    pca = MFA(2, regularization="pca", scaling="identity").fit(X, y)
    assert pca.n_null_ == 0
    # same subspace: the projection of one embedding on the other's span is exact
    Q, _ = np.linalg.qr(pca.embedding_ - pca.embedding_.mean(0))
    Zc = eps.embedding_ - eps.embedding_.mean(0)
    np.testing.assert_allclose(Q @ (Q.T @ Zc), Zc, atol=1e-4 * np.abs(Zc).max())  # ridges differ
    # the dual path: <x, x'>^2 on 3-D points has rank <= 6 < n, so C^ker + eps I has a large null space
    Xk, yk = blobs(seed=14, d=3)
    dual = MFA(3, mode="kernel", kernel="poly", regularization="eps", scaling="identity").fit(Xk, yk)
    assert dual.n_null_ > 0 and np.all(dual.embedding_.std(axis=0) > 1e-6)


def test_model_state_roundtrip():
    X, y = blobs(seed=10, n_unlabeled=5)
    est = LFDA(mode="kernel", gamma=0.1, regularization="pca").fit(X, y)
    arrays, attrs = est.to_state()
    again = LFDA.from_state(arrays, attrs)
    np.testing.assert_allclose(again.transform(X), est.transform(X))


# ----------------------------------------------------------------------------- bad input
def test_bad_inputs():
    X, y = blobs()
    with pytest.raises(InputDataError, match="one class only"):
        MFA().fit(X, np.zeros(len(X), int))
    y_small = y.copy()
    y_small[y == 2] = -1
    y_small[np.flatnonzero(y == 2)[:2]] = 2
    with pytest.raises(InputDataError, match="class 2 has 2 labeled points.*n_neighbors=3"):
        LFDA().fit(X, y_small)
    with pytest.raises(InputDataError, match="all points are unlabeled and gamma=0"):
        DNE().fit(X, -np.ones(len(X), int))
    # n_components above the problem dimension (5) is clipped with a warning naming both values
    with pytest.warns(ParameterAdjustedWarning, match=r"n_components=6 is larger than .* = 5; using n_components=5"):
        assert MFA(n_components=6).fit(X, y).n_components_ == 5
    with pytest.raises(ParameterError, match=r"gamma must be a real number in \[0.0, inf\); got -1"):
        DNE(gamma=-1.0).fit(X, y)
    with pytest.raises(ParameterError, match="mode must be one of"):
        DNE(mode="nonlinear").fit(X, y)
    with pytest.raises(ParameterError, match="small_classes must be one of"):
        DNE(small_classes="drop").fit(X, y)
    with pytest.raises(ParameterError, match="embeds the training points only"):
        DNE(mode="transductive").fit(X, y).transform(X)
    with pytest.raises(ParameterError, match="n_landmarks needs mode='kernel'"):
        DNE(n_landmarks=10).fit(X, y)
    with pytest.raises(InputDataError, match=r"inconsistent numbers of samples: \[45, 44\]"):
        DNE().fit(X, y[:-1])
    with pytest.raises(InputDataError, match="Unknown label type: continuous"):
        DNE().fit(X, y + 0.5)
    with pytest.raises(InputDataError, match="DNE requires y to be passed"):
        DNE().fit(X, None)


def test_dne_default_dimension_without_negative_eigenvalue_is_one_with_a_warning():
    # random labels on uniform data: W^I - W^E gives no negative eigenvalue, so the paper's default d is 0
    rng = np.random.RandomState(0)
    X, y = rng.uniform(size=(30, 3)), np.arange(30) % 3
    with pytest.warns(ParameterAdjustedWarning, match=r"n_components=None \(the number of negative eigenvalues\) "
                                                      r"is 0 here; using n_components=1"):
        est = DNE().fit(X, y)
    assert est.n_components_ == 1 and est.transform(X).shape == (30, 1)


def test_labels_follow_scikit_learn_rules():
    X, y = blobs()
    ref = LFDA().fit(X, y)
    named = LFDA().fit(X, np.array(["a", "b", "c"])[y])
    assert list(named.classes_) == ["a", "b", "c"]
    np.testing.assert_array_equal(named.transform(X), ref.transform(X))
    with pytest.raises(ValueError, match="X has 4 features, but LFDA is expecting 5 features"):
        ref.transform(X[:, :4])
    with pytest.raises(InputDataError, match="Reshape your data"):
        ref.transform(X[0])


def test_singular_constraint_is_reported():
    X, y = blobs(d=5, seed=11)
    X = np.hstack([X, X[:, :1]])  # duplicated column: C^lin of MFA is singular
    with pytest.raises(NotPositiveDefiniteError, match="reg_eps > 0"):
        MFA(regularization="eps", reg_eps=0.0).fit(X, y)
    assert MFA(regularization="pca", reg_eps=0.0).fit(X, y).n_components_ == 3
    assert MFA(reg_eps=0.0).fit(X, y).n_components_ == 3  # the default "auto" is "pca" in linear mode


def test_full_manifold_graph_is_complete_local_scaling():
    X, y = blobs(n_per=10, seed=12, n_unlabeled=15)
    k, gamma = 3, 0.4
    dist, _ = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)
    sig = dist[:, k]  # distance to the k-th neighbour (column 0 is the point itself)
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    W2 = np.exp(-D2 / np.outer(sig, sig))  # eq. 15 over all pairs, as the LFDA implementation
    np.fill_diagonal(W2, 0.0)
    WI, WE = textbook_label_graphs(X, y, k)
    vals, vecs = scipy.linalg.eigh(scatter(X, WI + gamma * W2), scatter(X, WE))
    est = MFA(gamma=gamma, manifold_graph="full", reg_eps=0.0).fit(X, y)
    np.testing.assert_allclose(est.eigenvalues_, vals[:3], rtol=1e-7, atol=1e-12)
    assert_same_columns(est.coef_, vecs[:, :3])


def _image_split(name, per_class, n_test, seed=0):
    X, y = load_dataset(name)
    rng = np.random.default_rng(seed)
    tr = np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in np.unique(y)])
    te = rng.choice(np.setdiff1d(np.arange(len(y)), tr), n_test, replace=False)
    return X[tr], y[tr], X[te], y[te]


def _nn_acc(Ztr, ytr, Zte, yte):
    d2 = (Zte ** 2).sum(1)[:, None] - 2 * Zte @ Ztr.T + (Ztr ** 2).sum(1)[None, :]
    return float(np.mean(ytr[np.argmin(d2, axis=1)] == yte))


@pytest.mark.parametrize("cls", [MFA, LFDA])
@pytest.mark.parametrize("name,per_class", [("coil20", 10), ("usps", 30)])
def test_defaults_give_a_useful_embedding_on_images(cls, name, per_class):
    """Defaults that work (regularization "auto" = PCA keeping 99% of the variance): held-out 1-NN accuracy of
    linear MFA / LFDA with their defaults is within 0.1 of 1-NN on the raw pixels (0.87-0.91 here). The old
    default ("eps", every direction) gives MFA 0.04 on COIL-20 and 0.47 on USPS, LFDA 0.55 on USPS here."""
    Xtr, ytr, Xte, yte = _image_split(name, per_class, 500)
    raw = _nn_acc(Xtr, ytr, Xte, yte)
    est = cls().fit(Xtr, ytr)
    assert _nn_acc(est.transform(Xtr), ytr, est.transform(Xte), yte) >= raw - 0.1
