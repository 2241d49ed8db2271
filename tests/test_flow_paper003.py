"""The GraphKPCA flow (paper 003) on a small store: the written embedding equals the estimator's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as la


@pytest.mark.slow  # Prefect harness + a Dask cluster: tens of seconds, minutes under load
def test_graph_kpca_flow_writes_every_point(tmp_path, prefect_harness):
    from flows.paper003 import graph_kpca
    from spectral.graph_kpca import GraphKPCA
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


@pytest.fixture(scope="module")
def cluster():
    """Address of a LocalCluster shared by the fit and extend flows (2 single-threaded worker processes)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.mark.slow  # Prefect harness + a Dask cluster + two flows: tens of seconds
def test_extend_of_stored_graph_kpca_model_equals_restored_transform(tmp_path, prefect_harness, cluster):
    """Fit on store A, extend onto store B: the kNN rows of the new points among A's fit points are found by
    the rebuilt index on the workers; reference = GraphKPCA.transform of the model restored from A's store
    in memory (with A's fit points, scikit-learn's exact kNN search)."""
    from flows.embed import extend
    from flows.paper003 import graph_kpca
    from spectral.graph_kpca import GraphKPCA
    from storage.arrays import read_X
    from storage.embedding_io import read_embedding
    from storage.manifest import read_manifest
    from storage.models import read_model

    rng = np.random.default_rng(7)
    centers = rng.standard_normal((4, 8)) * 2
    X = (centers[rng.integers(0, 4, 3000)] + rng.standard_normal((3000, 8))).astype(np.float32)
    X_new = (centers[rng.integers(0, 4, 700)] + rng.standard_normal((700, 8))).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "X_new.npy", X_new)
    store_a, store_b = str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")
    fit = graph_kpca(str(tmp_path / "X.npy"), store_a, n_components=3, kernel_gamma=0.1, gamma=2.0, n_neighbors=8,
                     n_landmarks=300, knn_method="exact", chunk_rows=512, scheduler=cluster, random_state=3)
    assert fit["status"] == "completed"
    out = extend(store_a, str(tmp_path / "X_new.npy"), store_b, chunk_rows=256, scheduler=cluster)
    assert out["status"] == "completed" and out["results"]["model_run"] == fit["run"]
    manifest = read_manifest(store_b, out["run"])
    assert manifest.status == "completed" and manifest.parameters["model_run"] == fit["run"]
    Z = read_embedding(store_b, out["run"]).astype(np.float64)
    assert Z.shape == (700, 3)

    arrays, attrs = read_model(store_a, fit["run"])
    rows = arrays.pop("fit_rows")
    restored = GraphKPCA.from_state(arrays, attrs)
    restored.X_fit_ = read_X(store_a)[rows].astype(np.float64)  # what the stored model leaves out
    ref = restored.transform(read_X(store_b).astype(np.float64))
    np.testing.assert_allclose(Z, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    # the graph term is active: the kernel-PCA part alone would give another embedding
    kpca_only = (restored.nystrom_.transform(X_new.astype(np.float64)) - restored._phi_mean) @ restored._PtV \
        / restored.eigenvalues_
    assert np.abs(kpca_only - ref).max() > 1e-3 * np.abs(ref).max()
    print({"fit": fit["stages"], "extend": out["stages"]})
