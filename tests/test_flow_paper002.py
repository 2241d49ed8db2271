"""The TSK flow (paper 002) on a small store: its model and written labels / scores equal the estimator's."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_dataset


def sonar_store(tmp_path, chunk_rows=64):
    from storage.ingest import ingest

    X, y = load_dataset("sonar")
    X = ((X - X.min(0)) / (X.max(0) - X.min(0))).astype(np.float32)
    rng = np.random.default_rng(5)
    y_store = -np.ones_like(y)
    for c in (0, 1):  # 12 labeled points, both classes
        y_store[rng.choice(np.flatnonzero(y == c), 6, replace=False)] = c
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y_store)
    store = str(tmp_path / "s.zarr")
    ingest(str(tmp_path / "X.npy"), store, labels=str(tmp_path / "y.npy"), chunk_rows=chunk_rows)
    return store, y_store


def reference(store, y_store, constraint, include_trivial=True):
    from spectral.spectral_kernels import TSK
    from storage.arrays import read_X

    X = read_X(store).astype(np.float64)
    return TSK(10, constraint=constraint, include_trivial=include_trivial, knn_method="exact",
               random_state=0).fit(X, y_store)


@pytest.mark.parametrize("constraint, include_trivial", [("decay", False), ("none", True)])
def test_fit_task_matches_estimator(tmp_path, constraint, include_trivial):
    from storage.embedding_io import read_output
    from storage.models import read_model
    from tasks import laplacian_eigenmaps as g
    from tasks import paper002 as t

    store, y_store = sonar_store(tmp_path)
    g.knn_task.fn(store, "r1", "tok", n_neighbors=6, knn_method="exact", metric="euclidean", holdout=0.0,
                  random_state=0)
    g.weights_task.fn(store, "r1", "tok", weighting="hein_maier", symmetrize="or")
    info = t.tsk_fit_task.fn(store, "r1", "tok", n_components=10, eta=2.0, beta="auto", constraint=constraint,
                             include_trivial=include_trivial, class_weight=None, eigen_solver="auto", random_state=0)
    ref = reference(store, y_store, constraint, include_trivial)
    arrays, attrs = read_model(store, "r1")
    np.testing.assert_allclose(arrays["eigenvalues"], ref.eigenvalues_, atol=1e-6)
    np.testing.assert_allclose(arrays["mu"], ref.mu_, rtol=1e-4, atol=1e-6 * ref.mu_.max())
    V = read_output(store, "r1", t.EIGENVECTORS)
    np.testing.assert_allclose(V, ref.eigenvectors_, atol=1e-6)
    assert info["n_labeled"] == 12 and attrs["beta_"] == pytest.approx(208 / 12)
    np.testing.assert_array_equal(ref.classes_[np.argmax(V @ arrays["class_matrix"], 1)], ref.transduction_)


def test_fit_task_needs_labels(tmp_path):
    from storage.errors import StoreFormatError
    from storage.ingest import ingest
    from tasks import laplacian_eigenmaps as g
    from tasks import paper002 as t

    X, _ = load_dataset("heart")
    np.save(tmp_path / "X.npy", X[:60])
    store = str(tmp_path / "s.zarr")
    ingest(str(tmp_path / "X.npy"), store)
    g.knn_task.fn(store, "r", "tok", n_neighbors=6, knn_method="exact", metric="euclidean", holdout=0.0,
                  random_state=0)
    g.weights_task.fn(store, "r", "tok", weighting="hein_maier", symmetrize="or")
    with pytest.raises(StoreFormatError, match="has no labels y"):
        t.tsk_fit_task.fn(store, "r", "tok", n_components=5, eta=2.0, beta="auto", constraint="decay",
                          include_trivial=True, class_weight=None, eigen_solver="auto", random_state=0)


@pytest.mark.slow  # Prefect harness + a Dask cluster: ~20 s when the machine is quiet
def test_tsk_flow_writes_labels_and_scores_of_every_point(tmp_path, prefect_harness):
    from flows.paper002 import tsk
    from storage.embedding_io import read_output

    store, y_store = sonar_store(tmp_path)
    out = tsk(store, store, n_components=10, constraint="none", knn_method="exact", n_workers=1, random_state=0)
    assert out["status"] == "completed"
    ref = reference(store, y_store, "none")
    labels = read_output(store, out["run"], "labels")
    scores = read_output(store, out["run"], "scores")
    np.testing.assert_allclose(scores, ref.scores_, rtol=1e-4, atol=1e-6 * np.abs(ref.scores_).max())
    np.testing.assert_array_equal(labels, ref.transduction_)
    assert sum(out["results"]["label_counts"].values()) == len(y_store)
