"""IndexedGraphKPCA: a stored GraphKPCA plus a KNNIndex over its fit points embeds new points as
``GraphKPCA.transform`` does (reference: the in-memory model, whose kNN search is scikit-learn's)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eigenflow.spectral.errors import InputDataError
from tests.helpers import gaussian_blobs
from eigenflow.spectral.methods.graph_kpca import GraphKPCA
from eigenflow.spectral.methods.graph_kpca.extension import IndexedGraphKPCA
from eigenflow.spectral.neighbours.index import KNNIndex


@pytest.fixture(scope="module")
def data():
    X, _, centers, rng = gaussian_blobs(150, 6, seed=5)
    X_new = centers[rng.integers(0, 3, 120)] + rng.standard_normal((120, 6))
    return X, X_new


def fitted(X, **kw):
    return GraphKPCA(3, kernel_params={"gamma": 0.1}, gamma=0.5, n_neighbors=7, solver="nystrom", n_landmarks=150,
                     random_state=2, **kw).fit(X)


@pytest.mark.parametrize("kw", [{}, {"laplacian": "symmetric"}, {"graph_kernel": "regularized"},
                                {"graph_weight": "binary"}])
def test_restored_model_with_index_equals_in_memory_transform(data, kw):
    X, X_new = data
    est = fitted(X, **kw)
    arrays, attrs = est.to_state()
    restored = GraphKPCA.from_state(arrays, json.loads(json.dumps(attrs)))
    ext = IndexedGraphKPCA(restored, KNNIndex.build(X, 7, method="exact"))
    assert ext.needs_neighbors
    Z, info = ext.transform(X_new, return_info=True)
    assert info == {"n_queried": 120}
    ref = est.transform(X_new)
    np.testing.assert_allclose(Z, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())
    # the comparison is sensitive to the kNN rows: other points' neighbours give another embedding
    ind, dist = ext.index.query(X_new, 7)
    wrong = restored.transform_with_neighbors(X_new, ind[::-1], dist[::-1])
    assert np.abs(wrong - ref).max() > 1e-3 * np.abs(ref).max()


def test_kernel_pca_model_needs_no_index(data):
    X, X_new = data
    est = GraphKPCA(2, kernel_params={"gamma": 0.1}, gamma=0.0, solver="nystrom", n_landmarks=150,
                    random_state=0).fit(X)
    restored = GraphKPCA.from_state(*est.to_state())
    ext = IndexedGraphKPCA(restored)
    assert not ext.needs_neighbors
    Z, info = ext.transform(X_new, return_info=True)
    assert info == {"n_queried": 0}
    np.testing.assert_allclose(Z, est.transform(X_new), rtol=1e-8, atol=1e-12)


def test_bad_index_is_refused(data):
    X, X_new = data
    restored = GraphKPCA.from_state(*fitted(X).to_state())
    with pytest.raises(InputDataError, match="index is required"):
        IndexedGraphKPCA(restored).transform(X_new)
    with pytest.raises(InputDataError, match="index must be built over the model's 450 fit points; got 449"):
        IndexedGraphKPCA(restored, KNNIndex.build(X[:-1], 7, method="exact")).transform(X_new)
    with pytest.raises(InputDataError, match="model must be a fitted GraphKPCA; got str"):
        IndexedGraphKPCA("model")
