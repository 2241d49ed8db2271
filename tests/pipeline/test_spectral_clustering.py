"""The ``spectral_clustering`` method of the pipeline end to end on a LocalCluster: a folder of partitions embedded with
a hold-out, a new partition placed by an update, new points extended; labels exported to .npy, .parquet and AnnData.

References: the planted labels of Gaussian blobs; the in-memory :class:`spectral.clustering.SpectralClustering` on
the same rows; the in-memory k-means of :class:`spectral.cluster_assignment.ClusterRule` on the stored eigenmap.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from eigenflow.spectral import SpectralClustering
from eigenflow.storage.checksums import verify

PARAMS = dict(n_clusters=5, knn_method="exact")
N_FIT, N_NEW, N_EXTEND = 3000, 500, 300


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=N_FIT + N_NEW + N_EXTEND, centers=5, n_features=6, cluster_std=1.5,
                      center_box=(-12, 12), random_state=3)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def clustered(prefect_api, cluster, blobs, tmp_path_factory):
    """``(dir, store, embed summary, update summary, extend summary)``: p0 embedded with 10 % held out (chunks of 400
    rows), p1 placed by an update, the last rows extended into a store of their own."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend
    from eigenflow.flows.update import update

    X, _ = blobs
    d = tmp_path_factory.mktemp("clustering")
    parts = d / "parts"
    parts.mkdir()
    np.save(parts / "p0.npy", X[:N_FIT])
    store = str(d / "s.zarr")
    fitted = embed(str(parts), store, method="spectral_clustering", params=PARAMS, holdout=0.1, chunk_rows=400,
                   random_state=0, scheduler=cluster)
    np.save(parts / "p1.npy", X[N_FIT:N_FIT + N_NEW])
    updated = update(str(parts), store, scheduler=cluster, refit="never")
    np.save(d / "new.npy", X[N_FIT + N_NEW:])
    extended = extend(store, str(d / "new.npy"), str(d / "out.zarr"), scheduler=cluster)
    return d, store, fitted, updated, extended


def test_labels_of_every_row_are_written_and_exported(clustered, blobs):
    from eigenflow.storage.export import export_output

    d, store, fitted, updated, _ = clustered
    _, y = blobs
    results = fitted["results"]
    assert results["labels"] == f"outputs/{fitted['run']}/labels" and results["n_clusters"] == 5
    assert sum(results["cluster_sizes"]) == results["n_fit"] == 2700
    export_output(store, d / "labels.npy", output="labels")
    labels = np.load(d / "labels.npy")
    assert labels.shape == (N_FIT + N_NEW,)  # the fit's rows and the update's, once each
    assert adjusted_rand_score(y[:N_FIT + N_NEW], labels) >= 0.99
    export_output(store, d / "labels.parquet", output="labels")
    table = pq.read_table(d / "labels.parquet").to_pandas()
    np.testing.assert_array_equal(table["labels"].to_numpy(), labels)
    assert table["run"].astype(str).tolist() == [fitted["run"]] * N_FIT + [updated["run"]] * N_NEW
    assert set(table["placement"][:N_FIT]) == {"fitted", "held_out"}
    assert set(table["placement"][N_FIT:]) == {"mapped"}
    assert updated["results"]["labels"] == f"outputs/{updated['run']}/labels"
    assert verify(store)["bad"] == []


def test_pipeline_labels_match_the_in_memory_estimator(clustered, blobs):
    from eigenflow.storage.embedding_io import read_output
    from eigenflow.tasks.bodies.fit_rows import HELD_OUT

    _, store, fitted, _, _ = clustered
    X, _ = blobs
    labels = read_output(store, fitted["run"], "labels")
    held_out = read_output(store, fitted["run"], HELD_OUT)
    est = SpectralClustering(**PARAMS, random_state=0).fit(X[:N_FIT][~held_out])
    assert adjusted_rand_score(est.labels_, labels[~held_out]) >= 0.99
    assert adjusted_rand_score(est.predict(X[:N_FIT][held_out]), labels[held_out]) >= 0.99


def test_the_chunked_clustering_equals_the_in_memory_one(clustered):
    """The workers' k-means (7 chunks of 400 fit rows) against the same rule fitted on every row in one array, same
    seed: the same centres and labels."""
    from eigenflow.spectral._validation import check_random_state
    from eigenflow.spectral.cluster_assignment import lloyd_sums
    from eigenflow.spectral.clustering import eigenmap_rule
    from eigenflow.tasks.bodies.stored_model import load_fitted

    _, store, fitted, _, _ = clustered
    _, model, _ = load_fitted(store, fitted["run"], with_index=False)
    rule, _ = eigenmap_rule(model.eigenmap_model_, 5, 20, "kmeans")
    V = rule.features(model.eigenmap_model_.embedding, model.eigenmap_model_.component_labels)
    rule.fit_assignment(V.shape[0], lambda rows: V[rows], lambda c: lloyd_sums(V, c), check_random_state(0),
                        n_init=10)
    np.testing.assert_allclose(model.rule_.centers, rule.centers, atol=1e-12)
    np.testing.assert_array_equal(model.labels_, rule.labels(V))


def test_extend_labels_new_points_with_the_stored_model(clustered, blobs):
    from eigenflow.storage.export import export_output

    d, store, _, _, extended = clustered
    X, y = blobs
    export_output(str(d / "out.zarr"), d / "extended.npy", output="labels")
    labels = np.load(d / "extended.npy")
    assert labels.shape == (N_EXTEND,)
    export_output(store, d / "all.npy", output="labels")
    fit_labels = np.load(d / "all.npy")
    # the same cluster ids as the fit: each planted blob keeps the id the fit gave it
    for blob in range(5):
        assert set(labels[y[N_FIT + N_NEW:] == blob]) == set(np.unique(fit_labels[y[:N_FIT + N_NEW] == blob]))


def test_the_anndata_export_has_the_labels_as_a_categorical(clustered):
    import anndata

    from eigenflow.storage.anndata_export import export_to_anndata

    d, store, _, _, _ = clustered
    anndata.AnnData(X=np.zeros((N_FIT + N_NEW, 1), dtype=np.float32)).write_h5ad(d / "cells.h5ad")
    export_to_anndata(store, str(d / "cells.h5ad"))
    cells = anndata.read_h5ad(d / "cells.h5ad")
    labels = cells.obs["X_eigenflow_labels"]
    assert labels.dtype == "category" and list(labels.cat.categories) == ["0", "1", "2", "3", "4"]
    assert cells.obsm["X_eigenflow"].shape == (N_FIT + N_NEW, 5)


def test_the_landmark_path_by_chunks_equals_the_in_memory_estimator(prefect_api, cluster, blobs, tmp_path):
    """affinity="landmarks" in the pipeline (landmark graph and k-means by chunks of 400 rows on the workers) against
    the estimator fitted in memory on the same fit rows with the same seed: the same labels, for the fitted and the
    held-out rows."""
    from eigenflow.flows.embed import embed
    from eigenflow.storage.embedding_io import read_output
    from eigenflow.tasks.bodies.fit_rows import HELD_OUT

    X, y = blobs
    np.save(tmp_path / "X.npy", X[:N_FIT])
    params = {"n_clusters": 5, "affinity": "landmarks", "n_landmarks": 200}
    done = embed(str(tmp_path / "X.npy"), str(tmp_path / "l.zarr"), method="spectral_clustering", params=params,
                 holdout=0.1, chunk_rows=400, random_state=0, scheduler=cluster)
    assert done["stages"].keys() >= {"fit", "embed-points"} and done["results"]["n_clusters"] == 5
    labels = read_output(str(tmp_path / "l.zarr"), done["run"], "labels")
    held = read_output(str(tmp_path / "l.zarr"), done["run"], HELD_OUT).astype(bool)
    est = SpectralClustering(**params, random_state=0).fit(X[:N_FIT][~held])
    assert adjusted_rand_score(est.labels_, labels[~held]) == 1.0
    assert adjusted_rand_score(est.predict(X[:N_FIT][held]), labels[held]) == 1.0
    assert adjusted_rand_score(y[:N_FIT], labels) >= 0.99
