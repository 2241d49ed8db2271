"""Damaged stores: per-chunk checksums find a flipped block, a deleted chunk and a torn (truncated) chunk.

Real files are damaged after a real ingest; ``verify`` names each bad chunk, ``check_intact`` (what the flows
call before any stage) refuses the store, and ``eigenflow verify`` lists them with exit code 1.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import storage
from storage.checksums import check_intact, verify
from storage.errors import StoreFormatError

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

    from flows.cli import app

    assert CliRunner().invoke(app, ["verify", str(store)]).exit_code == 0
    _flip_block(store / "y" / "c" / "1")
    result = CliRunner().invoke(app, ["verify", str(store)])
    assert result.exit_code == 1 and "bad y/c/1: changed" in result.output and "Traceback" not in result.output


def test_embed_refuses_a_damaged_store_before_any_stage(store, prefect_harness):
    from flows.embed import embed

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
    from storage.arrays import check_fits_in_memory
    from storage.errors import StorageError

    check_fits_in_memory(1 << 20, "small")
    with pytest.raises(StorageError, match=r"reading X\[0:1e12\] needs 1.49e\+04 GiB of memory; .* available"):
        check_fits_in_memory(10**12 * 4 * 4, "X[0:1e12]")


def test_undecodable_chunk_of_an_unrecorded_array_is_a_named_store_error(store):
    from storage.embedding_io import read_embedding, write_embedding

    write_embedding(store, "r", np.ones((N, 2)))
    (store / "embeddings" / "r" / "c" / "1" / "0").write_bytes(b"garbage" * 10)
    with pytest.raises(StoreFormatError, match=r"cannot decode 'embeddings/r' of .*s.zarr: .*damaged chunk"):
        read_embedding(store, "r")
