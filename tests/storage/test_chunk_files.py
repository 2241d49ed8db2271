"""The ingest's chunk writer: Blosc frames made block by block are zarr's own chunk bytes, and the ingest holds one
chunk of rows (plus a constant) whatever the chunk size."""

from __future__ import annotations

import os
import struct
import tracemalloc

import numpy as np
import pytest
import zarr
from numcodecs import blosc

from eigenflow.storage import ingest, layout, read_labels, read_X
from eigenflow.storage.checksums import verify
from eigenflow.storage.chunk_files import ChunkAppender, ChunkFiles

CASES = {
    "float32 rows, a shorter edge chunk": (lambda r: r.standard_normal((1000, 50)).astype(np.float32), (256, 50), 0),
    "float32, several Blosc blocks per chunk": (lambda r: r.standard_normal((9000, 50)).astype(np.float32),
                                                (8192, 50), 0),
    "float64": (lambda r: r.standard_normal((300, 7)), (128, 7), 0),
    "incompressible bytes (stored raw)": (lambda r: r.integers(0, 256, 5000).astype(np.uint8), (1024,), 0),
    "int32 labels, fill -1": (lambda r: r.integers(-1, 5, 3000).astype(np.int32), (1024,), -1),
    "int64 offsets": (lambda r: np.cumsum(r.integers(1, 30, 3001)).astype(np.int64), (1024,), 0),
    "fewer bytes than a Blosc split": (lambda r: r.standard_normal((3, 2)).astype(np.float32), (4, 2), 0),
    "all fill value (no chunk file)": (lambda r: np.zeros((300, 3), np.float32), (128, 3), 0),
    "negative zeros (kept, not fill)": (lambda r: np.full((10, 3), -0.0, np.float32), (8, 3), 0),
    "labels all -1 (no chunk file)": (lambda r: np.full(50, -1, np.int32), (16,), -1),
}


def _chunk_files(folder):
    found = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name != "zarr.json":
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, folder)] = open(path, "rb").read()
    return found


@pytest.fixture
def one_blosc_thread():
    """zarr's Blosc on one thread: its blocks are then in order (with threads they are in the order they finish)."""
    before = blosc.get_nthreads()
    blosc.set_nthreads(1)
    yield
    blosc.set_nthreads(before)


@pytest.mark.parametrize("case", list(CASES))
def test_chunk_files_are_the_bytes_zarr_writes(tmp_path, case, one_blosc_thread):
    make, chunks, fill = CASES[case]
    data = make(np.random.default_rng(3))
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    ours = group.create_array("ours", shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=fill,
                              compressors=layout.compressors())
    theirs = group.create_array("theirs", shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=fill,
                                compressors=layout.compressors())
    theirs[...] = data
    files = ChunkFiles.for_array(ours)
    assert files is not None
    for i, start in enumerate(range(0, data.shape[0], chunks[0])):
        files.write((i,) + (0,) * (data.ndim - 1), data[start:start + chunks[0]])
    back = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["ours"][...]
    assert back.dtype == data.dtype and np.array_equal(back.view(np.uint8), data.view(np.uint8))
    assert _chunk_files(tmp_path / "s.zarr" / "ours") == _chunk_files(tmp_path / "s.zarr" / "theirs")


def test_incompressible_chunks_are_stored_raw_as_blosc_does(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint8)
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    array = group.create_array("b", shape=data.shape, chunks=(4096,), dtype="uint8", compressors=layout.compressors())
    ChunkFiles.for_array(array).write((0,), data)
    frame = open(tmp_path / "s.zarr" / "b" / "c" / "0", "rb").read()
    flags, nbytes, cbytes = frame[2], *struct.unpack("<i", frame[4:8]), *struct.unpack("<i", frame[12:16])
    assert flags & 0x2 and nbytes == 4096 and cbytes == len(frame) == 4096 + 16 and frame[16:] == data.tobytes()


def test_other_codecs_and_stores_go_through_zarr(tmp_path):
    from zarr.codecs import BloscCodec, ZstdCodec

    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    assert ChunkFiles.for_array(group.create_array("z", shape=(10,), chunks=(5,), dtype="f4",
                                                   compressors=[ZstdCodec()])) is None
    assert ChunkFiles.for_array(group.create_array("bit", shape=(10,), chunks=(5,), dtype="f4", compressors=[
        BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")])) is None
    memory = zarr.open_group("memory://chunk-files-test", mode="w", zarr_format=3)
    array = memory.create_array("X", shape=(10, 2), chunks=(4, 2), dtype="f4", compressors=layout.compressors())
    assert ChunkFiles.for_array(array) is None
    appender = ChunkAppender(array)
    appender.append(np.arange(20, dtype="f4").reshape(10, 2))
    appender.flush()
    np.testing.assert_array_equal(array[...], np.arange(20, dtype="f4").reshape(10, 2))


def test_a_store_ingested_chunk_by_chunk_reads_with_plain_zarr_and_verifies(tmp_path):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((5000, 20))
    y = rng.integers(-1, 3, 5000)
    np.save(tmp_path / "x.npy", X)
    info = ingest(tmp_path / "x.npy", tmp_path / "s.zarr", labels=y, chunk_rows=1024)
    plain = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    np.testing.assert_array_equal(plain["X"][...], X.astype(np.float32))
    np.testing.assert_array_equal(plain["y"][...], y)
    assert [c["name"] for c in plain["X"].metadata.to_dict()["codecs"]] == ["bytes", "blosc"]
    assert verify(str(tmp_path / "s.zarr"))["bad"] == []
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X.astype(np.float32))
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), y)
    # the same rows written by zarr (memory store: the zarr path) give the same fingerprint
    again = ingest(X, "memory://chunk-files-fingerprint/s.zarr", labels=y, chunk_rows=1024, overwrite=True)
    assert again.fingerprint == info.fingerprint


def _traced_peak(X, chunk_rows, tmp_path):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        ingest(X, tmp_path / f"s{chunk_rows}.zarr", chunk_rows=chunk_rows)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_ingest_holds_one_chunk_of_rows_plus_a_constant(tmp_path):
    """Python-traced peak (numpy buffers, bytes) of ingesting an in-memory array: one chunk plus a constant that
    does not grow with the chunk (zarr's own encoding held several chunk-sized buffers at once)."""
    X = np.random.default_rng(1).standard_normal((150_000, 50)).astype(np.float32)
    ingest(X[:10], tmp_path / "warm.zarr")  # imports and caches
    extra = {}
    for rows in (8192, 65536):
        extra[rows] = _traced_peak(X, rows, tmp_path) - rows * 50 * 4
    assert max(extra.values()) < 6 * 2**20, extra
    assert extra[65536] < extra[8192] + 2**20, extra
