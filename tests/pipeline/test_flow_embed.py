"""The embed / extend flows end to end under ``prefect_test_harness`` on a LocalCluster (2 workers x 1 thread).

References: :class:`spectral.embedding.eigenmaps.LaplacianEigenmaps` on the same data (float32 as stored, then float64)
and parameters; its ``transform`` for out-of-sample points. Most tests use the exact kNN search (no numba
compile); ``test_flow_with_nndescent`` (slow) runs NN-descent on the workers.
"""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps
from eigenflow.spectral.errors import DisconnectedGraphError, ParameterError
from eigenflow.storage import layout
from eigenflow.storage.arrays import read_X
from eigenflow.storage.embedding_io import read_embedding, read_output
from eigenflow.storage.info import info
from eigenflow.storage.manifest import read_manifest
from eigenflow.storage.models import read_model

N_POINTS = 2500  # > 2000: the 'auto' eigensolver is lobpcg (dense eigh costs seconds on 2 cores)
PARAMS = dict(n_components=2, n_neighbors=12)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("flowdata")
    X, y, _ = make_swiss_roll_lifted(N_POINTS, random_state=3)
    X_new, _, _ = make_swiss_roll_lifted(300, random_state=4)
    np.save(d / "X.npy", X)
    np.save(d / "y.npy", y)
    np.save(d / "X_new.npy", X_new)
    return d, X.astype(np.float64), y, X_new.astype(np.float64)


@pytest.fixture(scope="module")
def embedded(prefect_api, cluster, data):
    """One embed run (no hold-out) of the module's data: ``(store, summary)``."""
    from eigenflow.flows.embed import embed

    d, *_ = data
    store = str(d / "full.zarr")
    summary = embed(str(d / "X.npy"), store, labels=str(d / "y.npy"), params={"knn_method": "exact", **PARAMS},
                    chunk_rows=512, random_state=0, scheduler=cluster)
    return store, summary


def estimator(**extra) -> LaplacianEigenmaps:
    return LaplacianEigenmaps(knn_method="exact", random_state=0, **PARAMS, **extra)


def assert_equal_up_to_sign(A: np.ndarray, B: np.ndarray, atol: float) -> None:
    """Columns of A equal those of B up to one sign per column."""
    assert A.shape == B.shape
    for j in range(A.shape[1]):
        sign = np.sign(A[:, j] @ B[:, j]) or 1.0
        np.testing.assert_allclose(A[:, j], sign * B[:, j], atol=atol, rtol=0)


def test_embed_store_contents_and_manifest(embedded, data):
    store, summary = embedded
    _, X, y, _ = data
    assert summary["status"] == "completed"
    contents = info(store)
    paths = {a["path"] for a in contents["arrays"]}
    run = summary["run"]
    assert {"X", "y", layout.KNN_INDICES, layout.KNN_DISTANCES, f"{layout.WEIGHTS}/indptr",
            f"embeddings/{run}", f"models/{run}/embedding"} <= paths
    np.testing.assert_array_equal(read_X(store), X.astype(np.float32))
    manifest = read_manifest(store, run)
    assert manifest.status == "completed" and manifest.error is None
    stages = manifest.stage_seconds()
    # the stages in the flow's order: the cluster first (the ingest's chunks run on it)
    assert list(stages) == ["cluster", "ingest", "knn", "weights", "eigensolve", "embed-points"]
    assert all(s is not None and s >= 0 for s in stages.values())
    infos = {s.name: s.info for s in manifest.stages}
    for name in ("knn", "weights", "eigensolve"):  # the heavy stages ran on a Dask worker, not the flow process
        assert infos[name]["worker"].startswith("tcp://127.0.0.1:") and infos[name]["worker_peak_rss_gb"] > 0
    # each stage took its input from the previous stage's memory, not from the store it had just written
    assert infos["weights"]["graph_source"] == "memory" and infos["eigensolve"]["weights_source"] == "memory"
    assert infos["knn"]["write"] == "background"  # the graph's write ran beside the weights stage
    # a stage's seconds span the work it ran (the index build, the solve), not only the collection of a result
    assert stages["knn"] >= infos["knn"]["build_seconds"] and stages["eigensolve"] >= infos["eigensolve"]["solve_seconds"]
    assert manifest.parameters["n_neighbors"] == PARAMS["n_neighbors"] and manifest.seed == 0
    assert manifest.versions["prefect"] and manifest.versions["zarr"]
    # fixed time outside the stages: the workers' load of the kNN kernels (none: exact kNN)
    fixed = manifest.fixed_seconds
    assert fixed == {"compile": 0.0} and summary["fixed_seconds"] == fixed


def test_embed_equals_estimator_up_to_sign(embedded, data):
    store, summary = embedded
    _, X, _, _ = data
    Z_ref = estimator().fit_transform(X)
    Z = read_embedding(store, summary["run"])  # float32 in the store
    scale = np.abs(Z_ref).max()
    assert_equal_up_to_sign(Z.astype(np.float64), Z_ref, atol=1e-5 * scale)
    arrays, _ = read_model(store, summary["run"])
    assert_equal_up_to_sign(arrays["embedding"], Z_ref, atol=1e-5 * scale)  # lobpcg tolerance


def test_extend_equals_estimator_transform(embedded, data, cluster):
    from eigenflow.flows.extend import extend

    store, summary = embedded
    d, X, _, X_new = data
    out = str(d / "new.zarr")
    result = extend(store, str(d / "X_new.npy"), out, scheduler=cluster)
    assert result["status"] == "completed" and result["results"]["model_run"] == summary["run"]
    Z_new = read_embedding(out, result["run"])
    ref = estimator().fit(X).transform(X_new)
    assert_equal_up_to_sign(Z_new.astype(np.float64), ref, atol=1e-5 * np.abs(ref).max())
    assert read_manifest(out, result["run"]).status == "completed"


def test_holdout_rows_are_extended_out_of_sample(prefect_api, cluster, data):
    from eigenflow.flows.embed import embed

    d, X, _, _ = data
    store = str(d / "holdout.zarr")
    summary = embed(str(d / "X.npy"), store, params={"knn_method": "exact", **PARAMS}, chunk_rows=700,
                    holdout=0.15, random_state=0, scheduler=cluster)
    fitted = read_output(store, summary["run"], "in_fit").astype(bool)
    assert fitted.sum() == N_POINTS - round(0.15 * N_POINTS)
    est = estimator().fit(X[fitted])
    Z = read_embedding(store, summary["run"]).astype(np.float64)
    scale = np.abs(est.embedding_).max()
    assert_equal_up_to_sign(Z[fitted], est.embedding_, atol=1e-5 * scale)
    assert_equal_up_to_sign(Z[~fitted], est.transform(X[~fitted]), atol=1e-5 * scale)


def test_same_embedding_whatever_chunks_and_workers(prefect_api, cluster, data):
    """2 worker processes x 256-row chunks vs 1 in-process worker x 1500-row chunks: identical embeddings."""
    from distributed import LocalCluster

    from eigenflow.flows.embed import embed

    d, *_ = data
    runs = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as single:
        for name, chunk_rows, scheduler in (("a", 256, cluster), ("b", 1500, single.scheduler_address)):
            store = str(d / f"chunks_{name}.zarr")
            s = embed(str(d / "X.npy"), store, params={"knn_method": "exact", **PARAMS}, chunk_rows=chunk_rows,
                      holdout=0.1, random_state=7, scheduler=scheduler)
            runs.append(read_embedding(store, s["run"]))
    assert np.isfinite(runs[0]).all()
    # lobpcg itself is reproducible only to ~1e-9 between two calls with the same seed (seen with
    # LaplacianEigenmaps alone), so the comparison allows 1e-5 of the scale; a chunking error moves rows by O(scale)
    np.testing.assert_allclose(runs[0], runs[1], rtol=0, atol=1e-5 * np.abs(runs[0]).max())


def test_failed_stage_marks_manifest_failed(prefect_api, cluster, tmp_path):
    from eigenflow.flows.embed import embed

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(150, 5)), 1000.0 + rng.normal(size=(150, 5))])  # two far-apart blobs
    np.save(tmp_path / "two.npy", X)
    store = str(tmp_path / "two.zarr")
    with pytest.raises(DisconnectedGraphError, match="2 connected components"):
        embed(str(tmp_path / "two.npy"), store, params={"knn_method": "exact", "n_neighbors": 5}, scheduler=cluster,
              run_name="two-blobs")
    manifest = read_manifest(store, "two-blobs")
    assert manifest.status == "failed" and "connected components" in manifest.error
    assert [(s.name, s.status) for s in manifest.stages][-1] == ("eigensolve", "failed")


def test_bad_parameter_is_refused_before_any_work(prefect_api, tmp_path, data):
    from eigenflow.flows.embed import embed

    d, *_ = data
    with pytest.raises(ParameterError, match=r"weighting must be one of .*got 'gaussian'"):
        embed(str(d / "X.npy"), str(tmp_path / "never.zarr"), params={"weighting": "gaussian"})
    with pytest.raises(ParameterError, match=r"holdout must be a real number in \[0.0, 1.0\); got 1.0"):
        embed(str(d / "X.npy"), str(tmp_path / "never.zarr"), holdout=1.0)
    assert not (tmp_path / "never.zarr").exists()


@pytest.mark.slow
def test_flow_with_nndescent(prefect_api, cluster, tmp_path):
    """NN-descent graph + out-of-sample queries on the workers (pays numba's compile in every process)."""
    from eigenflow.flows.embed import embed

    X, _, _ = make_swiss_roll_lifted(3000, random_state=5)
    np.save(tmp_path / "X.npy", X)
    store = str(tmp_path / "nnd.zarr")
    s = embed(str(tmp_path / "X.npy"), store, params={"knn_method": "nndescent", **PARAMS}, holdout=0.1,
              random_state=0, scheduler=cluster)
    fitted = read_output(store, s["run"], "in_fit").astype(bool)
    est = LaplacianEigenmaps(knn_method="nndescent", random_state=0, **PARAMS).fit(X[fitted].astype(np.float64))
    Z = read_embedding(store, s["run"]).astype(np.float64)
    scale = np.abs(est.embedding_).max()
    assert_equal_up_to_sign(Z[fitted], est.embedding_, atol=1e-4 * scale)
    assert_equal_up_to_sign(Z[~fitted], est.transform(X[~fitted].astype(np.float64)), atol=1e-4 * scale)


def test_rerun_with_same_run_name_resumes_from_cache(prefect_api, thread_cluster, data, monkeypatch):
    """A run that failed at the eigensolver, re-run under the same name, reuses its finished kNN / weights tasks.

    The stage bodies run on the workers: an in-process cluster lets the monkeypatch reach them."""
    import os

    import eigenflow.spectral.embedding.eigenmaps as le  # the eigensolver the eigensolve stage calls
    from eigenflow.flows.embed import embed

    d, X, _, _ = data
    store = str(d / "resume.zarr")
    common = _exact_run(thread_cluster, "resume-me")
    _fail_once(monkeypatch, le, "laplacian_eigenmaps_from_graph", MemoryError("injected eigensolver failure"))
    with pytest.raises(MemoryError, match="injected"):
        embed(str(d / "X.npy"), store, **common)
    assert read_manifest(store, "resume-me").status == "failed"
    knn_meta = os.path.join(store, layout.KNN_INDICES, "zarr.json")
    weights_meta = os.path.join(store, layout.WEIGHTS, "zarr.json")
    stamps = (os.stat(knn_meta).st_mtime_ns, os.stat(weights_meta).st_mtime_ns)
    summary = embed(str(d / "X.npy"), store, **common)
    assert summary["status"] == "completed"
    assert (os.stat(knn_meta).st_mtime_ns, os.stat(weights_meta).st_mtime_ns) == stamps  # not recomputed
    _assert_embedding_is_the_estimators(store, "resume-me", X)


def test_resumed_weights_stage_reads_the_stored_graph(prefect_api, thread_cluster, data, monkeypatch):
    """A run that failed in the weights stage, re-run under the same name: the kNN stage is reused from the store,
    so the weights stage reads the stored graph (a failed run leaves nothing in the workers), and the
    eigensolve takes W from the weights stage's memory; the embedding equals the estimator's."""
    from distributed import Client

    import eigenflow.spectral.graph.weights as le  # the symmetrization the weights stage calls
    from eigenflow.flows.embed import embed

    d, X, _, _ = data
    store = str(d / "resume-weights.zarr")
    common = _exact_run(thread_cluster, "resume-weights")
    _fail_once(monkeypatch, le, "symmetrize_weights", MemoryError("injected weights failure"))
    with pytest.raises(MemoryError, match="injected"):
        embed(str(d / "X.npy"), store, **common)
    with Client(thread_cluster) as client:
        assert not [name for name in client.list_datasets() if name.startswith("eigenflow-")]
        assert not any(client.run(_held_handoffs).values())  # the failed run left nothing in the workers
    summary = embed(str(d / "X.npy"), store, **common)
    infos = {s.name: s.info for s in read_manifest(store, "resume-weights").stages}
    assert infos["knn"].get("reused") and not infos["weights"].get("reused")
    assert infos["weights"]["graph_source"] == "store" and infos["eigensolve"]["weights_source"] == "memory"
    _assert_embedding_is_the_estimators(store, summary["run"], X)


def test_same_run_name_with_other_parameters_is_refused(prefect_api, cluster, embedded, data):
    """Re-using a run's name with other parameters names the differences and changes nothing in the store."""
    from eigenflow.flows.embed import embed

    store, summary = embedded
    d, *_ = data
    before = read_embedding(store, summary["run"])
    with pytest.raises(ParameterError, match=r"was started with other parameters \(n_components: 2 -> 3, "
                                             r"n_neighbors: 12 -> 30\); choose a new run name"):
        embed(str(d / "X.npy"), store, labels=str(d / "y.npy"),
              params={"knn_method": "exact", "n_components": 3, "n_neighbors": 30}, chunk_rows=512,
              random_state=0, scheduler=cluster, run_name=summary["run"])
    np.testing.assert_array_equal(read_embedding(store, summary["run"]), before)
    assert read_manifest(store, summary["run"]).status == "completed"


def test_extend_checks_the_feature_count_from_the_header_first(prefect_api, embedded, tmp_path):
    """New points with the wrong number of features: refused from the .npy header, no store left behind."""
    from eigenflow.flows.extend import extend
    from eigenflow.storage.errors import StoreFormatError

    store, _ = embedded
    np.save(tmp_path / "narrow.npy", np.zeros((10, 5), dtype=np.float32))
    with pytest.raises(StoreFormatError, match=r"new points must have 32 features .*narrow.npy has 5"):
        extend(store, str(tmp_path / "narrow.npy"), str(tmp_path / "out.zarr"))
    assert not (tmp_path / "out.zarr").exists()


def test_exact_copies_are_collapsed_before_the_graph(prefect_api, cluster, tmp_path):
    """10 points x 2,000 exact copies plus a manifold: one graph component (no cliques of copies), every copy
    written with its original's embedding, the number of copies recorded in the manifest."""
    from eigenflow.flows.embed import embed

    X, _, _ = make_swiss_roll_lifted(3000, random_state=2)
    originals = np.arange(0, 3000, 300)  # 10 points of the manifold
    copies = np.repeat(originals, 2000)
    np.save(tmp_path / "X.npy", np.vstack([X, X[copies]]))
    store = str(tmp_path / "dups.zarr")
    s = embed(str(tmp_path / "X.npy"), store, params={"knn_method": "exact", **PARAMS}, chunk_rows=4096,
              random_state=0, scheduler=cluster)
    assert s["status"] == "completed" and s["results"]["n_duplicates"] == 10 * 2000
    assert s["results"]["n_components_graph"] == 1
    Z = read_embedding(store, s["run"])
    np.testing.assert_array_equal(Z[3000:], Z[copies])  # every copy: its original's row
    fitted = read_output(store, s["run"], "in_fit").astype(bool)
    assert fitted[:3000].all() and not fitted[3000:].any()
    est = LaplacianEigenmaps(knn_method="exact", random_state=0, **PARAMS).fit(X.astype(np.float32).astype(np.float64))
    assert_equal_up_to_sign(Z[:3000].astype(np.float64), est.embedding_, atol=1e-5 * np.abs(est.embedding_).max())


def test_a_failed_background_graph_write_fails_the_run_and_its_resume_builds_the_graph_again(
        prefect_api, thread_cluster, data, monkeypatch):
    """The kNN stage's graph is written in a thread of its worker while the weights stage computes W from memory:
    a failure of that write is raised by the eigensolve (which joins W's write, which waits for the graph's), the
    run is recorded as failed, and the resumed run, whose stored graph is incomplete, builds it again."""
    import eigenflow.tasks.bodies.laplacian_eigenmaps as le
    from eigenflow.flows.embed import embed

    d, X, _, _ = data
    store = str(d / "graph-write.zarr")
    common = _exact_run(thread_cluster, "graph-write")
    _fail_once(monkeypatch, le, "write_knn", OSError("injected graph write failure"))
    with pytest.raises(OSError, match="injected graph write failure"):
        embed(str(d / "X.npy"), store, **common)
    failed = {s.name: s for s in read_manifest(store, "graph-write").stages}
    assert failed["knn"].info["write"] == "background" and failed["weights"].info["graph_source"] == "memory"
    assert failed["eigensolve"].status == "failed"
    summary = embed(str(d / "X.npy"), store, **common)
    infos = {s.name: s.info for s in read_manifest(store, "graph-write").stages}
    assert not infos["knn"].get("reused") and summary["status"] == "completed"
    _assert_embedding_is_the_estimators(store, summary["run"], X)


def _exact_run(scheduler: str, run: str) -> dict:
    """The ``embed`` arguments of a resume test: exact kNN with PARAMS, seed 0, on ``scheduler``, named ``run``."""
    return dict(params={"knn_method": "exact", **PARAMS}, random_state=0, scheduler=scheduler, run_name=run)


def _fail_once(monkeypatch, module, name: str, error: BaseException) -> None:
    """Make ``module.name`` raise ``error`` at its first call only (then the real function is back)."""
    real = getattr(module, name)

    def fail_once(*args, **kwargs):
        monkeypatch.setattr(module, name, real)
        raise error

    monkeypatch.setattr(module, name, fail_once)


def _assert_embedding_is_the_estimators(store: str, run: str, X: np.ndarray) -> None:
    """The stored embedding of ``run`` equals the estimator's on ``X`` up to sign (float32 in the store)."""
    Z_ref = estimator().fit_transform(X)
    assert_equal_up_to_sign(read_embedding(store, run).astype(np.float64), Z_ref, atol=1e-5 * np.abs(Z_ref).max())


def _held_handoffs(dask_worker) -> int:
    from eigenflow.tasks.bodies.stage_handoff import PLUGIN_NAME

    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    return 0 if plugin is None else len(plugin.held)


def test_embed_and_extend_walk_each_store_once(prefect_api, thread_cluster, data, monkeypatch):
    """A run validates its store once (the walk of every node's metadata: after the ingest, or before the checks of a
    store that exists); its stages, worker bodies and chunk tasks (here on workers in this process) receive the
    opened handle and never walk the tree again. An extend walks the model store and its output store once each."""
    import os

    import eigenflow.storage.store as store_module
    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend

    d, *_ = data
    walked = []
    validate = store_module.validate_store
    monkeypatch.setattr(store_module, "validate_store",
                        lambda url, *args, **kwargs: walked.append(os.fspath(url)) or validate(url, *args, **kwargs))
    store, out = str(d / "walked.zarr"), str(d / "walked_new.zarr")
    summary = embed(str(d / "X.npy"), store, labels=str(d / "y.npy"), holdout=0.2, chunk_rows=512, random_state=0,
                    params={"knn_method": "exact", **PARAMS}, scheduler=thread_cluster)
    assert summary["status"] == "completed"
    assert walked.count(store) == 1
    extend(store, str(d / "X_new.npy"), out, run=summary["run"], scheduler=thread_cluster)
    assert walked.count(store) == 2 and walked.count(out) == 1
    again = embed(store, store, holdout=0.2, chunk_rows=512, random_state=0, params={"knn_method": "exact", **PARAMS},
                  run_name="again", scheduler=thread_cluster)  # an existing store: its checks and the run share it
    assert again["status"] == "completed" and walked.count(store) == 3
