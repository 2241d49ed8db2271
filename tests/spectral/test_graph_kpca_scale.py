"""STG18 at scale: MultiGraphKPCA's Nystrom / implicit-operator path vs the dense path (references:
the dense eigh of the n x n combined matrix), and LNEG's chunked / Dask local regressions."""

import numpy as np
import pytest
import scipy.linalg as la

from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.methods.graph_kpca import multi as multi_mod
from eigenflow.spectral.methods.graph_kpca.multi import MultiGraphKPCA


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 3 * np.pi, n)
    X = np.c_[t * np.cos(t), rng.uniform(0, 5, n), t * np.sin(t)] / 5.0
    return X + 0.01 * rng.standard_normal(X.shape)


def _max_angle(A, B):
    return float(np.max(la.subspace_angles(A, B)))


KERNELS = (("rbf", {"gamma": 0.5}), ("poly", {"degree": 2, "gamma": 0.3, "coef0": 1.0}))
MODES = (([0, 1], "euclidean"), ([1, 2], "euclidean"))


@pytest.mark.parametrize("n,graph_kernel,gk_params,learn_beta", [
    (1200, None, None, False),  # R_l = -L^l sparse (eq. 18)
    (800, "bandlimited", {"cutoff": 0.02}, True),  # low-rank r^dagger(L), exact when n_graph_eigs covers cutoff
])
def test_implicit_all_landmarks_equals_dense(n, graph_kernel, gk_params, learn_beta):
    X = _data(n)
    common = dict(n_components=3, kernels=KERNELS, modes=MODES, n_neighbors=8, graph_kernel=graph_kernel,
                  graph_kernel_params=gk_params, gamma=0.5, learn_beta=learn_beta, max_iter=2, tol=0.0)
    dense = MultiGraphKPCA(**common).fit(X)
    imp = MultiGraphKPCA(**common, n_landmarks=X.shape[0], n_graph_eigs=40, eigen_tol=1e-9,
                         random_state=0).fit(X)
    np.testing.assert_allclose(imp.eigenvalues_, dense.eigenvalues_, rtol=1e-6)
    assert _max_angle(imp.embedding_, dense.embedding_) < 1e-4
    np.testing.assert_allclose(imp.theta_, dense.theta_, rtol=1e-6)
    np.testing.assert_allclose(imp.beta_, dense.beta_, rtol=1e-6)
    np.testing.assert_allclose(imp.objective_, dense.objective_, rtol=1e-6)
    Xn = _data(40, seed=5)
    assert _max_angle(imp.transform(Xn), dense.transform(Xn)) < 1e-3


def test_implicit_few_landmarks_runs_and_close():
    X = _data(1200, seed=1)
    common = dict(n_components=2, kernels=KERNELS[:1], modes=MODES[:1], graph_kernel=None, learn_beta=False,
                  gamma=0.2, max_iter=4)
    dense = MultiGraphKPCA(**common).fit(X)
    imp = MultiGraphKPCA(**common, n_landmarks=200, eigen_solver="lobpcg", random_state=0).fit(X)
    assert imp.embedding_.shape == (1200, 2) and imp.nystrom_[0].n_components_ <= 200
    assert np.all(np.isfinite(imp.embedding_))
    assert _max_angle(imp.embedding_, dense.embedding_) < 0.2  # Nystrom approximation, not exact


def test_implicit_never_forms_dense_kernel(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("dense (n, n) centered kernel formed on the implicit path")

    monkeypatch.setattr(multi_mod, "center_gram", boom)
    monkeypatch.setattr(multi_mod, "dense_graph_kernel", boom)
    monkeypatch.setattr(multi_mod, "top_eigs_dense", boom)
    X = _data(20000, seed=2)
    est = MultiGraphKPCA(n_components=2, kernels=KERNELS, modes=MODES[:1], n_neighbors=6, graph_kernel=None,
                         learn_beta=False, gamma=0.2, max_iter=3, n_landmarks=60, eigen_solver="randomized",
                         random_state=0).fit(X)
    assert est.embedding_.shape == (20000, 2) and np.all(est.theta_ >= 0)
    assert est.transform(X[:5]).shape == (5, 2)


def test_implicit_bad_params():
    X = _data(100)
    with pytest.raises(ParameterError, match="kernels\\[0\\].*sigmoid"):
        MultiGraphKPCA(kernels=(("sigmoid", None),), modes=MODES, graph_kernel=None, learn_beta=False,
                       n_landmarks=20).fit(X)
    with pytest.raises(ParameterError, match="eigen_solver"):
        MultiGraphKPCA(modes=MODES, graph_kernel=None, learn_beta=False, n_landmarks=20,
                       eigen_solver="dense").fit(X)
    with pytest.raises(ParameterError, match="n_landmarks"):
        MultiGraphKPCA(modes=MODES, graph_kernel=None, learn_beta=False, n_landmarks=0).fit(X)


# ---------------------------------------------------------------- LNEG: chunked / Dask regressions
import dask  # noqa: E402
import dask.array as da  # noqa: E402

from eigenflow.spectral.methods.graph_kpca import lneg as lneg_mod  # noqa: E402
from eigenflow.spectral.methods.graph_kpca import lneg_weight_tasks  # noqa: E402
from eigenflow.spectral.methods.graph_kpca.graphs import knn_indices  # noqa: E402
from eigenflow.spectral.methods.graph_kpca.lneg import LNEG  # noqa: E402
from eigenflow.spectral.methods.graph_kpca.lneg_weights import local_weights  # noqa: E402


@pytest.mark.parametrize("l1", [0.0, 0.01])
def test_lneg_dask_weights_equal_in_memory(l1):
    X = _data(600, seed=3)
    ind, _ = knn_indices(X, 8)
    opts = dict(degree=2, l1=l1, reg=1e-3, expansion="centered", max_iter=200, tol=1e-7)
    ref, it_ref = local_weights(X, ind, chunk_size=150, **opts)
    with dask.config.set(scheduler="sync"):
        got, it = lneg_weight_tasks.local_weights_gathered(da.from_array(X, chunks=(150, 3)), ind, **opts)
    np.testing.assert_array_equal(got, ref)
    assert it == it_ref
    W_ref, W = lneg_weight_tasks.weight_matrix(ref, ind), lneg_weight_tasks.weight_matrix(got, ind)
    assert W.shape == (600, 600) and (W != W_ref).nnz == 0
    np.testing.assert_allclose(np.asarray(W.sum(axis=1)).ravel(), 1.0, atol=1e-10)  # LLE constraint


def test_lneg_fit_dask_input_equals_numpy_and_gathers_rows(monkeypatch):
    X = _data(500, seed=4)
    seen = []
    task = lneg_weight_tasks._chunk_task

    def spy(Y, nb, local, *a):
        seen.append((np.shape(Y)[0], np.shape(nb)[0], int(local.max())))
        return task(Y, nb, local, *a)

    monkeypatch.setattr(lneg_weight_tasks, "_chunk_task", spy)
    a = LNEG(2, n_neighbors=8, degree=2, gamma=0.1, chunk_size=100).fit(X)
    with dask.config.set(scheduler="threads", num_workers=1):
        b = LNEG(2, n_neighbors=8, degree=2, gamma=0.1).fit(da.from_array(X, chunks=(100, 3)))
    assert (a.weights_ != b.weights_).nnz == 0
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    assert len(seen) == 5 and all(rows == 100 and nb < 500 and loc < nb for rows, nb, loc in seen)


def test_lneg_sparse_eigen_step_above_dense_threshold(monkeypatch):
    X = _data(2100, seed=6)

    def boom(*a, **k):
        raise AssertionError("dense eigen-step used above the dense threshold")

    monkeypatch.setattr(lneg_mod, "bottom_eigs_dense", boom)
    m = LNEG(2, n_neighbors=10, degree=1, gamma=0.05, graph="knn", random_state=0).fit(X)
    n = X.shape[0]
    import scipy.sparse as sp
    from eigenflow.spectral.graph.laplacian import laplacian

    IW = sp.identity(n) - m.weights_
    M = (IW.T @ IW + 0.05 * laplacian(m.graph_, "unnormalized")[0]).toarray()
    lam, V = la.eigh(M, subset_by_index=[1, 2])  # reference: dense LAPACK
    np.testing.assert_allclose(m.eigenvalues_, lam, rtol=1e-4, atol=1e-9)
    assert _max_angle(m.embedding_, V) < 1e-3
