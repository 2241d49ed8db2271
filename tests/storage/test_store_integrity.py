"""Damaged stores: per-chunk checksums find a flipped block, a deleted chunk and a torn (truncated) chunk.

Real files are damaged after a real ingest; ``verify`` names each bad chunk, ``check_intact`` (what the flows
call before any stage) refuses the store, and ``eigenflow verify`` lists them with exit code 1.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from eigenflow import storage
from eigenflow.storage.checksums import check_intact, verify
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.store import filesystem

N, D, CHUNK = 100, 4, 32


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    storage.ingest(rng.normal(size=(N, D)), tmp_path / "s.zarr", labels=rng.integers(0, 3, N), chunk_rows=CHUNK)
    return tmp_path / "s.zarr"


def _flip_block(path, offset=8, size=8):
    data = bytearray(path.read_bytes())
    data[offset:offset + size] = bytes(b ^ 0xFF for b in data[offset:offset + size])
    path.write_bytes(bytes(data))


def test_intact_store_verifies(store):
    report = verify(store)
    assert report == {"arrays": {"X": 4, "y": 4}, "bad": []}
    check_intact(store)


@pytest.mark.parametrize("damage, problem", [
    (lambda p: _flip_block(p), "changed"),
    (lambda p: os.remove(p), "missing"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "changed"),  # torn write
])
def test_each_damage_is_found_and_refused(store, damage, problem):
    chunk = store / "X" / "c" / "2" / "0"
    damage(chunk)
    assert verify(store)["bad"] == [{"array": "X", "chunk": "c/2/0", "problem": problem}]
    with pytest.raises(StoreFormatError, match=rf"is damaged: X/c/2/0 \({problem}\)"):
        check_intact(store)


def test_verify_cli_lists_bad_chunks_and_exits_1(store):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    assert CliRunner().invoke(app, ["verify", str(store)]).exit_code == 0
    _flip_block(store / "y" / "c" / "1")
    result = CliRunner().invoke(app, ["verify", str(store)])
    assert result.exit_code == 1 and "bad y/c/1: changed" in result.output and "Traceback" not in result.output


def _declare_pickle_codec(store):
    import json

    meta_path = store / "X" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"].append({"name": "numcodecs.pickle", "configuration": {"protocol": 5}})
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("damage, message", [
    (lambda s: os.remove(s / "zarr.json"), "zarr.json not found"),
    (_declare_pickle_codec, "pickle/object codecs are refused"),
])
def test_verify_refuses_what_every_other_command_refuses(store, damage, message):
    """A store without its root metadata, or with a pickle codec declared: every chunk still matches its record,
    but ``verify`` fails in one line, as ``info`` does, instead of reporting ok."""
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    damage(store)
    for command in ("verify", "info"):
        result = CliRunner().invoke(app, [command, str(store)])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and message in lines[0], (command, result.output)
    with pytest.raises(StoreFormatError, match=message):
        verify(store)


@pytest.fixture(params=["local", "memory"])
def any_store(request, tmp_path):
    """The ``store`` fixture's data on a local disk or in fsspec's in-memory filesystem (removed afterwards)."""
    import secrets

    rng = np.random.default_rng(0)
    url = str(tmp_path / "s.zarr") if request.param == "local" else f"memory://verify-{secrets.token_hex(4)}/s.zarr"
    storage.ingest(rng.normal(size=(N, D)), url, labels=rng.integers(0, 3, N), chunk_rows=CHUNK)
    yield url
    if request.param == "memory":
        fs, root = filesystem(url)
        fs.rm(root, recursive=True)


def _put(url, key, payload=b"stray"):
    fs, root = filesystem(url)
    path = f"{root}/{key}"
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, payload)


def test_verify_lists_stray_keys_of_an_array(any_store):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    _put(any_store, "X/c/99/0")  # a chunk key beyond X's chunk grid (4 row chunks)
    _put(any_store, "X/c/junk")
    _put(any_store, "y/c/1.3f9a.partial")  # a torn write's leftover
    assert verify(any_store)["bad"] == [
        {"array": "X", "chunk": "c/99/0", "problem": "stray key"},
        {"array": "X", "chunk": "c/junk", "problem": "stray key"},
        {"array": "y", "chunk": "c/1.3f9a.partial", "problem": "stray key"},
    ]
    check_intact(any_store)  # zarr never reads them: the flows still run on the store
    result = CliRunner().invoke(app, ["verify", any_store])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    listed = [ln for ln in result.output.splitlines() if ln.startswith("bad ")]
    assert listed == ["bad X/c/99/0: stray key", "bad X/c/junk: stray key", "bad y/c/1.3f9a.partial: stray key"]


def test_verify_lists_stray_keys_of_arrays_recorded_chunk_by_chunk(any_store):
    from eigenflow.storage.checksums import record_chunk
    from eigenflow.storage.embedding_io import create_embedding, write_embedding_block

    create_embedding(any_store, "r", 2)
    for start in range(0, N, CHUNK):
        write_embedding_block(any_store, "r", start, np.ones((min(CHUNK, N - start), 2)))
        record_chunk(any_store, "embeddings/r", start)
    assert verify(any_store)["bad"] == []
    _put(any_store, "embeddings/r/c/4/0")
    assert verify(any_store)["bad"] == [{"array": "embeddings/r", "chunk": "c/4/0", "problem": "stray key"}]


def test_embed_refuses_a_damaged_store_before_any_stage(store, prefect_api):
    from eigenflow.flows.embed import embed

    os.remove(store / "X" / "c" / "1" / "0")  # would read as zeros
    with pytest.raises(StoreFormatError, match=r"is damaged: X/c/1/0 \(missing\)"):
        embed(str(store), str(store), params={"n_neighbors": 5, "knn_method": "exact"}, n_workers=1)
    assert storage.list_runs(store) == [] and not (store / "graph").exists()


def _rewrite_meta(path, **changes):
    import json

    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize("node, shape, message", [
    ("X", [10**12, D], r"array 'X' claims shape \(1000000000000, 4\), over 1.1e\+12 elements"),
    ("X", [N, 10**9], r"X has shape \(100, 1000000000\) and chunks \(32, 4\)"),
    ("X", [N + 1, D], r"X has shape \(101, 4\) and chunks \(32, 4\); the store's attributes say n=100, d=4"),
    ("y", [N * 2], r"y has shape \(200,\); the store's attributes say n=100"),
])
def test_hostile_metadata_is_refused_before_any_read(store, node, shape, message):
    _rewrite_meta(store / node / "zarr.json", shape=shape)
    with pytest.raises(StoreFormatError, match=r"inconsistent metadata: " + message):
        storage.open_store(store)
    summary = storage.info(store)  # described, not trusted
    assert summary["status"] == "damaged" and summary["problems"]


def test_whole_array_reads_check_memory_first():
    from eigenflow.storage.arrays import check_fits_in_memory
    from eigenflow.storage.errors import StorageError

    check_fits_in_memory(1 << 20, "small")
    with pytest.raises(StorageError, match=r"reading X\[0:1e12\] needs 1.49e\+04 GiB of memory; .* available"):
        check_fits_in_memory(10**12 * 4 * 4, "X[0:1e12]")


def test_undecodable_chunk_of_an_unrecorded_array_is_a_named_store_error(store):
    from eigenflow.storage.embedding_io import read_embedding, write_embedding

    write_embedding(store, "r", np.ones((N, 2)))
    (store / "embeddings" / "r" / "c" / "1" / "0").write_bytes(b"garbage" * 10)
    with pytest.raises(StoreFormatError, match=r"cannot decode 'embeddings/r' of .*s.zarr: .*damaged chunk"):
        read_embedding(store, "r")


def test_a_chunk_of_fill_values_is_recorded_without_a_file(any_store):
    """zarr writes no file for a chunk that holds only the fill value (labels all 0): its record says so, verify and
    a resumed write accept it, and a file appearing there later, or a written chunk vanishing, is reported."""
    from eigenflow.storage.checksums import completed_row_chunks, record_chunk
    from eigenflow.storage.embedding_io import create_output, write_output_block

    create_output(any_store, "r", "labels", dtype="int64")
    starts = list(range(0, N, CHUNK))
    for start in starts:
        rows = min(CHUNK, N - start)
        block = np.zeros(rows, dtype=np.int64) if start == 0 else np.arange(rows, dtype=np.int64) + 1
        write_output_block(any_store, "r", "labels", start, block)
        assert (record_chunk(any_store, "outputs/r/labels", start) is None) == (start == 0)
    assert verify(any_store)["bad"] == []
    assert completed_row_chunks(any_store, ["outputs/r/labels"], starts) == set(starts)
    _put(any_store, "outputs/r/labels/c/0")
    fs, root = filesystem(any_store)
    fs.rm_file(f"{root}/outputs/r/labels/c/1")
    assert verify(any_store)["bad"] == [{"array": "outputs/r/labels", "chunk": "c/0", "problem": "unexpected"},
                                        {"array": "outputs/r/labels", "chunk": "c/1", "problem": "missing"}]
