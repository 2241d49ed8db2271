"""Round trips of kNN graphs, CSR matrices, embeddings / per-point outputs, models and run manifests."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from eigenflow import storage
from eigenflow.storage import StorageError, StoreFormatError, layout

N, D, CHUNK = 50, 3, 16


@pytest.fixture
def store(tmp_path):
    X = np.random.default_rng(3).normal(size=(N, D))
    storage.ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)
    return tmp_path / "s.zarr"


# ---- kNN graph -----------------------------------------------------------------------------------------------
def test_knn_roundtrip(store):
    rng = np.random.default_rng(0)
    idx = rng.integers(0, N, size=(N, 5))
    dist = rng.random((N, 5))
    storage.write_knn(store, idx, dist, {"metric": "euclidean", "method": "exact", "recall": 1.0})
    i2, d2 = storage.read_knn(store)
    assert i2.dtype == np.int64 and d2.dtype == np.float32
    np.testing.assert_array_equal(i2, idx)
    np.testing.assert_array_equal(d2, dist.astype(np.float32))
    i3, d3 = storage.read_knn(store, 16, 32)
    np.testing.assert_array_equal(i3, idx[16:32])
    assert storage.read_knn_attrs(store) == {"metric": "euclidean", "method": "exact", "recall": 1.0, "k": 5, "n_index": N}
    assert storage.open_store(store)[layout.KNN_INDICES].chunks == (CHUNK, 5)


def test_knn_rows_of_a_row_set(store):
    from eigenflow.storage.graph_io import read_knn_rows

    rng = np.random.default_rng(1)
    idx = rng.integers(0, N, size=(N, 5))
    dist = rng.random((N, 5))
    storage.write_knn(store, idx, dist)
    for rows in (np.array([0, 3, 15, 16, 17, 40, 49]), np.arange(N), np.array([33]), np.array([], np.int64)):
        i2, d2 = read_knn_rows(store, rows)  # crosses chunk boundaries (CHUNK = 16)
        np.testing.assert_array_equal(i2, idx[rows])
        np.testing.assert_array_equal(d2, dist[rows].astype(np.float32))
        assert i2.dtype == np.int64 and d2.dtype == np.float32 and i2.shape == (rows.size, 5)
    with pytest.raises(StorageError, match=r"rows must be ascending, distinct and in \[0, 49\]; got range \[3, 50\]"):
        read_knn_rows(store, np.array([3, 50]))
    with pytest.raises(StorageError, match=r"rows must be ascending, distinct and in \[0, 49\]; got range \[3, 7\]"):
        read_knn_rows(store, np.array([7, 3]))
    with pytest.raises(StorageError, match=r"rows must be a 1-D integer array; got float64 \(2,\)"):
        read_knn_rows(store, np.array([1.0, 2.0]))


def test_knn_block_writes_and_validation(store):
    idx = np.tile(np.arange(4), (N, 1))
    dist = np.ones((N, 4), np.float32)
    storage.create_knn(store, 4, {"metric": "euclidean"})
    for start in range(0, N, CHUNK):
        storage.write_knn_block(store, start, idx[start:start + CHUNK], dist[start:start + CHUNK])
    np.testing.assert_array_equal(storage.read_knn(store)[0], idx)
    with pytest.raises(StorageError, match=r"indices must be in \[0, 49\] .*got range \[50, 50\]"):
        storage.write_knn(store, np.full((N, 4), 50), dist)
    with pytest.raises(StorageError, match=r"indices and distances must both have shape"):
        storage.write_knn(store, idx, dist[:, :3])
    with pytest.raises(StorageError, match=r"indices must have n=50 rows"):
        storage.write_knn(store, idx[:10], dist[:10])
    with pytest.raises(StorageError, match=r"k must be an integer >= 1; got 0"):
        storage.create_knn(store, 0)


# ---- CSR -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_csr_roundtrip_and_row_blocks(store, dtype):
    W = sp.random(N, N, density=0.1, format="csr", random_state=1, dtype=dtype)
    storage.write_csr(store, layout.WEIGHTS, W, {"weighting": "heat", "symmetrize": "or"})
    W2 = storage.read_csr(store, layout.WEIGHTS)
    assert W2.dtype == dtype and W2.shape == (N, N)
    assert (W2 != W).nnz == 0
    for i0, i1 in [(0, 7), (7, 33), (33, 50), (20, 20)]:
        block = storage.read_csr(store, layout.WEIGHTS, rows=(i0, i1))
        assert block.shape == (i1 - i0, N) and (block != W[i0:i1]).nnz == 0
    g = storage.open_store(store)[layout.WEIGHTS]
    assert g["indptr"].dtype == np.int64 and g["indices"].dtype == np.int32 and g["data"].dtype == dtype
    attrs = storage.read_csr_attrs(store, layout.WEIGHTS)
    assert attrs["encoding-type"] == "csr_matrix" and attrs["shape"] == [N, N] and attrs["weighting"] == "heat"


def test_csr_rectangular_empty_and_errors(store):
    W = sp.csr_matrix((4, 7), dtype=np.float64)
    storage.write_csr(store, "graph/empty", W)
    assert storage.read_csr(store, "graph/empty").shape == (4, 7)
    B = sp.coo_matrix(([1, 2], ([0, 3], [6, 1])), shape=(4, 7))  # int data, COO input
    storage.write_csr(store, "graph/b", B)
    out = storage.read_csr(store, "graph/b")
    assert out.dtype == np.float64 and np.array_equal(out.toarray(), B.toarray())
    with pytest.raises(StorageError, match=r"csr must be a scipy.sparse matrix"):
        storage.write_csr(store, "graph/x", np.eye(3))
    with pytest.raises(StorageError, match=r"reserved for the CSR encoding"):
        storage.write_csr(store, "graph/x", W, {"shape": [1, 1]})
    with pytest.raises(StorageError, match=r"rows must satisfy 0 <= i0 <= i1 <= n_rows=4; got \(2, 9\)"):
        storage.read_csr(store, "graph/b", rows=(2, 9))
    with pytest.raises(StoreFormatError, match=r"'X' in .* is not a zarr group"):
        storage.read_csr(store, "X")
    with pytest.raises(StorageError, match=r"name must be 1-128 characters"):
        storage.write_csr(store, "../evil", W)


# ---- embeddings / per-point outputs -----------------------------------------------------------------------------------
def test_embedding_blocks_aligned_with_x(store):
    Z = np.random.default_rng(1).normal(size=(N, 2))
    arr = storage.create_embedding(store, "run1", 2, attrs={"method": "laplacian_eigenmaps"})
    assert arr.chunks == (CHUNK, 2) and arr.dtype == np.float32
    for start in reversed(range(0, N, CHUNK)):  # order does not matter
        storage.write_embedding_block(store, "run1", start, Z[start:start + CHUNK])
    np.testing.assert_array_equal(storage.read_embedding(store, "run1"), Z.astype(np.float32))
    np.testing.assert_array_equal(storage.read_embedding(store, "run1", 16, 20), Z[16:20].astype(np.float32))


@pytest.mark.parametrize(
    ("start", "rows", "match"),
    [
        (5, 16, r"start must be a multiple of the chunk rows \(16\) in \[0, 50\); got 5"),
        (50, 2, r"start must be a multiple .* got 50"),
        (16, 8, r"must have shape \(16, 2\) \(one whole chunk\); got \(8, 2\)"),
        (48, 16, r"must have shape \(2, 2\) .*got \(16, 2\)"),
    ],
)
def test_misaligned_embedding_block_refused(store, start, rows, match):
    storage.create_embedding(store, "run1", 2)
    with pytest.raises(StorageError, match=match):
        storage.write_embedding_block(store, "run1", start, np.zeros((rows, 2)))


def test_embedding_block_values_and_recreate(store):
    storage.create_embedding(store, "run1", 2)
    bad = np.zeros((CHUNK, 2))
    bad[3, 1] = np.nan
    with pytest.raises(StorageError, match=r"NaN/inf value at row 19"):
        storage.write_embedding_block(store, "run1", 16, bad)
    assert np.isnan(storage.read_embedding(store, "run1")).all()  # unwritten rows are visible as NaN
    storage.create_embedding(store, "run1", 2)  # same shape: reused (idempotent)
    with pytest.raises(StoreFormatError, match=r"already exists .* pass overwrite=True"):
        storage.create_embedding(store, "run1", 3)
    assert storage.create_embedding(store, "run1", 3, overwrite=True).shape == (N, 3)
    with pytest.raises(StorageError, match=r"run must be 1-128 characters"):
        storage.create_embedding(store, "a/b", 2)


def test_generic_outputs(store):
    pred = np.arange(N) % 4
    scores = np.random.default_rng(2).random((N, 4))
    storage.write_point_array(store, layout.output_path("r", "pred"), pred, dtype="int32")
    storage.create_output(store, "r", "scores", 4)
    for start in range(0, N, CHUNK):
        storage.write_output_block(store, "r", "scores", start, scores[start:start + CHUNK])
    assert storage.read_output(store, "r", "pred").dtype == np.int32
    np.testing.assert_array_equal(storage.read_output(store, "r", "pred"), pred)
    np.testing.assert_allclose(storage.read_output(store, "r", "scores"), scores, rtol=1e-6)
    Z = np.ones((N, 2))
    storage.write_embedding(store, "whole", Z)
    np.testing.assert_array_equal(storage.read_embedding(store, "whole"), Z)
    with pytest.raises(StorageError, match=r"values must have n=50 rows"):
        storage.write_embedding(store, "whole", Z[:3])


# ---- models ---------------------------------------------------------------------------------------------------------
def test_model_roundtrip(store):
    arrays = {"eigenvalues": np.array([0.0, 0.1]), "eigenvectors": np.ones((N, 2), np.float32),
              "scale": np.float64(2.5), "mask": np.array([True, False]), "empty": np.zeros((0, 3))}
    attrs = {"estimator": "LaplacianEigenmaps", "params": {"n_neighbors": np.int64(15), "sigma": None},
             "classes": (0, 1)}
    storage.write_model(store, "run1", arrays, attrs)
    out, out_attrs = storage.read_model(store, "run1")
    assert set(out) == set(arrays)
    for key, value in arrays.items():
        assert out[key].dtype == np.asarray(value).dtype and out[key].shape == np.shape(value)
        np.testing.assert_array_equal(out[key], value)
    assert out_attrs == {"estimator": "LaplacianEigenmaps", "params": {"n_neighbors": 15, "sigma": None},
                         "classes": [0, 1]}
    storage.write_model(store, "run1", {"a": np.ones(2)}, {})  # replaces the old model
    assert set(storage.read_model(store, "run1")[0]) == {"a"}
    assert storage.list_models(store) == ["run1"]


@pytest.mark.parametrize(
    ("arrays", "attrs", "match"),
    [
        ({"a": np.array(["x"])}, {}, r"model array 'a' has dtype <U1; only bool, integer and float"),
        ({"a": np.empty(2, dtype=object)}, {}, r"dtype object"),
        ({"a": np.ones(2, complex)}, {}, r"dtype complex128"),
        ({"a/b": np.ones(2)}, {}, r"model array name must be"),
        ({}, {"f": lambda x: x}, r"attrs\['f'\] must be JSON-able .*got function"),
        ({}, {"x": np.ones(3)}, r"attrs\['x'\] must be JSON-able .*ndarray"),
        ({}, {"x": float("nan")}, r"attrs\['x'\] must be a finite number"),
        ({}, {1: 2}, r"keys of attrs must be strings"),
    ],
)
def test_model_refuses_non_json_and_objects(store, arrays, attrs, match):
    with pytest.raises(StorageError, match=match):
        storage.write_model(store, "run1", arrays, attrs)


def test_interrupted_model_refused(store):
    storage.write_model(store, "run1", {"a": np.ones(2)}, {"k": 1})
    group = storage.open_store(store, "r+")
    attrs = dict(group["models/run1"].attrs)
    del attrs[layout.ATTR_MODEL_COMPLETE]
    group["models/run1"].attrs.clear()
    group["models/run1"].attrs.update(attrs)
    with pytest.raises(StoreFormatError, match=r"model 'models/run1' is incomplete"):
        storage.read_model(store, "run1")
    with pytest.raises(StoreFormatError, match=r"has no group 'models/nope'"):
        storage.read_model(store, "nope")


def test_model_written_in_row_chunks(store):
    """create_model -> write_model_rows per chunk (in any order, as Dask workers do) -> finish_model: the same
    model as write_model; incomplete (refused, model_complete False) until finish_model; writes that would share
    a zarr chunk are refused."""
    from eigenflow.storage.models import create_model, finish_model, model_complete, write_model_rows

    Z, labels = np.arange(2 * N, dtype=np.float64).reshape(N, 2), np.arange(N) % 3
    create_model(store, "run1", {"Z": ((N, 2), "float64"), "labels": ((N,), "int64")}, chunk_rows=CHUNK)
    assert not model_complete(store, "run1")
    with pytest.raises(StoreFormatError, match="incomplete"):
        storage.read_model(store, "run1")
    for start in sorted(range(0, N, CHUNK), reverse=True):  # the last chunk (50 = 3 x 16 + 2) is short
        write_model_rows(store, "run1", start, {"Z": Z[start:start + CHUNK], "labels": labels[start:start + CHUNK]})
    with pytest.raises(StorageError, match=r"rows 8:24 of model array 'Z' are not whole chunks of 16 rows \(of 50\)"):
        write_model_rows(store, "run1", 8, {"Z": Z[8:24]})
    with pytest.raises(StorageError, match=r"model row array 'x' must have rows"):
        create_model(store, "run2", {"x": ((), "float64")})
    finish_model(store, "run1", {"values": np.array([[0.5, 0.7]])}, {"k": 2})
    assert model_complete(store, "run1") and not model_complete(store, "nope")
    out, attrs = storage.read_model(store, "run1")
    np.testing.assert_array_equal(out["Z"], Z)
    np.testing.assert_array_equal(out["labels"], labels)
    np.testing.assert_array_equal(out["values"], [[0.5, 0.7]])
    assert attrs == {"k": 2}


# ---- manifests ----------------------------------------------------------------------------------------------------------
def test_manifest_stages_and_failure(store):
    m = storage.RunManifest.start("embed-1", flow="embed", parameters={"n_neighbors": 15}, seed=0)
    with pytest.raises(RuntimeError, match="solver blew up"):
        with storage.run_context(store, m):
            with storage.stage(store, m, "knn") as rec:
                rec.info["recall"] = 0.98
                on_disk = storage.read_manifest(store, "embed-1")
                assert on_disk.status == "running" and on_disk.stages[-1].status == "running"
            with storage.stage(store, m, "eigensolve"):
                raise RuntimeError("solver blew up")
    back = storage.read_manifest(store, "embed-1")
    assert back.status == "failed" and back.error == "RuntimeError: solver blew up"
    assert [(s.name, s.status) for s in back.stages] == [("knn", "completed"), ("eigensolve", "failed")]
    assert back.stages[0].info == {"recall": 0.98} and back.stages[0].seconds >= 0
    assert back.stages[1].error == "RuntimeError: solver blew up"
    assert back.parameters == {"n_neighbors": 15} and back.seed == 0
    for pkg in ("numpy", "scipy", "dask", "distributed", "zarr", "prefect", "pynndescent", "scikit-learn"):
        assert back.versions[pkg], pkg
    assert back.python and back.platform and back.host


def test_manifest_completed_listing_and_info(store):
    for run in ("b-run", "a-run"):
        m = storage.RunManifest.start(run, flow="embed", parameters={}, seed=None)
        with storage.run_context(store, m):
            with storage.stage(store, m, "ingest"):
                pass
        m.results["accuracy"] = 0.9
        storage.write_manifest(store, m)
    assert storage.list_runs(store) == ["a-run", "b-run"]
    back = storage.read_manifest(store, "a-run")
    assert back.status == "completed" and back.seconds >= 0 and back.results == {"accuracy": 0.9}
    assert back.to_dict() == json.loads((store / "runs" / "a-run.json").read_text())
    summary = storage.info(store)
    assert [r["run_id"] for r in summary["runs"]] == ["a-run", "b-run"]
    assert summary["runs"][0]["stages"][0]["name"] == "ingest"
    assert not [p for p in (store / "runs").iterdir() if p.name.endswith(".tmp")]
    storage.open_store(store)  # runs/ does not disturb validation
    with pytest.raises(StoreFormatError, match=r"no manifest for run 'zzz'"):
        storage.read_manifest(store, "zzz")
    with pytest.raises(StorageError, match=r"parameters\['p'\] must be JSON-able"):
        storage.RunManifest.start("c", flow="embed", parameters={"p": object()})


def test_new_run_id_is_valid_and_unique():
    ids = {layout.new_run_id("embed") for _ in range(20)}
    assert len(ids) == 20 and all(layout.check_name("run", i) for i in ids)


def test_arrays_helpers(store):
    assert storage.x_shape(store) == (N, D) and storage.chunk_rows(store) == CHUNK
    assert storage.row_chunks(store) == [(0, 16), (16, 32), (32, 48), (48, 50)]
    chunks = list(storage.iter_row_chunks(store))
    assert [(a, b) for a, b, _ in chunks] == storage.row_chunks(store)
    X = storage.read_X(store)
    np.testing.assert_array_equal(np.concatenate([c for _, _, c in chunks]), X)
    dx = storage.X_as_dask(store)
    assert dx.chunks == ((16, 16, 16, 2), (3,))
    np.testing.assert_array_equal(dx.compute(), X)
    assert storage.read_labels(store) is None and not storage.has_labels(store)


def test_knn_of_new_points_into_another_index(store):
    # an `extend` store: 50 new points whose neighbours are rows of a 1000-point training set
    idx = np.full((N, 3), 999)
    storage.write_knn(store, idx, np.zeros((N, 3)), {"index_store": "train.zarr"}, n_index=1000)
    assert storage.read_knn_attrs(store)["n_index"] == 1000
    storage.write_knn_block(store, 0, idx[:CHUNK], np.zeros((CHUNK, 3)))
    with pytest.raises(StorageError, match=r"indices must be in \[0, 999\] .*n_index=1000"):
        storage.write_knn_block(store, 0, idx[:CHUNK] + 1, np.zeros((CHUNK, 3)))


def test_point_block_kind_must_not_change(store):
    storage.create_output(store, "r", "pred", dtype="int32")
    with pytest.raises(StorageError, match=r"castable to the array's dtype int32 .*got dtype float64"):
        storage.write_output_block(store, "r", "pred", 0, np.zeros(CHUNK))
    storage.write_output_block(store, "r", "pred", 0, np.ones(CHUNK, dtype=np.int64))
    assert storage.read_output(store, "r", "pred", 0, 3).tolist() == [1, 1, 1]


# ---- export: results leave the store -------------------------------------------------------------------------
def _completed_run(store, run, Z, labels=None):
    from eigenflow.storage.embedding_io import write_embedding, write_point_array

    m = storage.RunManifest.start(run, flow="embed", parameters={}, seed=None)
    with storage.run_context(store, m):
        write_embedding(store, run, Z)
        if labels is not None:
            write_point_array(store, layout.output_path(run, "labels"), labels)


def test_export_npy_and_parquet_stream_every_chunk(store, tmp_path):
    import pyarrow.parquet as pq

    from eigenflow.storage.export import export_output

    rng = np.random.default_rng(0)
    Z1, Z2, lab = rng.normal(size=(N, 2)), rng.normal(size=(N, 3)), rng.integers(0, 4, N)
    _completed_run(store, "r1", Z1)
    _completed_run(store, "r2", Z2, labels=lab)
    out = export_output(store, tmp_path / "z.npy")  # latest completed run with an embedding: r2
    assert out["run"] == "r2" and out["shape"] == [N, 3]
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), Z2.astype(np.float32))
    export_output(store, tmp_path / "z1.parquet", run="r1")
    table = pq.read_table(tmp_path / "z1.parquet")
    assert table.column_names == ["c0", "c1"] and table.num_rows == N
    np.testing.assert_array_equal(np.column_stack([table["c0"], table["c1"]]), Z1.astype(np.float32))
    export_output(store, tmp_path / "labels.npy", output="labels")
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), lab)


def test_export_refuses_bad_requests_and_leaves_nothing(store, tmp_path):
    from eigenflow.storage.export import export_output

    _completed_run(store, "r1", np.zeros((N, 2)))
    with pytest.raises(StorageError, match=r"OUT must end in one of \['.npy', '.parquet'\]; got"):
        export_output(store, tmp_path / "z.csv")
    with pytest.raises(StorageError, match=r"output must be one of .*got 'colour'"):
        export_output(store, tmp_path / "z.npy", output="colour")
    with pytest.raises(StoreFormatError, match=r"no completed run with a 'labels' output"):
        export_output(store, tmp_path / "z.npy", output="labels")
    (tmp_path / "taken.npy").write_bytes(b"keep me")
    with pytest.raises(StorageError, match="already exists"):
        export_output(store, tmp_path / "taken.npy")
    assert (tmp_path / "taken.npy").read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "s.zarr") == ["taken.npy"]
