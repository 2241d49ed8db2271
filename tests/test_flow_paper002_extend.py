"""TSK in the generic flows: the tsk flow's stored model, then ``extend`` labels new points by eq. 17-19.

2,000 fit points + 300 new points of one lifted Swiss roll (3 classes, 45 labeled), exact kNN. References:
the stored model restored in memory (``TSK.from_state`` + ``rebuild_index`` on the model store's X) must
give the extended labels exactly and the scores / kernel features to float32 precision; an independent
:class:`spectral.spectral_kernels.TSK` fitted on the same data must agree to the eigensolver's precision.

The default test runs the tasks (``.fn``) on 800 points with an in-process Dask cluster; the flows end to end
(Prefect harness + a worker process: ~25 s on a quiet machine, minutes under load) are marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest

from spectral.datasets import make_swiss_roll_lifted
from spectral.errors import ParameterError
from spectral.spectral_kernels import TSK
from storage.arrays import read_X
from storage.embedding_io import read_embedding, read_output
from storage.manifest import read_manifest
from storage.models import read_model

N_FIT, N_NEW = 2000, 300  # 2,000: the 'auto' eigensolver is still dense eigh (one second here)
PARAMS = dict(n_components=10, constraint="none", random_state=0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("tskflow")
    X, y, _ = make_swiss_roll_lifted(N_FIT + N_NEW, n_classes=3, random_state=11)
    rng = np.random.default_rng(2)
    y_semi = -np.ones(N_FIT, dtype=np.int64)
    for c in range(3):
        y_semi[rng.choice(np.flatnonzero(y[:N_FIT] == c), 15, replace=False)] = c
    X_new = np.vstack([X[N_FIT:], X[:5]])  # 300 new points + 5 copies of fit points (their own rows, Theorem 2)
    np.save(d / "X.npy", X[:N_FIT])
    np.save(d / "y.npy", y_semi)
    np.save(d / "X_new.npy", X_new)
    return d, y_semi, y[N_FIT:]


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def fitted(prefect_harness, cluster, data):
    from flows.paper002 import tsk

    d, _, _ = data
    store = str(d / "fit.zarr")
    out = tsk(str(d / "X.npy"), store, labels=str(d / "y.npy"), knn_method="exact", chunk_rows=512,
              scheduler=cluster, **PARAMS)
    assert out["status"] == "completed"
    return store, out["run"]


def restored_model(store: str, run: str) -> TSK:
    """The stored model in memory: models/<run> + outputs/<run>/eigenvectors, index from the store's X."""
    arrays, attrs = read_model(store, run)
    arrays["eigenvectors"] = read_output(store, run, "eigenvectors")
    model = TSK.from_state(arrays, attrs)
    model.rebuild_index(read_X(store))
    return model


def test_extend_task_labels_equal_restored_model_predict(data, tmp_path):
    """The fit / score / extend tasks on 800 points (no Prefect engine, in-process Dask)."""
    from distributed import Client, LocalCluster

    from storage.ingest import ingest
    from tasks import laplacian_eigenmaps as g
    from tasks import paper002 as t

    d, y_semi, _ = data
    n = 800
    np.save(tmp_path / "X.npy", np.load(d / "X.npy")[:n])
    np.save(tmp_path / "y.npy", y_semi[:n])
    store, new = str(tmp_path / "fit.zarr"), str(tmp_path / "new.zarr")
    ingest(str(tmp_path / "X.npy"), store, labels=str(tmp_path / "y.npy"), chunk_rows=256)
    ingest(str(d / "X_new.npy"), new, chunk_rows=128)
    g.knn_task.fn(store, "r", "tok", n_neighbors=6, knn_method="exact", metric="euclidean", holdout=0.0,
                  random_state=0)
    g.weights_task.fn(store, "r", "tok", weighting="hein_maier", symmetrize="or")
    fit_params = {k: PARAMS[k] for k in ("n_components", "constraint", "random_state")}
    t.tsk_fit_task.fn(store, "r", "tok", eta=2.0, beta="auto", include_trivial=True, class_weight=None,
                      eigen_solver="auto", **fit_params)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c, Client(c):
        t.tsk_score_task.fn(store, "r", "tok", write_embedding=True)
        info = t.tsk_extend_task.fn(store, "r", "tok", new, "e", "tok2")
    assert info["n_chunks"] == 3 and sum(info["label_counts"].values()) == N_NEW + 5
    model = restored_model(store, "r")
    X_new = read_X(new)
    np.testing.assert_array_equal(read_output(new, "e", "labels"), model.predict(X_new))
    np.testing.assert_allclose(read_output(new, "e", "scores"), model.decision_function(X_new).astype(np.float32),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(read_embedding(new, "e"), model.kernel_features(X_new).astype(np.float32),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(read_embedding(store, "r"), model.kernel_features().astype(np.float32), rtol=1e-6,
                               atol=1e-9)
    ref = TSK(knn_method="exact", **PARAMS).fit(read_X(store).astype(np.float64), y_semi[:n])  # independent
    np.testing.assert_array_equal(read_output(store, "r", "labels"), ref.transduction_)
    s_ref = ref.decision_function(X_new.astype(np.float64))
    np.testing.assert_allclose(model.decision_function(X_new), s_ref, atol=1e-6 * np.abs(s_ref).max())


@pytest.mark.slow  # Prefect harness + a Dask worker process + two flows
def test_extend_labels_equal_restored_model_predict(fitted, data, cluster):
    from flows.embed import extend

    store, run = fitted
    d, y_semi, y_new = data
    out_store = str(d / "new.zarr")
    res = extend(store, str(d / "X_new.npy"), out_store, chunk_rows=128, scheduler=cluster)  # latest model run
    assert res["status"] == "completed" and res["results"]["model_run"] == run
    assert read_manifest(out_store, res["run"]).status == "completed"
    labels = read_output(out_store, res["run"], "labels")
    scores = read_output(out_store, res["run"], "scores")
    features = read_embedding(out_store, res["run"])
    X_new = read_X(out_store)
    model = restored_model(store, run)
    np.testing.assert_array_equal(labels, model.predict(X_new))
    np.testing.assert_allclose(scores, model.decision_function(X_new).astype(np.float32), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(features, model.kernel_features(X_new).astype(np.float32), rtol=1e-6, atol=1e-9)
    assert sum(res["results"]["label_counts"].values()) == N_NEW + 5
    # the 5 copies of fit points get their transductive labels; the new points are mostly right
    np.testing.assert_array_equal(labels[N_NEW:], read_output(store, run, "labels")[:5])
    assert np.mean(labels[:N_NEW] == y_new) > 0.8


@pytest.mark.slow
def test_flow_model_equals_independent_estimator(fitted, data):
    """The flow's stored model predicts like TSK fitted in memory on the same (float32-stored) data."""
    store, run = fitted
    d, y_semi, _ = data
    X_new = np.load(d / "X_new.npy").astype(np.float32).astype(np.float64)
    ref = TSK(knn_method="exact", **PARAMS).fit(read_X(store).astype(np.float64), y_semi)
    model = restored_model(store, run)
    np.testing.assert_allclose(model.mu_, ref.mu_, rtol=1e-5, atol=1e-8 * ref.mu_.max())
    s_ref = ref.decision_function(X_new)
    np.testing.assert_allclose(model.decision_function(X_new), s_ref, atol=1e-6 * np.abs(s_ref).max())
    np.testing.assert_array_equal(read_output(store, run, "labels"), ref.transduction_)


def test_bad_tsk_parameters_in_embed_are_refused_before_any_work():
    from flows.embed import check_embed_parameters

    base = {"n_components": 10, "n_neighbors": 6, "knn_method": "exact", "eigen_solver": "auto", "holdout": 0.0,
            "random_state": 0}
    with pytest.raises(ParameterError, match=r"holdout must be 0 for method 'tsk'.*got 0\.2"):
        check_embed_parameters("tsk", 2, {**base, "holdout": 0.2})
    with pytest.raises(ParameterError, match=r"eigen_solver must be one of .*got 'nystrom'"):
        check_embed_parameters("tsk", 2, {**base, "eigen_solver": "nystrom"})
    with pytest.raises(ParameterError, match=r"n_components must be an integer in \[1, inf\); got 0"):
        check_embed_parameters("tsk", 2, {**base, "n_components": 0})


@pytest.mark.slow  # the flow run needs the Prefect harness
def test_bad_tsk_flow_parameter_is_refused(prefect_harness, tmp_path):
    from flows.paper002 import tsk

    with pytest.raises(ParameterError, match=r"eta must be a real number in \[1.0, inf\); got 0.5"):
        tsk(str(tmp_path / "none.npy"), str(tmp_path / "s.zarr"), eta=0.5)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.slow  # Prefect harness + a Dask worker process + two flows
def test_embed_with_method_tsk_then_extend(prefect_harness, cluster, data):
    """``embed(method="tsk")``: labels / scores and the kernel features V U^1/2 as the embedding; then extend."""
    from flows.embed import embed, extend

    d, y_semi, _ = data
    store = str(d / "embed.zarr")
    out = embed(str(d / "X.npy"), store, method="tsk", labels=str(d / "y.npy"), n_components=10, n_neighbors=6,
                knn_method="exact", chunk_rows=512, scheduler=cluster, random_state=0)
    assert out["status"] == "completed" and out["results"]["embedding"] == f"embeddings/{out['run']}"
    ref = TSK(10, constraint="none", knn_method="exact", random_state=0).fit(read_X(store).astype(np.float64), y_semi)
    F_ref = ref.kernel_features()
    np.testing.assert_allclose(read_embedding(store, out["run"]), F_ref, atol=1e-5 * np.abs(F_ref).max())
    np.testing.assert_array_equal(read_output(store, out["run"], "labels"), ref.transduction_)
    res = extend(store, str(d / "X_new.npy"), str(d / "embed_new.zarr"), scheduler=cluster)
    assert res["results"]["model_run"] == out["run"]
    X_new = read_X(str(d / "embed_new.zarr"))
    np.testing.assert_array_equal(read_output(str(d / "embed_new.zarr"), res["run"], "labels"),
                                  restored_model(store, out["run"]).predict(X_new))
