"""The GraphKPCA flow (paper 003) on a small store: the written embedding equals the estimator's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as la


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.mark.slow  # Prefect harness + a Dask cluster: tens of seconds, minutes under load
def test_graph_kpca_flow_writes_every_point(tmp_path, prefect_harness):
    from flows.paper003 import graph_kpca
    from spectral.grad import GraphKPCA
    from spectral.knn import knn_graph
    from storage.arrays import read_X
    from storage.embedding_io import read_embedding
    from storage.models import read_model

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 6)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    store = str(tmp_path / "s.zarr")
    out = graph_kpca(str(tmp_path / "X.npy"), store, n_components=3, kernel_gamma=0.2, gamma=0.5, n_neighbors=8,
                     n_landmarks=200, knn_method="exact", holdout=0.2, chunk_rows=128, n_workers=1,
                     random_state=1)
    assert out["status"] == "completed"
    Z = read_embedding(store, out["run"])
    rows = read_model(store, out["run"])[0]["fit_rows"]
    assert rows.size == 480
    Xs = read_X(store).astype(np.float64)
    ind, dist = knn_graph(Xs[rows], 8, method="exact")
    ref = GraphKPCA(3, kernel_params={"gamma": 0.2}, gamma=0.5, precomputed_knn=(ind, dist), solver="nystrom",
                    n_landmarks=200, random_state=1).fit(Xs[rows])
    assert np.max(la.subspace_angles(Z[rows].astype(np.float64), ref.embedding_)) < 1e-3
    rest = np.setdiff1d(np.arange(600), rows)
    assert np.all(np.isfinite(Z[rest])) and np.abs(Z[rest]).max() > 0
