"""LQCL09 (TSK / RSK): the LP of eq. 14, the kernel and its out-of-sample rows, RSK = Zhou et al., bad input.

References are computed here from the paper's formulas with dense numpy (brute-force distances, explicit
double loops for e_ij, matrix inverses), never with the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from tests.helpers import load_dataset, usps_digits

from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError, ParameterAdjustedWarning, ParameterError
from eigenflow.spectral.methods.spectral_kernels import RSK, TSK, consistency_method, harmonic_function
from eigenflow.spectral.methods.spectral_kernels.basis import extend_vectors
from eigenflow.spectral.methods.spectral_kernels.lp import gap_matrix, solve_spectrum_lp


def minmax(X):
    span = X.max(0) - X.min(0)
    return (X - X.min(0)) / np.where(span > 0, span, 1.0)


def hein_maier_dense(X, k):
    """Eq. 2 by brute force: kNN ("or"), w = exp(-d^2 / max(h_i, h_j)^2), h = distance to the k-th neighbour."""
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(D, np.inf)
    order = np.argsort(D, axis=1)[:, :k]
    h = np.take_along_axis(D, order, axis=1)[:, -1]
    A = np.zeros(D.shape, dtype=bool)
    A[np.repeat(np.arange(len(X)), k), order.ravel()] = True
    A |= A.T
    np.fill_diagonal(D, 0.0)
    return np.where(A, np.exp(-D**2 / np.maximum(h[:, None], h[None, :]) ** 2), 0.0)


def semi_labels(y, n_labeled, seed):
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    while True:
        lab = rng.choice(y.size, n_labeled, replace=False)
        if np.unique(y[lab]).size == classes.size:
            break
    out = -np.ones_like(y)
    out[lab] = y[lab]
    return out


@pytest.fixture(scope="module")
def sonar():
    X, y = load_dataset("sonar")
    return minmax(X), y


@pytest.fixture(scope="module")
def fitted(sonar):
    X, y = sonar
    yy = semi_labels(y, 20, 0)
    return TSK(10, beta=1.0, random_state=0).fit(X, yy), X, y, yy


def test_gap_matrix_matches_double_loop(fitted):
    est, X, y, yy = fitted
    lab = est.labeled_indices_
    V = est.eigenvectors_[lab]
    G_ref = np.zeros_like(V)
    for a, i in enumerate(lab):
        for b, j in enumerate(lab):
            if a != b:
                G_ref[a] += (1.0 if yy[i] == yy[j] else -1.0) * V[a] * V[b]  # eq. 13 with e_ij
    codes = np.searchsorted(est.classes_, yy[lab])
    np.testing.assert_allclose(gap_matrix(V, codes), G_ref, atol=1e-13)


@pytest.mark.parametrize("constraint", ["decay", "none"])
def test_lp_solution_satisfies_every_constraint(fitted, constraint):
    est, X, y, yy = fitted
    lab = est.labeled_indices_
    codes = np.searchsorted(est.classes_, yy[lab])
    lam, V = est.eigenvalues_, est.eigenvectors_[lab]
    eta, beta = 2.0, 5.0
    res = solve_spectrum_lp(lam, V, codes, eta=eta, beta=beta, constraint=constraint)
    mu, xi, tol = res.mu, res.xi, 1e-7
    assert np.all(mu >= 0) and np.all(xi >= 0)
    assert np.all(res.G @ mu >= 1 - xi - tol)  # hinge slack definition (eq. 12)
    np.testing.assert_allclose(xi, np.maximum(0.0, 1 - res.G @ mu), atol=1e-6)  # optimal slacks are the hinge
    if constraint == "decay":
        assert np.all(mu[:-1] >= eta * mu[1:] - tol)  # eq. 8
    assert res.objective == pytest.approx(lam @ mu + beta * xi.sum(), rel=1e-9, abs=1e-9)
    # no feasible point does better: mu = 0 (xi = 1) and random points of the feasible cone
    rng = np.random.default_rng(1)
    assert res.objective <= beta * len(lab) + 1e-9
    for _ in range(200):
        c = np.sort(rng.exponential(size=lam.size))[::-1] * rng.exponential() * 50
        m = c * eta ** -np.arange(lam.size) if constraint == "decay" else rng.exponential(size=lam.size) * 20
        obj = lam @ m + beta * np.maximum(0.0, 1 - res.G @ m).sum()
        assert res.objective <= obj + 1e-9


def test_training_rows_reproduce_in_sample_rows(fitted):
    """Theorem 2 / eq. 18: the out-of-sample formula applied to a training point's own weights gives V_i."""
    est, X, y, yy = fitted
    W = hein_maier_dense(X, 6)
    np.testing.assert_allclose(W.sum(1), est.degrees_, rtol=1e-6)
    rows = extend_vectors(sp.csr_matrix(W), est.degrees_, est.eigenvalues_, est.eigenvectors_)
    np.testing.assert_allclose(rows, est.eigenvectors_, atol=1e-6)
    np.testing.assert_array_equal(est.predict(X), est.transduction_)


def test_out_of_sample_kernel_matches_eq_17_and_is_psd(fitted):
    est, X, y, yy = fitted
    rng = np.random.default_rng(3)
    X_new = np.clip(X[:15] + rng.normal(scale=0.02, size=(15, X.shape[1])), 0, 1)
    # eq. 17 by brute force: weights of x to the training points as if x were added to the kNN graph
    k = 6
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(D, np.inf)
    h = np.sort(D, axis=1)[:, k - 1]
    Dx = np.sqrt(((X_new[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    hx = np.sort(Dx, axis=1)[:, k - 1]
    edge = (Dx <= hx[:, None]) | (Dx <= h[None, :])
    Wx = np.where(edge, np.exp(-Dx**2 / np.maximum(hx[:, None], h[None, :]) ** 2), 0.0)
    wx = Wx / np.sqrt(Wx.sum(1, keepdims=True) * est.degrees_[None, :])
    Vx = wx @ est.eigenvectors_ / (1 - est.eigenvalues_)  # eq. 18
    np.testing.assert_allclose(est.spectral_rows(X_new, n_candidates=len(X)), Vx, rtol=1e-5, atol=1e-8)  # float32 kNN distances
    K_ref = Vx @ np.diag(est.mu_) @ est.eigenvectors_.T  # eq. 16
    K = est.kernel(X_new)  # default 3k candidates: rows whose reverse neighbours are all within them are exact
    exact_rows = np.array([np.all(np.isin(np.flatnonzero(edge[r]), np.argsort(Dx[r])[:3 * k])) for r in range(15)])
    assert exact_rows.sum() >= 5
    np.testing.assert_allclose(K[exact_rows], K_ref[exact_rows], rtol=1e-5, atol=1e-8)
    Z = np.vstack([X, X_new])
    K_all = est.kernel(Z, Z)
    assert np.linalg.eigvalsh(K_all).min() >= -1e-10 * np.abs(K_all).max()
    np.testing.assert_allclose(K_all[: len(X), : len(X)], est.kernel(), atol=1e-12)


def test_rsk_equals_zhou_closed_form():
    X, y = load_dataset("heart")
    X = minmax(X)[:120]
    yy = semi_labels(y[:120], 12, 2)
    W = hein_maier_dense(X, 6)
    alpha = 0.9
    est = RSK(alpha=alpha, n_components=None).fit_graph(W, yy)
    d = W.sum(1)
    S = W / np.sqrt(np.outer(d, d))
    classes = np.unique(yy[yy >= 0])
    C = (yy[:, None] == classes[None, :]).astype(float)
    F = (1 - alpha) * np.linalg.inv(np.eye(len(X)) - alpha * S) @ C  # Zhou et al. eq. 3
    np.testing.assert_allclose(est.scores_, F, atol=1e-9)
    labels = consistency_method(W, yy, alpha=alpha)  # scikit-learn's LabelSpreading on the same graph
    assert np.mean(labels == classes[F.argmax(1)]) >= 0.99


def test_harmonic_baseline_equals_exact_solution():
    X, y = load_dataset("heart")
    X = minmax(X)[:150]
    yy = semi_labels(y[:150], 15, 4)
    W = hein_maier_dense(X, 6)
    lab, unl = np.flatnonzero(yy >= 0), np.flatnonzero(yy < 0)
    classes = np.unique(yy[lab])
    L = np.diag(W.sum(1)) - W
    F = np.linalg.solve(L[np.ix_(unl, unl)], W[np.ix_(unl, lab)] @ (yy[lab][:, None] == classes).astype(float))
    np.testing.assert_array_equal(harmonic_function(W, yy)[unl], classes[F.argmax(1)])


def star_plus_path():
    """Connected graph whose normalized Laplacian has eigenvalue exactly 1 (a star: 0, 1 x (leaves - 1), 2)."""
    n = 6
    W = np.zeros((n, n))
    W[0, 1:] = W[1:, 0] = 1.0
    return W


def test_eigenvalue_one_is_skipped_and_reported():
    W = star_plus_path()
    lam = np.linalg.eigvalsh(np.eye(6) - W / np.sqrt(np.outer(W.sum(1), W.sum(1))))
    assert np.sum(np.abs(lam - 1) < 1e-9) == 4  # the reference spectrum really has lambda = 1
    y = np.array([0, 1, -1, -1, -1, 1])
    est = TSK(n_components=2, constraint="none").fit_graph(W, y)
    np.testing.assert_allclose(est.eigenvalues_, [0.0, 2.0], atol=1e-10)
    assert est.basis_info_["n_skipped_one"] == 4
    with pytest.raises(InputDataError, match="only 2 eigenpairs with lambda != 1"):
        TSK(n_components=3).fit_graph(W, y)
    with pytest.raises(InputDataError, match="eigenvalue equal to 1"):
        extend_vectors(W[:1], W.sum(1), np.array([0.0, 1.0]), np.ones((6, 2)))


def test_bad_labels_and_graph(sonar):
    X, y = sonar
    yy = -np.ones_like(y)
    yy[:5] = y[:5]  # sonar is sorted by class: one class only
    with pytest.raises(InputDataError, match="at least 2 classes"):
        TSK(10).fit(X, yy)
    yy = semi_labels(y, 20, 0)
    with pytest.raises(InputDataError, match=r"no labeled point of class\(es\) \[7\]"):
        TSK(10).fit(X, yy, classes=[0, 1, 7])
    W = np.zeros((8, 8))
    W[:4, :4] = 1.0
    W[4:, 4:] = 1.0
    np.fill_diagonal(W, 0.0)
    with pytest.raises(DisconnectedGraphError, match="2 connected components"):
        TSK(2).fit_graph(W, np.array([0, -1, -1, -1, 1, -1, -1, -1]))


@pytest.mark.parametrize("params, match", [({"eta": 0.5}, "eta must be"), ({"beta": 0.0}, "beta must be"),
                                           ({"constraint": "order"}, "constraint must be"),
                                           ({"n_components": 0}, r"n_components must be an integer in \[1, 206\]; got 0"),
                                           ({"class_weight": "x"}, "class_weight must be")])
def test_bad_parameters(sonar, params, match):
    X, y = sonar
    with pytest.raises(ParameterError, match=match):
        TSK(**{"n_components": 10, **params}).fit(X, semi_labels(y, 20, 0))


def test_data_size_parameters_are_clipped_with_a_warning(sonar):
    X, y = sonar
    yy = semi_labels(y, 20, 0)
    with pytest.warns(ParameterAdjustedWarning,
                      match=r"n_components=500 is larger than n_samples - 2 = 206; using n_components=206"):
        est = RSK(n_components=500).fit(X, yy)
    assert est.mu_.shape[0] <= 206
    with pytest.warns(ParameterAdjustedWarning,
                      match=r"n_neighbors=300 is larger than n_samples - 1 = 207; using n_neighbors=207"):
        RSK(n_neighbors=300).fit(X, yy)


def test_labels_follow_scikit_learn_rules(sonar):
    X, y = sonar
    yy = semi_labels(y, 20, 0)
    # any sortable labels; numeric -1 marks unlabeled points
    est = RSK().fit(X, yy)
    strings = RSK().fit(X[yy >= 0], np.array(["a", "b"])[yy[yy >= 0]])
    assert list(strings.classes_) == ["a", "b"]
    with pytest.raises(InputDataError, match="Unknown label type: continuous"):
        RSK().fit(X, yy + 0.5)
    with pytest.raises(InputDataError, match=r"inconsistent numbers of samples: \[208, 207\]"):
        RSK().fit(X, yy[:-1])
    with pytest.raises(InputDataError, match="RSK requires y to be passed"):
        RSK().fit(X, None)
    with pytest.raises(InputDataError, match="Expected 2D array, got 1D array"):
        est.predict(X[0])
    with pytest.raises(ValueError, match="X has 3 features, but RSK is expecting 60 features"):
        est.predict(X[:, :3])


def test_zero_spectrum_falls_back_to_the_rsk_kernel_with_a_warning(sonar):
    from eigenflow.spectral.errors import KernelFallbackWarning

    X, y = sonar
    semi = semi_labels(y, 20, 0)
    with pytest.warns(KernelFallbackWarning, match=r"optimum is mu = 0 .* fallback kernel 'rsk\(alpha=0.99\)'"):
        est = TSK(10, beta=1e-6, include_trivial=False).fit(X, semi)
    assert est.fallback_kernel_ == "rsk(alpha=0.99)"
    lam = est.eigenvalues_
    np.testing.assert_allclose(est.mu_, 0.01 / (0.01 + 0.99 * lam))
    # eq. 5 with the fallback kernel K = V diag(theta) V^T, computed directly
    V, lab = est.eigenvectors_, est.labeled_indices_
    K = (V * est.mu_) @ V[lab].T
    ref = np.stack([K[:, semi[lab] == c].sum(axis=1) for c in est.classes_], axis=1)
    np.testing.assert_allclose(est.scores_, ref, atol=1e-12)
    assert TSK(10, include_trivial=False).fit(X, semi).fallback_kernel_ is None


def test_tsk_svm_kernel_is_usable_by_svc(fitted):
    from sklearn.svm import SVC

    est, X, y, yy = fitted
    lab, unl = est.labeled_indices_, np.flatnonzero(yy < 0)
    K = est.kernel()
    svm = SVC(kernel="precomputed").fit(K[np.ix_(lab, lab)], yy[lab])
    assert svm.predict(K[np.ix_(unl, lab)]).shape == (unl.size,)


def _roll_semi(n=3000, labeled_per_class=10, seed=0):
    from eigenflow.spectral.datasets import make_swiss_roll_lifted

    X, y, _ = make_swiss_roll_lifted(n, n_features=8, random_state=seed)
    rng = np.random.default_rng(seed)
    lab = np.concatenate([rng.choice(np.flatnonzero(y == c), labeled_per_class, replace=False) for c in range(6)])
    semi = -np.ones(n, dtype=np.int64)
    semi[lab] = y[lab]
    return X, y, semi


def test_default_tsk_beats_one_nn_on_a_six_class_roll():
    """Defaults that work (eta = 1): on 3,000 points of a 6-band Swiss roll with 60 labels, TSK's transductive
    accuracy (0.82) beats 1-NN on the labeled points in input space (0.72). The old default eta = 2 makes the
    LP's optimum mu = 0 (the trivial eigenvector takes the largest weight; the RSK fallback kernel), and
    constraint="none" gives a two-eigenvector kernel (0.61)."""
    from sklearn.neighbors import KNeighborsClassifier

    X, y, semi = _roll_semi()
    unl = semi < 0
    lab = ~unl
    one_nn = np.mean(KNeighborsClassifier(1).fit(X[lab], y[lab]).predict(X[unl]) == y[unl])
    acc = np.mean(TSK(random_state=0).fit(X, semi).transduction_[unl] == y[unl])
    assert acc >= one_nn + 0.05
    from eigenflow.spectral.errors import KernelFallbackWarning

    with pytest.warns(KernelFallbackWarning, match="mu = 0"):
        fallback = TSK(eta=2.0, random_state=0).fit(X, semi)
    assert fallback.fallback_kernel_ == "rsk(alpha=0.99)"
    assert np.mean(fallback.transduction_[unl] == y[unl]) >= one_nn + 0.05  # measured 0.82 vs 0.72


def test_auto_n_neighbors_connects_a_small_far_group():
    """n_neighbors="auto" = max(6, ceil(ln n)): 6 up to n = 403 (the paper's k), 10 at 2e4, 14 at 1e6; a group
    of 7 points apart from 3,000 others is its own component at k = 6 (an error) and joined at ceil(ln 3007) = 9."""
    from eigenflow.spectral.errors import DisconnectedGraphError
    from eigenflow.spectral.methods.spectral_kernels import resolve_n_neighbors

    assert [resolve_n_neighbors("auto", n) for n in (10, 351, 403, 404, 20000, 10**6)] == [6, 6, 6, 7, 10, 14]
    assert resolve_n_neighbors("auto", 5) == 4 and resolve_n_neighbors(3, 100) == 3
    rng = np.random.default_rng(0)
    X = np.r_[rng.uniform(0, 10, (3000, 2)), 20 + 0.01 * rng.standard_normal((7, 2))]
    y = -np.ones(len(X), dtype=np.int64)
    y[:10] = np.arange(10) % 2
    y[-1] = 1
    with pytest.raises(DisconnectedGraphError):
        RSK(n_components=10, n_neighbors=6).fit(X, y)
    est = RSK(n_components=10).fit(X, y)
    assert est.transduction_[-7:].tolist() == [1] * 7


def test_default_rsk_maps_new_points():
    """Defaults that work (n_components = 30): RSK fitted on 320 of 400 USPS digits 0-3 (half labeled) labels
    the 80 others with predict at 0.95 accuracy; the old default n_components=None (full spectrum, divided by
    1 - lambda near lambda = 1 in eq. 18) gives 0.85 here and 0.575 on the hold-out draw of
    tests/pipeline/test_pipeline_methods.py."""
    X, y, hidden = usps_digits(dtype=np.float64)
    fit, held = np.arange(320), np.arange(320, 400)
    est = RSK().fit(X[fit], hidden[fit])
    assert np.mean(est.predict(X[held]) == y[held]) >= 0.9
