"""Open eigenflow stores (local paths or fsspec URLs) and refuse the ones that are unsafe or unfinished.

A store is accepted by :func:`open_store` only if its root ``zarr.json`` is a zarr v3 group with a known
``schema_version`` and ``status == "complete"`` (written last by the ingest), and if no node anywhere in it
uses an object / string / structured data type or a pickle-like codec. The check reads the raw JSON
metadata of every node (zarr itself cannot even parse a pickle codec), so it never unpickles anything. A run makes
that check once, with :meth:`Store.open`, and passes the returned :class:`Store` handle to its tasks and to the
storage functions (a path or URL given to one of them is opened and checked for that call only).

Note: ``runs/`` holds plain JSON manifests; ``zarr.Group.members()`` warns about it ("not recognized as a
component of a Zarr hierarchy"): use :func:`storage.info.info` or the functions here to walk a store.
"""

from __future__ import annotations

import contextlib
import json
import os
import math
import posixpath
from typing import Any, Iterator, Union

import fsspec
import zarr

from . import layout
from .errors import StoreFormatError, StorageError

#: What the storage functions take as their store: an opened :class:`Store` (what tasks and flows pass), a
#: ``zarr.Group``, or a local path / fsspec URL (opened and validated by that one call, for interactive use).
StoreRef = Union["Store", str, "os.PathLike[str]", zarr.Group]

#: zarr v3 data types an eigenflow store may contain (numeric and bool only).
ALLOWED_DATA_TYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64"]
)
#: Codecs that (de)serialize Python objects: a store using any of them is refused.
FORBIDDEN_CODEC_MARKERS = ("pickle", "msgpack", "json2", "vlen-array", "vlen_array", "object")
OPEN_MODES = ("r", "r+", "w", "w-")


def is_url(path: str) -> bool:
    """True for ``proto://...`` URLs other than ``file://``."""
    return "://" in path and not path.startswith("file://")


def _normalize(url: Any) -> str:
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise StorageError(f"store must be a local path, an fsspec URL or a zarr.Group; got {url!r}")
    if url.startswith("file://"):
        url = url[len("file://"):]
    return url


def filesystem(url: Any, storage_options: dict | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """``(fs, root)``: a synchronous fsspec filesystem and the store's root path on it."""
    if isinstance(url, Store):
        if storage_options:
            raise StorageError(f"storage_options are a property of the opened store {url}; got {storage_options!r}")
        return url.fs, url.root
    if isinstance(url, zarr.Group):
        return _group_filesystem(url)
    url = _normalize(url)
    if not is_url(url):
        if storage_options:
            raise StorageError(f"storage_options are only used with URLs; got {storage_options!r} for {url!r}")
        return fsspec.filesystem("file"), os.path.abspath(url)
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, root.rstrip("/")


def _group_filesystem(group: zarr.Group) -> tuple[fsspec.AbstractFileSystem, str]:
    store = group.store
    if isinstance(store, zarr.storage.LocalStore):
        fs, root = fsspec.filesystem("file"), str(store.root)
    elif isinstance(store, zarr.storage.FsspecStore):
        afs = store.fs
        if hasattr(afs, "sync_fs"):  # fsspec AsyncFileSystemWrapper around a sync filesystem
            fs = afs.sync_fs
        else:
            proto = afs.protocol[0] if isinstance(afs.protocol, (tuple, list)) else afs.protocol
            opts = {k: v for k, v in afs.storage_options.items() if k != "asynchronous"}
            fs = fsspec.filesystem(proto, **opts)
        root = store.path
    else:
        raise StorageError(f"only local and fsspec-backed zarr stores are supported; got {type(store).__name__}")
    return fs, posixpath.join(root, group.path) if group.path else root


def describe(store: StoreRef) -> str:
    """A printable location of ``store`` for messages."""
    if isinstance(store, Store):
        return store.url
    if isinstance(store, zarr.Group):
        return str(store.store) + (f"/{store.path}" if store.path else "")
    return str(store)


def location(store: StoreRef, path: str = "") -> str:
    """Where ``path`` (a node or file key, ``""`` = the root) of ``store`` is, for messages: a local file path, or a
    URL with its protocol (``s3://bucket/s.zarr/embeddings/r1``); a group on another kind of zarr store is named by
    :func:`describe`."""
    if isinstance(store, Store):
        base = store.url.rstrip("/")
    elif isinstance(store, zarr.Group):
        try:
            fs, root = _group_filesystem(store)
        except StorageError:
            return posixpath.join(describe(store), path) if path else describe(store)
        protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
        base = root if protocol in ("file", "local") else f"{protocol}://{root.lstrip('/')}"
    else:
        url = _normalize(store)
        base = url.rstrip("/") if is_url(url) else os.path.abspath(url)
    return posixpath.join(base, path) if path else base


# ---- validation of raw metadata -----------------------------------------------------------------------
def _read_json(fs: fsspec.AbstractFileSystem, path: str) -> dict | None:
    try:
        raw = fs.cat_file(path)
    except (FileNotFoundError, KeyError):
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StoreFormatError(f"{path} is not valid JSON: {exc}") from exc


def _codec_names(codecs: Any) -> list[str]:
    """Names of all codecs, including those nested in sharding configurations."""
    names: list[str] = []
    for codec in codecs or []:
        if isinstance(codec, str):
            names.append(codec)
            continue
        if not isinstance(codec, dict):
            continue
        names.append(str(codec.get("name", codec.get("id", ""))))
        conf = codec.get("configuration") or {}
        names += _codec_names(conf.get("codecs")) + _codec_names(conf.get("index_codecs"))
    return names


def check_array_metadata(meta: dict, where: str) -> None:
    """Raise :class:`StoreFormatError` if an array's zarr.json uses a forbidden data type or codec."""
    dtype = meta.get("data_type")
    if not isinstance(dtype, str) or dtype not in ALLOWED_DATA_TYPES:
        raise StoreFormatError(
            f"array {where!r} has data type {dtype!r}; eigenflow stores allow only "
            f"{sorted(ALLOWED_DATA_TYPES)} (object, string and structured dtypes are refused)"
        )
    for name in _codec_names(meta.get("codecs")):
        if any(marker in name.lower() for marker in FORBIDDEN_CODEC_MARKERS):
            raise StoreFormatError(f"array {where!r} uses codec {name!r}; pickle/object codecs are refused")


def _walk(fs: fsspec.AbstractFileSystem, root: str, rel: str, visit) -> None:
    """Visit the zarr nodes under ``root/rel`` depth first: one listing per node (which shows its zarr.json, any v2
    metadata file and its children) and one read of its zarr.json. On S3 that is 2 requests per node, against 6-7
    with an existence check per file (HEAD plus a listing each when absent)."""
    path = posixpath.join(root, rel) if rel else root
    try:
        entries = fs.ls(path, detail=True, refresh=True)  # refresh: nodes other processes wrote since a cached listing
    except (FileNotFoundError, NotADirectoryError):
        return
    kinds = {posixpath.basename(e["name"].rstrip("/")): e.get("type") for e in entries}
    for legacy in (".zarray", ".zgroup"):
        if legacy in kinds:
            raise StoreFormatError(f"node {rel or '/'!r} of {root} has zarr v2 metadata; eigenflow stores are zarr v3")
    meta = _read_json(fs, posixpath.join(path, "zarr.json")) if "zarr.json" in kinds else None
    if meta is None:
        return  # not a zarr node (e.g. runs/ with manifests)
    visit(rel, meta)
    if meta.get("node_type") != "group":
        return
    for name, kind in kinds.items():
        if kind == "directory" and not (rel == "" and name == layout.RUNS):
            _walk(fs, root, posixpath.join(rel, name) if rel else name, visit)


def node_metadata(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, dict]:
    """``{path: zarr.json dict}`` of every node of the store (root is ``""``), validated on the way."""
    nodes: dict[str, dict] = {}

    def visit(rel: str, meta: dict) -> None:
        if meta.get("zarr_format") != 3:
            raise StoreFormatError(f"node {rel or '/'!r} has zarr_format {meta.get('zarr_format')!r}; expected 3")
        if meta.get("node_type") == "array":
            check_array_metadata(meta, rel)
        nodes[rel] = meta

    _walk(fs, root, "", visit)
    return nodes


def check_root(meta: dict | None, where: str, *, allow_incomplete: bool = False) -> dict:
    """Validate the root zarr.json of an eigenflow store; return its attributes."""
    if meta is None:
        raise StoreFormatError(f"no zarr v3 store at {where} (zarr.json not found)")
    if meta.get("node_type") != "group":
        raise StoreFormatError(f"{where} is a zarr {meta.get('node_type')}, not an eigenflow store (a group)")
    attrs = meta.get("attributes") or {}
    version = attrs.get(layout.ATTR_SCHEMA_VERSION)
    if version not in layout.SUPPORTED_SCHEMA_VERSIONS:
        raise StoreFormatError(
            f"{where} has schema_version {version!r}; this eigenflow reads {list(layout.SUPPORTED_SCHEMA_VERSIONS)}"
        )
    status = attrs.get(layout.ATTR_STATUS)
    if status != layout.STATUS_COMPLETE and not allow_incomplete:
        raise StoreFormatError(
            f"{where} has status {status!r} (expected {layout.STATUS_COMPLETE!r}): its ingest did not finish; "
            "ingest it again with overwrite=True"
        )
    return attrs


#: Largest element count of one array an eigenflow store may declare (2^40 = 1.1e12, e.g. 3.4e10 rows x 32):
#: metadata above it is hostile or corrupt, and is refused before anything is read or allocated.
MAX_ARRAY_ELEMENTS = 2**40


def check_shapes(attrs: dict, nodes: dict[str, dict], where: str) -> list[str]:
    """Problems of the array shapes against the root attributes (empty when consistent).

    X must be ``(n, d)`` of the root attributes with row chunks of at least one row and whole rows per chunk; y
    ``(n,)``; every array at most :data:`MAX_ARRAY_ELEMENTS` elements; no append pending (:mod:`storage.append`).
    """
    problems = []
    n, d = attrs.get(layout.ATTR_N), attrs.get(layout.ATTR_D)
    if attrs.get(layout.ATTR_APPENDING):
        return [f"an update appending rows {n}..{attrs[layout.ATTR_APPENDING].get('n_new')} to it was interrupted; "
                "run `eigenflow update` again to finish it"]
    for path, meta in nodes.items():
        if meta.get("node_type") != "array":
            continue
        shape = [int(s) for s in meta.get("shape", [])]
        chunks = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape") or shape
        if math.prod(shape) > MAX_ARRAY_ELEMENTS:
            problems.append(f"array {path!r} claims shape {tuple(shape)}, over {MAX_ARRAY_ELEMENTS:.3g} elements")
        if any(int(c) < 1 for c in chunks):
            problems.append(f"array {path!r} has chunk shape {tuple(chunks)}")
        if path == layout.X and (shape != [n, d] or (len(chunks) == 2 and int(chunks[1]) != d)):
            problems.append(f"X has shape {tuple(shape)} and chunks {tuple(chunks)}; the store's attributes say "
                            f"n={n}, d={d}")
        if path == layout.Y and shape != [n]:
            problems.append(f"y has shape {tuple(shape)}; the store's attributes say n={n}")
    return problems


def validate_store(url: Any, storage_options: dict | None = None, *, allow_incomplete: bool = False) -> dict:
    """Check a store without opening it with zarr; return ``{path: metadata}`` of all nodes.

    Metadata is checked before any chunk is read: schema, status, data types and codecs, and the array shapes
    against the root attributes and :data:`MAX_ARRAY_ELEMENTS` (:func:`check_shapes`).
    """
    fs, root = filesystem(url, storage_options)
    attrs = check_root(_read_json(fs, posixpath.join(root, "zarr.json")), describe(url),
                       allow_incomplete=allow_incomplete)
    nodes = node_metadata(fs, root)
    unfinished = attrs.get(layout.ATTR_STATUS) != layout.STATUS_COMPLETE or attrs.get(layout.ATTR_APPENDING)
    problems = [] if unfinished and allow_incomplete else check_shapes(attrs, nodes, url)  # (an update finishes one)
    if problems:
        raise StoreFormatError(f"store {describe(url)} has inconsistent metadata: {problems[0]}")
    return nodes


# ---- opening ----------------------------------------------------------------------------------------------
def open_store(
    url: StoreRef,
    mode: str = "r",
    storage_options: dict | None = None,
    *,
    allow_incomplete: bool = False,
) -> zarr.Group:
    """Open an eigenflow store.

    Parameters
    ----------
    url : str, os.PathLike or zarr.Group
        Local path (``data.zarr``) or fsspec URL (``s3://bucket/data.zarr``, ``memory://x.zarr``). A
        ``zarr.Group`` is validated and returned as it is (``mode`` must then be ``"r"`` or ``"r+"``).
    mode : {"r", "r+", "w", "w-"}
        ``"r"`` read only and ``"r+"`` read/write an existing, validated store; ``"w"`` creates a new empty
        store (deleting what is there) and ``"w-"`` creates one, failing if something exists. New stores
        get ``schema_version`` and ``status="incomplete"``.
    storage_options : dict, optional
        fsspec options for URLs (e.g. ``{"endpoint_url": ..., "key": ..., "secret": ...}`` for s3fs).
    allow_incomplete : bool
        Accept a store whose ingest did not finish (for inspection only, e.g. ``eigenflow info``).

    Raises
    ------
    StoreFormatError
        Missing store, incomplete ingest, unknown schema version, zarr v2 metadata, object / string data
        types or pickle-like codecs anywhere in the store.
    """
    if mode not in OPEN_MODES:
        raise StorageError(f"mode must be one of {list(OPEN_MODES)}; got {mode!r}")
    if isinstance(url, zarr.Group):
        if mode not in ("r", "r+"):
            raise StorageError(f"mode must be 'r' or 'r+' for an open zarr.Group; got {mode!r}")
        validate_store(url, allow_incomplete=allow_incomplete)
        return url
    url = _normalize(url)
    fs, root = filesystem(url, storage_options)
    if not is_url(url):
        url = root  # absolute: arrays pickled to Dask workers must not depend on the working directory
    opts = {"storage_options": storage_options} if is_url(url) and storage_options else {}
    if mode in ("w", "w-"):
        if mode == "w-" and fs.exists(root):
            raise StoreFormatError(f"store {url} already exists (mode='w-')")
        group = zarr.open_group(url, mode="w", zarr_format=3, **opts)
        group.attrs.update({layout.ATTR_SCHEMA_VERSION: layout.SCHEMA_VERSION,
                            layout.ATTR_STATUS: layout.STATUS_INCOMPLETE})
        return group
    validate_store(url, storage_options, allow_incomplete=allow_incomplete)
    return zarr.open_group(url, mode=mode, zarr_format=3, **opts)


#: fsspec options a :class:`Store` handle sets for these protocols unless given: s3fs's ``max_concurrency=1`` reads an
#: object with one GET (its default of 10 asks for the size first, a HEAD per read, to split objects over 50 MiB).
HANDLE_DEFAULT_OPTIONS = {"s3": {"max_concurrency": 1}, "s3a": {"max_concurrency": 1}}


def _handle_options(url: str, storage_options: dict | None) -> dict:
    """``storage_options`` over the handle defaults of ``url``'s protocol (:data:`HANDLE_DEFAULT_OPTIONS`)."""
    protocol = url.split("://", 1)[0] if is_url(url) else "file"
    return dict(sorted({**HANDLE_DEFAULT_OPTIONS.get(protocol, {}), **(storage_options or {})}.items()))


class Store:
    """An opened eigenflow store: its location, fsspec options (S3 endpoint, credentials), filesystem and zarr group.

    A run opens its store once with :meth:`Store.open` (which validates it: :func:`validate_store`); its tasks and
    the storage functions receive this handle instead of a URL to open again. It pickles to its location alone
    (``url``, ``storage_options``, ``mode``): a Dask worker that receives it attaches to the store without walking
    the tree again (the zarr group is opened at its first use). Handles of the same location and mode are equal and
    hash alike; ``str(store)`` is the URL or the absolute local path.

    Parameters
    ----------
    url : str or os.PathLike
        Local path or fsspec URL of a store that was validated by the process that opened it.
    storage_options : dict, optional
        fsspec options of a URL (``{"endpoint_url", "key", "secret"}``), over :data:`HANDLE_DEFAULT_OPTIONS`.
    mode : {"r", "r+"}
        Read only, or read and write.
    """

    __slots__ = ("url", "storage_options", "mode", "fs", "root", "_group")

    def __init__(self, url: str | os.PathLike, storage_options: dict | None = None, mode: str = "r+") -> None:
        if mode not in ("r", "r+"):
            raise StorageError(f"mode of a store handle must be 'r' or 'r+'; got {mode!r}")
        url = _normalize(url)
        self.storage_options = _handle_options(url, storage_options)
        self.fs, self.root = filesystem(url, self.storage_options)  # a synchronous fsspec filesystem, the root on it
        self.url = url.rstrip("/") if is_url(url) else self.root  # absolute: workers must not depend on the cwd
        self.mode = mode
        self._group: zarr.Group | None = None

    @classmethod
    def open(cls, url: str | os.PathLike, mode: str = "r", storage_options: dict | None = None, *,
             allow_incomplete: bool = False) -> "Store":
        """Validate the store at ``url`` (:func:`validate_store`, the one whole-store check of a run) and return its
        handle; the arguments are those of :func:`open_store` (``"w"`` / ``"w-"`` create an empty store, whose handle
        is read / write)."""
        handle = cls(url, storage_options, "r" if mode == "r" else "r+")
        group = open_store(url, mode, handle.storage_options or None, allow_incomplete=allow_incomplete)
        handle._group = group
        return handle

    @property
    def group(self) -> zarr.Group:
        """The store's root zarr group (opened at first use, not validated again)."""
        if self._group is None:
            opts = {"storage_options": self.storage_options} if is_url(self.url) and self.storage_options else {}
            self._group = zarr.open_group(self.url, mode=self.mode, zarr_format=3, **opts)
        return self._group

    def __reduce__(self) -> tuple:
        return (Store, (self.url, self.storage_options, self.mode))

    def _key(self) -> tuple:
        return self.url, json.dumps(self.storage_options, sort_keys=True, default=repr), self.mode

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Store({self.url!r}, mode={self.mode!r})"


def as_store(store: StoreRef, mode: str = "r") -> "Store | zarr.Group":
    """``store`` itself if it is an opened :class:`Store` or a ``zarr.Group``, else the handle of the path / URL
    ``store`` (:meth:`Store.open`: validated once): for a function that makes several storage calls on a store
    given by a user as a path."""
    if isinstance(store, (Store, zarr.Group)):
        return store
    return Store.open(store, mode)


def as_group(store: StoreRef, mode: str = "r") -> zarr.Group:
    """The zarr group of ``store``: a :class:`Store`'s group, a ``zarr.Group`` itself (neither is validated again),
    or a path / URL opened by :func:`open_store` (validated, for this call only).

    Raises :class:`StorageError` when ``mode="r+"`` (a write) is asked of a handle opened read-only.
    """
    if isinstance(store, Store):
        if mode == "r+" and store.mode == "r":
            raise StorageError(f"store {store} was opened read-only (mode='r'); open it with mode='r+' to write")
        return store.group
    if isinstance(store, zarr.Group):
        return store
    return open_store(store, mode)


@contextlib.contextmanager
def decoding(path: str, where: Any) -> Iterator[None]:
    """Turn a chunk that cannot be decoded (zarr / numcodecs raise RuntimeError or ValueError) into a
    :class:`StoreFormatError` naming the array and the store."""
    try:
        yield
    except (RuntimeError, ValueError) as exc:
        if isinstance(exc, StorageError):
            raise
        raise StoreFormatError(f"cannot decode {path!r} of {describe(where)}: {exc} (a damaged chunk; "
                               "`eigenflow verify` lists the damaged chunks of checksummed arrays)") from exc


def get_node(group: zarr.Group, path: str, kind: str = "array") -> Any:
    """``group[path]``, raising :class:`StoreFormatError` naming the path if it is missing."""
    try:
        node = group[path]
    except (KeyError, FileNotFoundError) as exc:
        raise StoreFormatError(f"{describe(group)} has no {kind} {path!r}") from exc
    expected = zarr.Array if kind == "array" else zarr.Group
    if not isinstance(node, expected):
        raise StoreFormatError(f"{path!r} in {describe(group)} is not a zarr {kind}")
    return node


def has_node(group: zarr.Group, path: str) -> bool:
    """True if ``path`` exists in ``group``."""
    try:
        group[path]
    except (KeyError, FileNotFoundError):
        return False
    return True


def delete_node(group: zarr.Group, path: str) -> None:
    """Remove ``path`` (array or group, recursively) from ``group`` if it exists."""
    if has_node(group, path):
        del group[path]


def read_attrs(store: StoreRef, path: str = "") -> dict:
    """A copy of the attributes of the node at ``path`` (``""`` = root)."""
    group = as_group(store, "r")
    node = group if not path else group[path] if has_node(group, path) else None
    if node is None:
        raise StoreFormatError(f"{describe(store)} has no node {path!r}")
    return dict(node.attrs)
