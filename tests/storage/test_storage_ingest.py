"""Ingest: every reader round-trips, reading is chunked, bad inputs raise, failed ingests leave nothing complete."""

from __future__ import annotations

import importlib
import zipfile

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import zarr

from eigenflow import storage
from eigenflow.storage import IngestError, StorageError, StoreFormatError, ingest, open_store, read_labels, read_X
from eigenflow.storage import layout

N, D, CHUNK = 300, 4, 64
# the package re-exports the function `ingest`, which hides the submodule of the same name
ing = importlib.import_module("eigenflow.storage.ingest")


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, D))
    y = rng.integers(-1, 4, size=N)
    return X, y


def _frame(X, y):
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    df["label"] = y
    return df


def _write_source(kind, tmp_path, X, y):
    """Write (X, y) as a file of ``kind``; return (source, ingest kwargs)."""
    if kind == "npy":
        np.save(tmp_path / "x.npy", X)
        return tmp_path / "x.npy", {"labels": y}
    if kind == "npz":
        np.savez_compressed(tmp_path / "x.npz", X=X, y=y)
        return tmp_path / "x.npz", {}
    if kind == "csv":
        _frame(X, y).to_csv(tmp_path / "x.csv", index=False)
        return tmp_path / "x.csv", {"label_column": "label"}
    if kind == "parquet":
        _frame(X, y).to_parquet(tmp_path / "x.parquet", row_group_size=50)
        return tmp_path / "x.parquet", {"label_column": "label"}
    if kind == "zarr":
        g = zarr.open_group(str(tmp_path / "src.zarr"), mode="w")
        g.create_array("X", data=X, chunks=(37, D))
        g.create_array("y", data=y, chunks=(37,))
        return tmp_path / "src.zarr", {}
    if kind == "numpy":
        return X, {"labels": y}
    if kind == "dask":
        return da.from_array(X, chunks=(41, D)), {"labels": da.from_array(y, chunks=41)}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["npy", "npz", "csv", "parquet", "zarr", "numpy", "dask"])
def test_roundtrip_every_reader(kind, tmp_path, data):
    X, y = data
    source, kwargs = _write_source(kind, tmp_path, X, y)
    info = ingest(source, tmp_path / "out.zarr", chunk_rows=CHUNK, **kwargs)
    assert (info.n, info.d, info.chunk_rows, info.has_labels) == (N, D, CHUNK, True)
    np.testing.assert_array_equal(read_X(tmp_path / "out.zarr"), X.astype(np.float32))
    np.testing.assert_array_equal(read_labels(tmp_path / "out.zarr"), y)
    group = open_store(tmp_path / "out.zarr")
    assert group["X"].dtype == np.float32 and group["X"].chunks == (CHUNK, D)
    assert group["y"].dtype == np.int32 and group["y"].chunks == (CHUNK,)
    assert group.attrs["status"] == "complete" and group.attrs["fingerprint"] == info.fingerprint


def test_fingerprint_depends_on_data_not_on_reader(tmp_path, data):
    X, y = data
    a = ingest(X, tmp_path / "a.zarr", labels=y, chunk_rows=CHUNK)
    src, kw = _write_source("csv", tmp_path, X, y)
    b = ingest(src, tmp_path / "b.zarr", chunk_rows=CHUNK, **kw)
    X2 = X.copy()
    X2[123, 2] += 1.0
    c = ingest(X2, tmp_path / "c.zarr", labels=y, chunk_rows=CHUNK)
    d = ingest(X, tmp_path / "d.zarr", chunk_rows=CHUNK)
    assert a.fingerprint == b.fingerprint
    assert len({a.fingerprint, c.fingerprint, d.fingerprint}) == 3


def test_float64_option_and_default_chunk(tmp_path, data):
    X, _ = data
    info = ingest(X, tmp_path / "s.zarr", dtype="float64")
    assert info.chunk_rows == layout.DEFAULT_CHUNK_ROWS
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X)
    assert layout.default_chunk_rows(4096, 4) == 2**12  # 64 MiB cap for wide data


def test_csv_without_header_by_position(tmp_path, data):
    X, y = data
    pd.DataFrame(np.column_stack([y, X])).to_csv(tmp_path / "h.csv", index=False, header=False)
    ingest(tmp_path / "h.csv", tmp_path / "s.zarr", label_column=0, read_options={"header": None}, chunk_rows=CHUNK)
    np.testing.assert_allclose(read_X(tmp_path / "s.zarr"), X.astype(np.float32))
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), y)


# ---- streaming -------------------------------------------------------------------------------------------------
def test_csv_is_read_in_chunks(tmp_path, data, monkeypatch):
    X, y = data
    src, kw = _write_source("csv", tmp_path, X, y)
    seen = []
    real = pd.read_csv

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("chunksize"):
            seen.append(kwargs["chunksize"])
        return out

    monkeypatch.setattr(pd, "read_csv", spy)
    ingest(src, tmp_path / "s.zarr", chunk_rows=32, **kw)
    assert seen == [32]


def test_npz_member_is_streamed_not_loaded_whole(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 8))  # 256 kB of float64
    np.savez_compressed(tmp_path / "big.npz", X=X)
    reads = []
    real_read = zipfile.ZipExtFile.read

    def spy(self, n=-1):
        reads.append(n)
        return real_read(self, n)

    monkeypatch.setattr(zipfile.ZipExtFile, "read", spy)
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load would read the member whole"))
    ingest(tmp_path / "big.npz", tmp_path / "s.zarr", chunk_rows=100)
    row_bytes = 8 * 8
    assert -1 not in reads and max(reads) <= 100 * row_bytes
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X.astype(np.float32))


def test_npy_is_memory_mapped_and_blocks_are_bounded(tmp_path, data, monkeypatch):
    X, _ = data
    np.save(tmp_path / "x.npy", X)
    modes, blocks = [], []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda *a, **k: modes.append(k.get("mmap_mode")) or real_load(*a, **k))
    real = ing.validate_x_block
    monkeypatch.setattr(ing, "validate_x_block", lambda b, *a: blocks.append(b.shape[0]) or real(b, *a))
    ingest(tmp_path / "x.npy", tmp_path / "s.zarr", chunk_rows=50)
    assert modes == ["r"]
    assert blocks == [50] * 6


def test_parquet_batches_are_rechunked_exactly(tmp_path, data, monkeypatch):
    X, y = data
    src, kw = _write_source("parquet", tmp_path, X, y)  # row groups of 50 rows
    blocks = []
    real = ing.validate_x_block
    monkeypatch.setattr(ing, "validate_x_block", lambda b, *a: blocks.append(b.shape[0]) or real(b, *a))
    ingest(src, tmp_path / "s.zarr", chunk_rows=64, **kw)
    assert blocks == [64, 64, 64, 64, 44]


# ---- bad inputs ---------------------------------------------------------------------------------------------------
def test_nan_reports_global_row(tmp_path, data):
    X, y = data
    X = X.copy()
    X[200, 1] = np.nan
    with pytest.raises(IngestError, match=r"non-finite value at row 200, column 1"):
        ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)
    src, kw = _write_source("csv", tmp_path, X, y)
    with pytest.raises(IngestError, match=r"row 200, column 1"):
        ingest(src, tmp_path / "s.zarr", chunk_rows=CHUNK, **kw)
    assert not (tmp_path / "s.zarr").exists()


def test_inf_and_float32_overflow(tmp_path, data):
    X, _ = data
    X = X.copy()
    X[70, 0] = np.inf
    with pytest.raises(IngestError, match=r"row 70, column 0"):
        ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)
    X[70, 0] = 1e300  # finite in float64, inf in float32
    with pytest.raises(IngestError, match=r"row 70.*overflows float32"):
        ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.zeros(10), r"must be a 2-D array .* got 1-D shape \(10,\)"),
        (np.zeros((4, 3, 2)), r"must be a 2-D array .* got 3-D"),
        (np.zeros((5, 0)), r"at least 1 feature column"),
        (np.zeros((0, 3)), r"zero rows"),
        (np.zeros((5, 2), dtype=complex), r"complex dtype"),
        (np.array([["a", "b"]]), r"non-numeric dtype <U1"),
        (np.empty((3, 2), dtype=object), r"non-numeric dtype object"),
    ],
)
def test_bad_arrays(tmp_path, array, match):
    with pytest.raises(IngestError, match=match):
        ingest(array, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_object_npy_and_npz_refused_without_unpickling(tmp_path):
    obj = np.empty((3, 2), dtype=object)
    np.save(tmp_path / "o.npy", obj, allow_pickle=True)
    with pytest.raises(IngestError, match=r"object arrays are refused"):
        ingest(tmp_path / "o.npy", tmp_path / "s.zarr")
    np.savez(tmp_path / "o.npz", X=obj)
    with pytest.raises(IngestError, match=r"object dtype"):
        ingest(tmp_path / "o.npz", tmp_path / "s.zarr")


def test_non_numeric_csv_column(tmp_path, data):
    X, y = data
    df = _frame(X, y)
    df["f2"] = df["f2"].astype(object)
    df.loc[150, "f2"] = "oops"
    df.to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(IngestError, match=r"column 'f2' .* not numeric .*'oops' at row 150"):
        ingest(tmp_path / "x.csv", tmp_path / "s.zarr", label_column="label", chunk_rows=CHUNK)


def test_non_numeric_parquet_column(tmp_path, data):
    X, y = data
    df = _frame(X, y)
    df["name"] = "a"
    df.to_parquet(tmp_path / "x.parquet")
    with pytest.raises(IngestError, match=r"column 'name' .* not numeric"):
        ingest(tmp_path / "x.parquet", tmp_path / "s.zarr", label_column="label")


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (np.arange(N - 1), r"got 299 labels for 300 rows"),
        (np.full(N, -2), r"integers in \[-1, .*got -2 at row 0"),
        (np.r_[np.zeros(N - 1), 0.5], r"integers >= -1 .*got 0.5 at row 299"),
        (np.array(["a"] * N), r"labels must be integers"),
        (np.zeros((N, 2), dtype=int), r"labels must be a 1-D array"),
    ],
)
def test_bad_labels(tmp_path, data, labels, match):
    X, _ = data
    with pytest.raises(IngestError, match=match):
        ingest(X, tmp_path / "s.zarr", labels=labels, chunk_rows=CHUNK)
    assert not (tmp_path / "s.zarr").exists()


def test_csv_label_count_checked_and_missing_label_is_an_error(tmp_path, data):
    X, y = data
    df = _frame(X, y).astype({"label": float})
    df.loc[250, "label"] = np.nan
    df.to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(IngestError, match=r"got nan at row 250"):
        ingest(tmp_path / "x.csv", tmp_path / "s.zarr", label_column="label", chunk_rows=CHUNK)
    _frame(X, y).drop(columns="label").to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(IngestError, match=r"got 10 labels but X has at least 64 rows"):
        ingest(tmp_path / "x.csv", tmp_path / "s.zarr", labels=np.zeros(10, int), chunk_rows=CHUNK)


def test_bad_options(tmp_path, data):
    X, y = data
    with pytest.raises(StorageError, match=r"dtype must be one of \['float32', 'float64'\]; got 'int8'"):
        ingest(X, tmp_path / "s.zarr", dtype="int8")
    with pytest.raises(StorageError, match=r"chunk_rows must be an integer >= 1; got 0"):
        ingest(X, tmp_path / "s.zarr", chunk_rows=0)
    np.savez(tmp_path / "x.npz", X=X, y=y)
    with pytest.raises(IngestError, match=r"x_key='data' is not in"):
        ingest(tmp_path / "x.npz", tmp_path / "s.zarr", x_key="data")
    with pytest.raises(IngestError, match=r"labels were given twice"):
        ingest(tmp_path / "x.npz", tmp_path / "s.zarr", labels=y)
    with pytest.raises(IngestError, match=r"unknown format"):
        ingest(tmp_path / "x.txt", tmp_path / "s.zarr")
    with pytest.raises(IngestError, match=r"does not exist"):
        ingest(tmp_path / "missing.csv", tmp_path / "s.zarr")
    with pytest.raises(IngestError, match=r"label_column='nope' is not a column"):
        _write_source("csv", tmp_path, X, y)
        ingest(tmp_path / "x.csv", tmp_path / "s.zarr", label_column="nope")


# ---- atomicity -------------------------------------------------------------------------------------------------------
def test_existing_store_needs_overwrite_and_survives_a_failed_ingest(tmp_path, data):
    X, y = data
    target = tmp_path / "s.zarr"
    first = ingest(X, target, labels=y, chunk_rows=CHUNK)
    with pytest.raises(StoreFormatError, match=r"already exists; pass overwrite=True"):
        ingest(X[:10], target)
    bad = X.copy()
    bad[299, 3] = np.nan
    with pytest.raises(IngestError, match=r"row 299"):
        ingest(bad, target, overwrite=True, chunk_rows=CHUNK)
    assert open_store(target).attrs["fingerprint"] == first.fingerprint
    np.testing.assert_array_equal(read_X(target), X.astype(np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # no temporary leftovers
    second = ingest(X[:100], target, overwrite=True, chunk_rows=CHUNK)
    assert second.n == 100 and read_X(target).shape == (100, D) and read_labels(target) is None


def test_interrupted_ingest_never_looks_complete(tmp_path, data, monkeypatch):
    X, _ = data
    real = ing.validate_x_block
    seen = []

    def explode(block, start, *a):
        seen.append(start)
        if start >= 128:
            # the partial temporary store exists, and is refused while the ingest runs
            tmp = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
            assert len(tmp) == 1
            with pytest.raises(StoreFormatError, match=r"status 'incomplete'"):
                open_store(tmp[0])
            raise KeyboardInterrupt
        return real(block, start, *a)

    monkeypatch.setattr(ing, "validate_x_block", explode)
    with pytest.raises(KeyboardInterrupt):
        ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)
    assert seen == [0, 64, 128] and list(tmp_path.iterdir()) == []


def test_fsspec_memory_url(data):
    X, y = data
    url = "memory://eigenflow-test/ingest.zarr"
    ingest(X, url, labels=y, chunk_rows=CHUNK, overwrite=True)
    np.testing.assert_array_equal(read_X(url, 10, 20), X[10:20].astype(np.float32))
    assert storage.info(url)["n"] == N


# ---- parallel (per-chunk) ingest ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["npy", "zarr"])
def test_parallel_ingest_matches_sequential(kind, tmp_path, data):
    from concurrent.futures import ThreadPoolExecutor

    X, y = data
    source, kwargs = _write_source(kind, tmp_path, X, y)
    seq = ingest(source, tmp_path / "seq.zarr", chunk_rows=CHUNK, **kwargs)
    with ThreadPoolExecutor(2) as pool:
        par = ingest(source, tmp_path / "par.zarr", chunk_rows=CHUNK, executor=pool, **kwargs)
    assert par.parallel and not seq.parallel
    assert par.fingerprint == seq.fingerprint
    np.testing.assert_array_equal(read_X(tmp_path / "par.zarr"), read_X(tmp_path / "seq.zarr"))
    np.testing.assert_array_equal(read_labels(tmp_path / "par.zarr"), y)


def test_parallel_ingest_failure_reports_first_bad_row_and_cleans_up(tmp_path, data):
    from concurrent.futures import ThreadPoolExecutor

    X, _ = data
    X = X.copy()
    X[[130, 250], 0] = np.nan
    np.save(tmp_path / "x.npy", X)
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(IngestError, match=r"row 130, column 0"):
            ingest(tmp_path / "x.npy", tmp_path / "s.zarr", chunk_rows=CHUNK, executor=pool)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_streamed_sources_ignore_executor_explicitly(tmp_path, data):
    from concurrent.futures import ThreadPoolExecutor

    X, y = data
    source, kwargs = _write_source("csv", tmp_path, X, y)
    with ThreadPoolExecutor(1) as pool:
        info = ingest(source, tmp_path / "s.zarr", chunk_rows=CHUNK, executor=pool, **kwargs)
    assert not info.parallel and info.n == N


@pytest.mark.slow
def test_parallel_ingest_on_a_dask_cluster(tmp_path, data):
    distributed = pytest.importorskip("distributed")
    X, y = data
    np.save(tmp_path / "x.npy", X)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as client:
            info = ingest(tmp_path / "x.npy", tmp_path / "s.zarr", labels=y, chunk_rows=CHUNK,
                          executor=client.get_executor())
    assert info.parallel
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X.astype(np.float32))


def test_incomplete_eigenflow_store_is_not_a_valid_source(tmp_path, data):
    X, _ = data
    ingest(X, tmp_path / "a.zarr", chunk_rows=CHUNK)
    group = zarr.open_group(str(tmp_path / "a.zarr"), mode="r+")
    group.attrs["status"] = "incomplete"
    with pytest.raises(StoreFormatError, match=r"status 'incomplete'"):
        ingest(tmp_path / "a.zarr", tmp_path / "b.zarr")
    group.attrs["status"] = "complete"
    assert ingest(group, tmp_path / "b.zarr", chunk_rows=CHUNK).n == N


def test_overwrite_refuses_what_is_not_an_eigenflow_store(tmp_path, data):
    X, _ = data
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(StoreFormatError, match=r"refusing to overwrite .*non-empty directory"):
        ingest(X, precious, overwrite=True)
    (tmp_path / "file.zarr").write_text("x")
    with pytest.raises(StoreFormatError, match=r"refusing to overwrite .*it is a file"):
        ingest(X, tmp_path / "file.zarr", overwrite=True)
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w").create_array("a", shape=(2,), dtype="f4")
    with pytest.raises(StoreFormatError, match=r"zarr store not written by eigenflow"):
        ingest(X, tmp_path / "other.zarr", overwrite=True)
    assert (precious / "thesis.tex").read_text() == "years of work"
    (tmp_path / "empty").mkdir()
    assert ingest(X, tmp_path / "empty", overwrite=True).n == N
    assert ingest(X, tmp_path / "new" / "nested" / "s.zarr").n == N  # parents are created


def test_labels_given_by_name(tmp_path, data):
    X, y = data
    for kind in ("csv", "parquet", "npz", "zarr"):
        source, _ = _write_source(kind, tmp_path, X, y)
        name = "label" if kind in ("csv", "parquet") else "y"
        ingest(source, tmp_path / f"{kind}.zarr", labels=name, chunk_rows=CHUNK)
        np.testing.assert_array_equal(read_labels(tmp_path / f"{kind}.zarr"), y)
    np.save(tmp_path / "y.npy", y)
    ingest(X, tmp_path / "arr.zarr", labels=str(tmp_path / "y.npy"))
    np.testing.assert_array_equal(read_labels(tmp_path / "arr.zarr"), y)
    with pytest.raises(IngestError, match=r"labels='label' is neither a .npy file nor a label column/key of the array"):
        ingest(X, tmp_path / "bad.zarr", labels="label")
    with pytest.raises(IngestError, match=r"label_column='nope' is not a column"):
        ingest(tmp_path / "x.csv", tmp_path / "bad.zarr", labels="nope")


def test_constraints_roundtrip(tmp_path, data):
    X, _ = data
    ingest(X, tmp_path / "s.zarr", chunk_rows=CHUNK)
    ml, cl = storage.read_constraints(tmp_path / "s.zarr")
    assert ml.shape == (0, 2) and cl.shape == (0, 2)
    storage.write_constraints(tmp_path / "s.zarr", must_link=[[0, 1], [5, 299]], cannot_link=np.array([[2, 3]]))
    ml, cl = storage.read_constraints(tmp_path / "s.zarr")
    assert ml.dtype == np.int64 and ml.tolist() == [[0, 1], [5, 299]] and cl.tolist() == [[2, 3]]
    with pytest.raises(StorageError, match=r"must_link must hold row indices in \[0, 299\]; got range \[0, 300\]"):
        storage.write_constraints(tmp_path / "s.zarr", must_link=[[0, 300]])
    with pytest.raises(StorageError, match=r"cannot_link pairs must join two different points; pair 0 is \[4, 4\]"):
        storage.write_constraints(tmp_path / "s.zarr", cannot_link=[[4, 4]])


def test_non_finite_value_beyond_the_first_check_slice_is_named(tmp_path):
    """NaN / inf are looked for a few thousand rows at a time: one far into a chunk is still found and named."""
    from eigenflow.storage.ingest import FINITE_CHECK_ROWS

    X = np.ones((3 * FINITE_CHECK_ROWS, 3))
    X[2 * FINITE_CHECK_ROWS + 5, 2] = np.inf
    with pytest.raises(IngestError, match=rf"row {2 * FINITE_CHECK_ROWS + 5}, column 2"):
        ingest(X, str(tmp_path / "s.zarr"), chunk_rows=3 * FINITE_CHECK_ROWS)
    assert not (tmp_path / "s.zarr").exists()


def test_block_digest_is_the_digest_of_the_bytes():
    import hashlib

    from eigenflow.storage.ingest import block_digest

    X = np.random.default_rng(0).normal(size=(50, 7)).astype(np.float32)
    for block in (X, np.asfortranarray(X), X[::2], np.arange(9, dtype=np.int32)):
        assert block_digest(block) == hashlib.blake2b(block.tobytes(), digest_size=16).digest()


def test_a_store_created_by_another_run_during_the_ingest_is_not_replaced(tmp_path, monkeypatch):
    """Two ingests into one new store: the one that finishes second is refused and the first one's store stays whole
    (the other run's ingest is started from inside this one's chunk writes, after this one's check for the store)."""
    ingest_module = importlib.import_module("eigenflow.storage.ingest")
    from eigenflow.storage.arrays import read_X
    from eigenflow.storage.errors import StoreFormatError

    rng = np.random.default_rng(0)
    ours, theirs = rng.normal(size=(40, 3)), rng.normal(size=(50, 3))
    target = tmp_path / "new.zarr"
    write_chunks = ingest_module._write_chunks

    def with_another_run(*args, **kwargs):
        monkeypatch.setattr(ingest_module, "_write_chunks", write_chunks)
        ingest_module.ingest(theirs, target)  # the other run finishes first
        return write_chunks(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "_write_chunks", with_another_run)
    with pytest.raises(StoreFormatError, match="was created by another run during this ingest; nothing was replaced"):
        ingest_module.ingest(ours, target)
    np.testing.assert_array_equal(read_X(target), theirs.astype(np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.zarr"]  # no temporary left behind
