"""Write a zarr chunk straight into its file, encoded one Blosc block at a time with the array's own codecs.

zarr encodes a chunk whole: the chunk as an array, its bytes, Blosc's output (about the chunk's size for float data,
which compresses little) and the comparison with the fill value are each a chunk-sized buffer, held at once. The ingest
instead hands :class:`ChunkFiles` the rows of a chunk in its own buffer; the Blosc frame is made one Blosc block at a
time (byte shuffle, LZ4) and every block is written to the chunk's file as soon as it is made. Beside the caller's
buffer, memory is a few Blosc blocks, whatever the size of the chunk (c-blosc's block size does not grow with the
chunk: 512 KiB for float32, 1 MiB for float64 and int64, 128 KiB for bytes, from 1 MiB to 64 MiB chunks).

The frame is the one c-blosc 1.x writes: a 16-byte header, the start offset of every block, and per block its splits as
(int32 size, LZ4 bytes, or the split's raw bytes when LZ4 does not make it smaller); when the compressed frame would
not be smaller than the data plus the header, the data is stored raw with the "memcpyed" flag, as c-blosc does. Block
size, split rule and LZ4 acceleration (``10 - clevel``) are c-blosc's: the block size and header flags are asked from
numcodecs' Blosc on an all-zero buffer of the chunk's size (untouched zero pages take no memory), so the file's bytes
are those of numcodecs' ``Blosc.encode`` of the chunk on one thread (tested); any Blosc reader, zarr's included, reads
them. Only this codec chain is written this way: ``BytesCodec`` (little endian) then ``BloscCodec`` with cname
``lz4``, shuffle ``shuffle`` or ``noshuffle`` and an automatic block size, on a local store; for any other array
:meth:`ChunkFiles.for_array` returns None and the caller writes through zarr.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np

#: c-blosc's header size (``BLOSC_MAX_OVERHEAD``); a frame is never larger than the data plus this.
HEADER_BYTES = 16
_MEMCPYED = 0x2
_DOSHUFFLE = 0x1
_DONT_SPLIT = 0x10
_MIN_SPLIT_BYTES = 128  # c-blosc's MIN_BUFFERSIZE: a split of fewer bytes per type byte is not made
_MAX_SPLITS = 16
#: Threads that shuffle and compress blocks at once (numcodecs' LZ4 releases the GIL while it compresses).
ENCODE_THREADS = 2
#: Blocks being encoded at once (their raw, shuffled and compressed bytes are the writer's whole memory).
BLOCKS_IN_FLIGHT = 3


@lru_cache(maxsize=64)
def _frame_layout(nbytes: int, dtype: str, typesize: int, clevel: int, shuffle: int) -> tuple[bytes, int, int]:
    """``(format version bytes, blocksize, header flags)`` that c-blosc (numcodecs' build) writes for ``nbytes``
    bytes of ``dtype``."""
    from numcodecs import blosc

    zeros = np.zeros(nbytes // np.dtype(dtype).itemsize, dtype=dtype)  # calloc'ed: read as the zero page
    head = blosc.compress(zeros, b"lz4", clevel, shuffle, 0, typesize)[:HEADER_BYTES]
    _, _, flags, _, _, blocksize, _ = struct.unpack("<BBBBiii", head)
    return head[:2], blocksize, flags


class ChunkFiles:
    """The chunk files of one zarr v3 array on a local store, written by :meth:`write`.

    Use :meth:`for_array` (None when the array's codecs or store are not the supported ones).
    """

    def __init__(self, folder: str, array: Any, typesize: int, clevel: int, shuffle: bool) -> None:
        self.folder = folder
        self.metadata = array.metadata
        self.dtype = np.dtype(array.dtype)
        self.chunk_shape = tuple(int(c) for c in array.metadata.chunk_grid.chunk_shape)
        self.chunk_bytes = int(np.prod(self.chunk_shape, dtype=np.int64)) * self.dtype.itemsize
        self.typesize = typesize if typesize <= 255 else 1
        self.clevel = clevel
        self.shuffle = shuffle
        self.write_empty = bool(array.config.write_empty_chunks)
        self.fill = np.asarray(array.metadata.fill_value, dtype=self.dtype).reshape(1)
        self.versions, self.blocksize, self.flags = _frame_layout(self.chunk_bytes, self.dtype.str, self.typesize,
                                                                  clevel, 1 if shuffle else 0)

    @classmethod
    def for_array(cls, array: Any) -> "ChunkFiles | None":
        """The writer of ``array``'s chunks, or None unless it is a zarr v3 array of a local store with the codecs
        ``bytes`` (little endian) + ``blosc`` (lz4, shuffle or noshuffle, automatic block size) and a numeric dtype."""
        from zarr.codecs import BloscCodec, BytesCodec
        from zarr.storage import LocalStore

        store = array.store_path.store
        codecs = getattr(array.metadata, "codecs", ())
        if not isinstance(store, LocalStore) or len(codecs) != 2 or sys.byteorder != "little":
            return None
        raw, blosc = codecs
        dtype = np.dtype(array.dtype)
        if (not isinstance(raw, BytesCodec) or getattr(raw.endian, "value", raw.endian) not in ("little", None)
                or not isinstance(blosc, BloscCodec) or blosc.cname.value != "lz4" or blosc.blocksize != 0
                or blosc.shuffle.value not in ("shuffle", "noshuffle") or dtype.kind not in "biuf"):
            return None
        folder = os.path.join(str(store.root), *array.store_path.path.split("/"))
        return cls(folder, array, int(blosc.typesize), int(blosc.clevel), blosc.shuffle.value == "shuffle")

    # ---- one chunk -----------------------------------------------------------------------------------------
    def path(self, index: tuple[int, ...]) -> str:
        """The file of the chunk at grid position ``index``."""
        return os.path.join(self.folder, *self.metadata.encode_chunk_key(index).split("/"))

    def write(self, index: tuple[int, ...], rows: np.ndarray) -> None:
        """Write the chunk at grid position ``index``: ``rows`` (C-contiguous, the chunk's shape or fewer rows: the
        rest of the chunk is the fill value, as zarr stores an edge chunk). A chunk that is all fill value is not
        written (and an old file of it is removed), as zarr does unless ``write_empty_chunks``."""
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.chunk_shape[1:] or rows.shape[0] > self.chunk_shape[0]:
            raise ValueError(f"rows of shape {rows.shape} do not fit a chunk of shape {self.chunk_shape}")
        path = self.path(index)
        if not self.write_empty and self._all_fill(rows):
            if os.path.exists(path):
                os.remove(path)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = rows.reshape(-1).view(np.uint8)
        with open(path, "wb") as fh:
            if self.flags & _MEMCPYED or not self._write_blocks(fh, data):
                fh.seek(0)
                fh.truncate()
                self._write_memcpyed(fh, data)

    def _all_fill(self, rows: np.ndarray) -> bool:
        """zarr's test: bit patterns for a zero fill (so -0.0 is kept), values (NaN equal to NaN) otherwise; a few
        thousand values at a time."""
        flat = rows.reshape(-1)
        step = 2**16
        if not self.fill.view(np.uint8).any():
            return not any(flat[i:i + step].view(np.uint8).any() for i in range(0, flat.size, step))
        nan = self.dtype.kind == "f"
        return all(np.array_equal(flat[i:i + step], np.broadcast_to(self.fill, flat[i:i + step].shape), equal_nan=nan)
                   for i in range(0, flat.size, step))

    def _raw_block(self, data: np.ndarray, start: int, size: int) -> np.ndarray:
        """Bytes ``start:start+size`` of the chunk: ``data``'s, then the fill value's (a view when all are data's)."""
        if start + size <= data.size:
            return data[start:start + size]
        block = np.empty(size, dtype=np.uint8)
        have = max(0, data.size - start)
        block[:have] = data[start:start + have]
        block[have:].reshape(-1, self.dtype.itemsize)[:] = self.fill.view(np.uint8)
        return block

    def _encode_block(self, data: np.ndarray, j: int) -> list[memoryview]:
        """Block ``j`` as c-blosc writes it: per split, its int32 size then its LZ4 bytes (or raw bytes)."""
        from numcodecs import lz4
        from numcodecs._shuffle import _doShuffle

        start = j * self.blocksize
        size = min(self.blocksize, self.chunk_bytes - start)
        block = self._raw_block(data, start, size)
        if self.shuffle and self.typesize > 1:
            shuffled = np.empty(size, dtype=np.uint8)
            _doShuffle(block, shuffled, self.typesize)
            block = shuffled
        leftover = size < self.blocksize
        split = (not self.flags & _DONT_SPLIT and self.typesize <= _MAX_SPLITS
                 and self.blocksize // self.typesize >= _MIN_SPLIT_BYTES and not leftover)
        nsplits = self.typesize if split else 1
        part = size // nsplits
        out: list[memoryview] = []
        for s in range(nsplits):
            raw = block[s * part:(s + 1) * part]
            packed = memoryview(lz4.compress(raw, 10 - self.clevel))[4:]  # numcodecs prefixes the raw size
            payload = packed if len(packed) < part else memoryview(raw)
            out += [memoryview(struct.pack("<i", len(payload))), payload]
        return out

    def _write_blocks(self, fh: Any, data: np.ndarray) -> bool:
        """The compressed frame; False (nothing usable written) when it would exceed the data plus the header."""
        nblocks = -(-self.chunk_bytes // self.blocksize)
        limit = self.chunk_bytes + HEADER_BYTES
        pos = HEADER_BYTES + 4 * nblocks
        fh.write(b"\0" * pos)
        starts = []
        with ThreadPoolExecutor(ENCODE_THREADS) as pool:
            pending = [pool.submit(self._encode_block, data, j) for j in range(min(BLOCKS_IN_FLIGHT, nblocks))]
            for j in range(nblocks):
                parts = pending.pop(0).result()
                if j + BLOCKS_IN_FLIGHT < nblocks:
                    pending.append(pool.submit(self._encode_block, data, j + BLOCKS_IN_FLIGHT))
                size = sum(len(p) for p in parts)
                if pos + size > limit:
                    for future in pending:
                        future.cancel()
                    return False
                starts.append(pos)
                for p in parts:
                    fh.write(p)
                pos += size
        fh.seek(0)
        fh.write(self._header(self.flags, pos) + struct.pack(f"<{nblocks}i", *starts))
        return True

    def _write_memcpyed(self, fh: Any, data: np.ndarray) -> None:
        """The data stored raw after the header (c-blosc's frame for data it cannot compress)."""
        fh.write(self._header(self.flags | _MEMCPYED, self.chunk_bytes + HEADER_BYTES))
        for start in range(0, self.chunk_bytes, self.blocksize):
            fh.write(self._raw_block(data, start, min(self.blocksize, self.chunk_bytes - start)))

    def _header(self, flags: int, cbytes: int) -> bytes:
        return self.versions + struct.pack("<BBiii", flags, self.typesize, self.chunk_bytes, self.blocksize, cbytes)


class ChunkAppender:
    """Rows appended to a zarr array chunked by rows only, one chunk held in a buffer that is reused: each full
    chunk is hashed from the buffer (:attr:`digest`: BLAKE2b-128 over the BLAKE2b-128 digests of the chunks' rows, in
    order: the ingest's fingerprint input) and
    written as its file (:class:`ChunkFiles`, or through zarr for an array it does not take).

    ``grow``: the array starts shorter than what is appended (its shape is extended at every chunk written).
    """

    def __init__(self, array: Any, grow: bool = False) -> None:
        self.array, self.grow = array, grow
        self.files = ChunkFiles.for_array(array)
        chunks = tuple(int(c) for c in array.chunks)
        if chunks[1:] != tuple(int(s) for s in array.shape[1:]):
            raise ValueError(f"array {array.path} is not chunked by rows only: chunks {chunks}, shape {array.shape}")
        self.buf = np.empty(chunks, dtype=array.dtype)
        self.start = self.held = 0  # the first row the buffer holds; rows held
        self.digest = hashlib.blake2b(digest_size=16)

    def append(self, rows: np.ndarray) -> None:
        """Append ``rows`` (shape ``(b, *row shape)``, cast to the array's dtype); write every chunk they fill."""
        done, size = 0, self.buf.shape[0]
        while done < rows.shape[0]:
            take = min(rows.shape[0] - done, size - self.held)
            self.buf[self.held:self.held + take] = rows[done:done + take]
            self.held += take
            done += take
            if self.held == size:
                self.flush()

    def flush(self) -> None:
        """Write the rows held as the next chunk (the last one may be shorter)."""
        if not self.held:
            return
        stop = self.start + self.held
        if self.grow and stop > self.array.shape[0]:
            self.array.resize((stop, *self.array.shape[1:]))
        rows = self.buf[:self.held]
        self.digest.update(hashlib.blake2b(rows, digest_size=16).digest())
        if self.files is not None:
            self.files.write((self.start // self.buf.shape[0],) + (0,) * (rows.ndim - 1), rows)
        else:
            self.array[self.start:stop] = rows
        self.start, self.held = stop, 0
