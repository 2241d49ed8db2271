"""open_store refuses unsafe or unfinished stores; info() summarizes a store."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

from eigenflow.storage import StorageError, StoreFormatError, info, ingest, layout, open_store, read_X, validate_store


@pytest.fixture
def store(tmp_path):
    X = np.arange(40, dtype=np.float64).reshape(20, 2)
    ingest(X, tmp_path / "s.zarr", labels=np.arange(20) % 3, chunk_rows=8)
    return tmp_path / "s.zarr"


def _edit_json(path, edit):
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_open_valid_store_from_path_and_url(store):
    for ref in (store, str(store), f"file://{store}"):
        group = open_store(ref)
        assert group.attrs["schema_version"] == layout.SCHEMA_VERSION
        assert group["X"].shape == (20, 2)
    assert os.path.isabs(str(open_store(store).store.root))  # pickled arrays must not depend on the cwd


def test_missing_store(tmp_path):
    with pytest.raises(StoreFormatError, match=r"no zarr v3 store at .*nothing.zarr"):
        open_store(tmp_path / "nothing.zarr")


def test_incomplete_store_refused_but_inspectable(store):
    _edit_json(store / "zarr.json", lambda m: m["attributes"].update(status="incomplete"))
    with pytest.raises(StoreFormatError, match=r"status 'incomplete' .*ingest it again with overwrite=True"):
        open_store(store)
    assert open_store(store, allow_incomplete=True)["X"].shape == (20, 2)
    assert info(store)["status"] == "incomplete"


@pytest.mark.parametrize("version", [None, 0, 2, "1"])
def test_unknown_schema_version(store, version):
    _edit_json(store / "zarr.json", lambda m: m["attributes"].update(schema_version=version))
    with pytest.raises(StoreFormatError, match=rf"schema_version {version!r}; this eigenflow reads \[1\]"):
        open_store(store)


def test_array_is_not_a_store(store):
    with pytest.raises(StoreFormatError, match=r"is a zarr array, not an eigenflow store"):
        open_store(store / "X")


def test_pickle_codec_refused(store):
    # zarr 3 cannot create a pickle codec itself: write the metadata as another writer would
    def add_pickle(meta):
        meta["codecs"].insert(0, {"name": "numcodecs.pickle", "configuration": {"protocol": 5}})

    _edit_json(store / "X" / "zarr.json", add_pickle)
    with pytest.raises(StoreFormatError, match=r"array 'X' uses codec 'numcodecs.pickle'; pickle/object codecs"):
        open_store(store)
    with pytest.raises(StoreFormatError, match=r"pickle"):
        info(store)


def test_pickle_inside_sharding_codec_refused(tmp_path):
    X = np.ones((20, 2))
    ingest(X, tmp_path / "s.zarr", chunk_rows=8)
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="r+")
    g.create_array("models/m/a", shape=(16,), chunks=(4,), shards=(8,), dtype="f4")
    meta_path = tmp_path / "s.zarr" / "models" / "m" / "a" / "zarr.json"
    _edit_json(meta_path, lambda m: m["codecs"][0]["configuration"]["codecs"].append({"name": "numcodecs.pickle"}))
    with pytest.raises(StoreFormatError, match=r"array 'models/m/a' uses codec 'numcodecs.pickle'"):
        open_store(tmp_path / "s.zarr")


@pytest.mark.parametrize("dtype", ["object", "string", {"name": "struct", "configuration": {}}, "complex128"])
def test_forbidden_data_types(store, dtype):
    g = zarr.open_group(str(store), mode="r+")
    g.create_array("outputs/r/names", shape=(20,), dtype="i4")
    _edit_json(store / "outputs" / "r" / "names" / "zarr.json", lambda m: m.update(data_type=dtype))
    with pytest.raises(StoreFormatError, match=r"array 'outputs/r/names' has data type .*\(object, string"):
        open_store(store)


def test_variable_length_strings_refused(store):
    g = zarr.open_group(str(store), mode="r+")
    g.create_array("names", shape=(3,), dtype=str)  # zarr's own vlen string type
    with pytest.raises(StoreFormatError, match=r"array 'names' has data type 'string'"):
        open_store(store)


def test_zarr_v2_node_refused(store):
    g = zarr.open_group(str(store / "legacy"), mode="w", zarr_format=2)
    g.create_array("a", shape=(3,), dtype="f4")
    with pytest.raises(StoreFormatError, match=r"node 'legacy' .* zarr v2 metadata"):
        open_store(store)


def test_open_modes(tmp_path, store):
    with pytest.raises(StorageError, match=r"mode must be one of \['r', 'r\+', 'w', 'w-'\]; got 'x'"):
        open_store(store, mode="x")
    with pytest.raises(StoreFormatError, match=r"already exists \(mode='w-'\)"):
        open_store(store, mode="w-")
    new = open_store(tmp_path / "new.zarr", mode="w-")
    assert dict(new.attrs) == {"schema_version": 1, "status": "incomplete"}
    with pytest.raises(StorageError, match=r"storage_options are only used with URLs"):
        open_store(store, storage_options={"anon": True})
    group = open_store(store, mode="r+")
    assert open_store(group) is group


def test_validate_store_lists_all_nodes(store):
    nodes = validate_store(store)
    assert set(nodes) == {"", "X", "y"}


def test_info_summary(store):
    summary = info(store)
    assert summary["n"] == 20 and summary["d"] == 2 and summary["status"] == "complete"
    assert summary["has_labels"] is True and summary["chunk_rows"] == 8
    arrays = {a["path"]: a for a in summary["arrays"]}
    assert arrays["X"] == {"path": "X", "shape": [20, 2], "dtype": "float32", "chunks": [8, 2]}
    assert arrays["y"]["dtype"] == "int32"
    assert summary["runs"] == []
    json.dumps(summary)


def test_read_x_bounds(store):
    np.testing.assert_array_equal(read_X(store, 3, 5), np.arange(6, 10, dtype=np.float32).reshape(2, 2))
    with pytest.raises(StorageError, match=r"0 <= start <= stop <= n=20; got start=5, stop=30"):
        read_X(store, 5, 30)


def test_store_handle_validates_once_and_workers_attach_without_validating(store, monkeypatch):
    import pickle

    import eigenflow.storage.store as store_module
    from eigenflow.storage import Store, read_labels, write_embedding

    calls = []
    validate = store_module.validate_store
    monkeypatch.setattr(store_module, "validate_store", lambda *a, **k: calls.append(a) or validate(*a, **k))
    handle = Store.open(store, "r+")
    assert len(calls) == 1 and str(handle) == os.path.abspath(store)
    attached = pickle.loads(pickle.dumps(handle))  # what a Dask worker receives
    assert attached == handle and hash(attached) == hash(handle)
    np.testing.assert_array_equal(read_X(attached, 0, 8), read_X(store, 0, 8))
    write_embedding(attached, "r1", np.ones((20, 2)))
    assert read_labels(handle).shape == (20,)
    assert len(calls) == 2  # only the call given a path validated again


def test_store_handle_refuses_writes_when_read_only_and_bad_modes(store):
    from eigenflow.storage import Store, write_embedding

    with pytest.raises(StorageError, match=r"opened read-only \(mode='r'\)"):
        write_embedding(Store.open(store), "r1", np.ones((20, 2)))
    with pytest.raises(StorageError, match=r"mode of a store handle must be 'r' or 'r\+'; got 'w'"):
        Store(store, mode="w")
    with pytest.raises(StoreFormatError, match="status 'incomplete'"):
        Store.open(open_store(store.parent / "new.zarr", mode="w-").store.root)


def test_store_handle_is_a_stable_prefect_cache_input(store):
    from prefect.utilities.hashing import hash_objects

    from eigenflow.storage import Store

    first = hash_objects({"store": Store.open(store, "r+")}, raise_on_failure=True)
    assert first == hash_objects({"store": Store(str(store), None, "r+")}, raise_on_failure=True)
    assert first != hash_objects({"store": Store(str(store), None, "r")}, raise_on_failure=True)
