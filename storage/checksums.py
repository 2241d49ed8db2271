"""Per-chunk checksums: a damaged store is found, never read as if it were whole.

After the ingest has written X and y, :func:`record_checksums` stores the BLAKE2b digest of every stored
chunk file (the encoded bytes, as on disk) in ``checksums/<array>.json``; chunks that were never written
(zarr leaves them out when they are all fill value) are recorded as absent. :func:`verify` compares the store
with the records: a chunk whose bytes changed (a flipped block), a recorded chunk that is gone (a deleted
file reads as zeros!), a chunk that appeared, and a stray key: a file under a recorded array's prefix that is
neither its ``zarr.json`` nor a chunk of its chunk grid (``X/c/99/0`` beyond the last row chunk, ``X/c/junk``, a
torn write's leftover). :func:`check_intact` raises on the first damaged array, naming it and its chunks; the
flows call it on the arrays they read before any stage (stray keys, which zarr never reads, do not stop them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import layout
from .errors import StoreFormatError, writing
from .local_files import file_location, is_local
from .store import StoreRef, _read_json, filesystem, validate_store

#: Folder of the checksum records (one JSON file per array: ``{chunk key: digest or null}``).
CHECKSUMS = "checksums"
#: Arrays whose chunks the ingest records: X, y and the obs names of an AnnData source (those absent from a store
#: are skipped).
INGESTED_ARRAYS = (layout.X, layout.Y, layout.OBS_NAME_OFFSETS, layout.OBS_NAME_BYTES)
#: The ingested arrays the flows read (checked by :func:`check_intact` before their stages; the obs names are
#: checked by the AnnData export, which reads them).
POINT_ARRAYS = (layout.X, layout.Y)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


#: Bytes of a chunk file read at once when it is hashed on a local disk.
HASH_READ_BYTES = 2**20


def file_digest(fs: Any, path: str) -> str:
    """The digest of the file ``path`` (:func:`_digest` of its bytes); a local file is read
    :data:`HASH_READ_BYTES` at a time (a chunk file is never held whole), any other in one request."""
    if not is_local(fs):
        return _digest(fs.cat_file(path))
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while block := fh.read(HASH_READ_BYTES):
            digest.update(block)
    return digest.hexdigest()


def _record_path(root: str, array: str) -> str:
    return posixpath.join(root, CHECKSUMS, array.replace("/", "__") + ".json")


def chunk_keys(meta: dict) -> list[str]:
    """Every chunk key of an array from its zarr.json (``c/0/0`` ... with the default "/" encoding)."""
    shape = meta["shape"]
    chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
    encoding = meta.get("chunk_key_encoding", {})
    sep = encoding.get("configuration", {}).get("separator", "/")
    prefix = "c" if encoding.get("name", "default") == "default" else ""
    counts = [max(1, -(-int(s) // int(c))) for s, c in zip(shape, chunks)]
    keys = []
    for index in itertools.product(*(range(k) for k in counts)):
        parts = [str(i) for i in index]
        keys.append(sep.join([prefix, *parts]) if prefix else sep.join(parts))
    return keys


def _write(fs: Any, path: str, payload: bytes) -> None:
    """One small file; folders are made on local disks only (object stores have none: a folder marker would be
    an object of its own, which a later recursive move cannot copy)."""
    with writing(file_location(fs, path)):
        if is_local(fs):
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
        fs.pipe_file(path, payload)


def _array_meta(fs: Any, root: str, array: str) -> dict | None:
    meta = _read_json(fs, posixpath.join(root, array, "zarr.json"))
    return meta if meta and meta.get("node_type") == "array" else None


#: Threads that read and hash chunks at once (BLAKE2b releases the GIL, so the reads and the hashing of
#: several chunks overlap)
HASH_THREADS = 4


def chunk_digest(fs: Any, path: str) -> str | None:
    """:func:`file_digest` of a chunk file, None when it is absent: zarr writes no file for a chunk that holds only
    the fill value (e.g. a chunk of labels that are all 0)."""
    try:
        return file_digest(fs, path)
    except FileNotFoundError:
        return None


def _current(fs: Any, root: str, array: str, meta: dict) -> dict[str, str | None]:
    """``{chunk key: digest, or None when the chunk file is absent}`` of every chunk of ``array``."""
    def digest(key: str) -> str | None:
        return chunk_digest(fs, posixpath.join(root, array, key))

    keys = chunk_keys(meta)
    if len(keys) == 1:
        return {keys[0]: digest(keys[0])}
    with ThreadPoolExecutor(max_workers=min(HASH_THREADS, len(keys))) as pool:
        return dict(zip(keys, pool.map(digest, keys)))


def record_checksums(store: StoreRef, arrays: tuple[str, ...] = INGESTED_ARRAYS) -> dict[str, int]:
    """Write the digests of every chunk of ``arrays`` (those present); returns ``{array: n_chunks}``."""
    fs, root = filesystem(store)
    counts = {}
    for array in arrays:
        meta = _array_meta(fs, root, array)
        if meta is None:
            continue
        digests = _current(fs, root, array, meta)
        path = _record_path(root, array)
        _write(fs, path, json.dumps({"shape": meta["shape"], "chunks": digests}, sort_keys=True).encode())
        counts[array] = len(digests)
    return counts


# ---- per-chunk records of arrays written chunk by chunk (the per-point outputs of a run) ----------------------
def _chunk_record_path(root: str, array: str, key: str) -> str:
    return posixpath.join(root, CHECKSUMS, array.replace("/", "__"), key.replace("/", "_") + ".json")


def _row_chunk_key(meta: dict, start: int) -> str:
    rows = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    index = [str(start // rows)] + ["0"] * (len(meta["shape"]) - 1)
    return "/".join(["c", *index])


def record_chunk(store: StoreRef, array: str, start: int) -> str | None:
    """Record the digest of the row chunk of ``array`` that starts at row ``start`` (after it was written);
    one small file per chunk, so chunks written concurrently by Dask workers never share a record."""
    fs, root = filesystem(store)
    meta = _array_meta(fs, root, array)
    key = _row_chunk_key(meta, start)
    digest = chunk_digest(fs, posixpath.join(root, array, key))  # None: all fill value, no file
    _write(fs, _chunk_record_path(root, array, key),
           json.dumps({"key": key, "digest": digest, "shape": meta["shape"]}).encode())
    return digest


def forget_chunk_records(store: StoreRef, array: str) -> None:
    """Remove the per-chunk records of ``array`` (it is being replaced by an array of another shape)."""
    fs, root = filesystem(store)
    folder = posixpath.join(root, CHECKSUMS, array.replace("/", "__"))
    if fs.exists(folder):
        fs.rm(folder, recursive=True)


def forget_records(store: StoreRef, array: str) -> None:
    """Remove every checksum record of ``array``: its whole-array record and its per-chunk records (the array is
    being removed)."""
    fs, root = filesystem(store)
    record = _record_path(root, array)
    if fs.exists(record):
        fs.rm_file(record)
    forget_chunk_records(store, array)


def completed_row_chunks(store: StoreRef, arrays: list[str], starts: list[int]) -> set[int]:
    """The row-chunk starts whose chunk of every array in ``arrays`` is recorded and intact (a resumed run
    rewrites only the others)."""
    fs, root = filesystem(store)
    done = set(starts)
    for array in arrays:
        meta = _array_meta(fs, root, array)
        if meta is None:
            return set()
        for start in list(done):
            key = _row_chunk_key(meta, start)
            try:
                record = json.loads(fs.cat_file(_chunk_record_path(root, array, key)))
                intact = record["shape"] == meta["shape"] and record["digest"] == chunk_digest(
                    fs, posixpath.join(root, array, key))
            except (FileNotFoundError, ValueError, KeyError):  # (no record)
                intact = False
            if not intact:
                done.discard(start)
    return done


def stray_keys(fs: Any, root: str, array: str, meta: dict) -> list[str]:
    """Keys (relative to ``array``) of the files under its prefix that are neither its ``zarr.json`` nor a chunk key
    of its chunk grid, sorted; one recursive listing of the prefix on any fsspec filesystem."""
    base = posixpath.join(root, array).rstrip("/")
    prefix = base + "/"
    expected = set(chunk_keys(meta)) | {"zarr.json"}
    found = (path[len(prefix):] if path.startswith(prefix) else path for path in fs.find(base))
    return sorted(key for key in found if key not in expected)


#: Problem of a key under an array's prefix that is no chunk of it (see :func:`stray_keys`).
STRAY = "stray key"


def _report_strays(fs: Any, root: str, array: str, meta: dict, report: dict) -> None:
    """Add one problem per stray key of ``array`` to ``report``."""
    for key in stray_keys(fs, root, array, meta):
        report["bad"].append({"array": array, "chunk": key, "problem": STRAY})


def verify(store: StoreRef, arrays: tuple[str, ...] | None = None, strays: bool = True) -> dict[str, Any]:
    """Check the store's metadata as every command that opens it does (:func:`storage.store.validate_store`: root
    ``zarr.json``, schema, finished ingest, data types and codecs, shapes; raises :class:`StoreFormatError`), then
    every recorded chunk (of ``arrays`` only, when given), see :func:`recorded_chunk_problems`."""
    validate_store(store)
    return recorded_chunk_problems(store, arrays, strays)


def recorded_chunk_problems(store: StoreRef, arrays: tuple[str, ...] | None = None,
                            strays: bool = True) -> dict[str, Any]:
    """Compare every recorded chunk (of ``arrays`` only, when given) with its record:
    ``{"arrays": {array: n_chunks}, "bad": [{"array", "chunk", "problem"}]}``.

    Problems: ``"changed"`` (bytes differ), ``"missing"`` (recorded, now absent: reads as fill value),
    ``"unexpected"`` (absent when recorded, now present), ``"shape"`` (the array's shape is not the recorded one),
    ``"array missing"``, and with ``strays`` ``"stray key"`` (a file under the array's prefix that is neither its
    metadata nor a chunk of its grid: ``chunk`` is its key, see :func:`stray_keys`).
    """
    fs, root = filesystem(store)
    folder = posixpath.join(root, CHECKSUMS)
    records = sorted(fs.ls(folder, detail=False)) if fs.exists(folder) else []
    report: dict[str, Any] = {"arrays": {}, "bad": []}
    for path in records:
        if arrays is not None and _recorded_array(path) not in arrays:
            continue
        if not path.endswith(".json"):  # a folder of per-chunk records
            _verify_chunk_records(fs, root, path, report, strays)
            continue
        array = _recorded_array(path)
        recorded = json.loads(fs.cat_file(path))
        meta = _array_meta(fs, root, array)
        if meta is None:
            report["bad"].append({"array": array, "chunk": None, "problem": "array missing"})
            continue
        if list(meta["shape"]) != list(recorded["shape"]):
            report["bad"].append({"array": array, "chunk": None, "problem": "shape"})
            continue
        now = _current(fs, root, array, meta)
        report["arrays"][array] = len(now)
        for key, digest in recorded["chunks"].items():
            if now.get(key) == digest:
                continue
            problem = "missing" if now.get(key) is None else ("unexpected" if digest is None else "changed")
            report["bad"].append({"array": array, "chunk": key, "problem": problem})
        if strays:
            _report_strays(fs, root, array, meta, report)
    return report


def _recorded_array(path: str) -> str:
    """The array whose record (``<array>.json``) or folder of per-chunk records ``path`` is."""
    name = posixpath.basename(path.rstrip("/"))
    return (name[: -len(".json")] if name.endswith(".json") else name).replace("__", "/")


def _verify_chunk_records(fs: Any, root: str, folder: str, report: dict, strays: bool) -> None:
    """Check the chunks of ``array`` recorded one file each in ``folder`` (and its stray keys, with ``strays``)."""
    array = _recorded_array(folder)
    meta = _array_meta(fs, root, array)
    files = sorted(fs.ls(folder, detail=False))
    if meta is None:
        report["bad"].append({"array": array, "chunk": None, "problem": "array missing"})
        return
    report["arrays"][array] = len(files)
    for path in files:
        record = json.loads(fs.cat_file(path))
        now = chunk_digest(fs, posixpath.join(root, array, record["key"]))
        if record["shape"] != meta["shape"]:
            problem = "shape"
        elif now == record["digest"]:
            continue
        elif now is None:
            problem = "missing"
        elif record["digest"] is None:  # written as all fill value (no file), a file now
            problem = "unexpected"
        else:
            problem = "changed"
        report["bad"].append({"array": array, "chunk": record["key"], "problem": problem})
    if strays:
        _report_strays(fs, root, array, meta, report)


def check_intact(store: StoreRef, arrays: tuple[str, ...] = POINT_ARRAYS) -> None:
    """Raise :class:`StoreFormatError` naming the damaged chunks of ``arrays`` (see :func:`verify`; stray keys,
    which zarr never reads, are left to ``eigenflow verify``; the metadata was checked when the store was opened)."""
    bad = recorded_chunk_problems(store, arrays=tuple(arrays), strays=False)["bad"]
    if bad:
        listed = ", ".join(f"{b['array']}/{b['chunk']} ({b['problem']})" if b["chunk"] else
                           f"{b['array']} ({b['problem']})" for b in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise StoreFormatError(f"store {store} is damaged: {listed}{more} do not match their recorded checksums; "
                               "ingest the source again")
