"""Chunked at-scale fitting of CK08 against the dense estimators."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.methods.discriminant import DNE, LFDA, MFA
from eigenflow.spectral.methods.discriminant import graphs
from eigenflow.spectral.operators.kernels import pairwise_kernel
from eigenflow.spectral.methods.discriminant.scale import fit_at_scale, graph_gram, sparse_label_graphs


def data(seed=0, n_lab=36, n_unl=44, d=6):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(3, d))
    lab = rng.integers(0, 3, n_lab + n_unl)
    X = centers[lab] + rng.normal(size=(len(lab), d))
    y = np.where(np.arange(len(lab)) < n_lab, lab, -1)
    return X, y


def assert_same_columns(A, B, atol=1e-7):
    for a, b in zip(A.T, B.T):
        s = np.sign(a @ b) or 1.0
        np.testing.assert_allclose(a, s * b, atol=atol * max(1.0, np.abs(b).max()))


def w2_of(D2, k=3):
    return graphs.manifold_weights(*graphs.knn_from_dists(D2, k))


def test_graph_gram_matches_dense():
    X, _ = data()
    W = w2_of(graphs.sq_dists(X))
    dense = X.T @ graphs.laplacian(W).toarray() @ X
    np.testing.assert_allclose(graph_gram(da.from_array(X, chunks=(17, -1)), W, chunk_rows=13), dense, atol=1e-10)


def test_sparse_label_graphs_match_dense():
    X, y = data()
    lab = y >= 0
    WI, WE = graphs.label_graphs(graphs.sq_dists(X[lab]), y[lab], 3)
    SI, SE = sparse_label_graphs(X[lab], y[lab], 3)
    assert (WI != SI).nnz == 0 and (WE != SE).nnz == 0


@pytest.mark.parametrize("cls", [DNE, MFA, LFDA])
@pytest.mark.parametrize("gamma,reg", [(0.0, "eps"), (0.7, "eps"), (0.7, "pca")])
def test_linear_at_scale_equals_dense(cls, gamma, reg):
    X, y = data(seed=1)
    dense = cls(gamma=gamma, regularization=reg, n_components=2).fit(X, y)
    W2 = w2_of(graphs.sq_dists(X))
    big = fit_at_scale(cls(gamma=gamma, regularization=reg, n_components=2), da.from_array(X, chunks=(25, -1)), y,
                       W2=W2, chunk_rows=19)
    np.testing.assert_allclose(big.eigenvalues_, dense.eigenvalues_, rtol=1e-7, atol=1e-10)
    assert_same_columns(big.transform(X), dense.transform(X))


@pytest.mark.parametrize("cls", [DNE, LFDA])
def test_nystrom_at_scale_all_landmarks_equals_exact_kernel(cls):
    X, y = data(seed=2, n_lab=30, n_unl=20, d=4)
    kw = dict(gamma=0.3, mode="kernel", regularization="pca", n_components=2)  # <x, x'>^2, Sect. 5
    exact = cls(**kw).fit(X, y)
    K = pairwise_kernel(X, X, "poly", degree=2, gamma=1.0, coef0=0.0)
    W2 = w2_of(graphs.sq_dists_from_gram(K))  # the feature-space graph of the exact variant
    big = fit_at_scale(cls(n_landmarks=len(X), **kw), X, y, W2=W2, chunk_rows=16, random_state=0)
    np.testing.assert_allclose(big.eigenvalues_, exact.eigenvalues_, rtol=1e-6, atol=1e-9)
    assert_same_columns(big.transform(X), exact.transform(X), atol=1e-6)


def test_at_scale_builds_its_graph_and_rejects_exact_kernel():
    X, y = data(seed=3)
    est = fit_at_scale(LFDA(gamma=0.5), X, y, knn_method="exact")
    assert est.transform(X).shape == (len(X), 3)
    with pytest.raises(ParameterError, match="n_landmarks"):
        fit_at_scale(LFDA(mode="kernel"), X, y)


def test_kernel_paths_agree(monkeypatch):
    # the materialized float32 Nystrom features (Dask map_blocks) and the raw-kernel-column accumulation
    # compute the same Phi^T L Phi: same eigenvalues to float32 accuracy, same embedding
    from eigenflow.spectral.methods.discriminant import scale

    X, y = data(seed=4, n_lab=40, n_unl=60, d=5)
    kw = dict(gamma=0.5, mode="kernel", n_landmarks=50, regularization="pca", n_components=2)
    W2 = w2_of(graphs.sq_dists(X))
    feat = fit_at_scale(LFDA(**kw), da.from_array(X, chunks=(30, -1)), y, W2=W2, chunk_rows=16, random_state=0)
    assert feat.scale_info_["kernel_path"] == "features"
    monkeypatch.setattr(scale, "FEATURE_MEMORY_BYTES", 0)
    raw = fit_at_scale(LFDA(**kw), da.from_array(X, chunks=(30, -1)), y, W2=W2, chunk_rows=16, random_state=0)
    assert raw.scale_info_["kernel_path"] == "raw kernel columns"
    np.testing.assert_allclose(feat.eigenvalues_, raw.eigenvalues_, rtol=1e-4)
    assert_same_columns(feat.transform(X), raw.transform(X), atol=1e-3)
