"""The ingest of a source file or store into a chunked eigenflow store (the I/O is :func:`storage.ingest`), and the
checks of an existing store at the target; no Prefect here (the CLI ingests before its flow starts): the Prefect
task is :func:`tasks.ingest_task.ingest_task`."""

from __future__ import annotations

import os
from typing import Any

from eigenflow.storage import layout
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.ingest import ingest
from eigenflow.storage.lock import claimed_here
from eigenflow.storage.store import Store, filesystem, is_url, read_attrs


def same_location(a: str, b: str) -> bool:
    """True if two store references name the same place (local paths compared after ``abspath``)."""
    a, b = os.fspath(a).rstrip("/"), os.fspath(b).rstrip("/")
    if is_url(a) or is_url(b):
        return a == b
    return os.path.abspath(a) == os.path.abspath(b)


def existing_store_attrs(store: str | Store) -> dict | None:
    """Root attributes of a complete store at ``store`` (a URL, or an opened :class:`Store`: not validated again),
    None if nothing is there.

    Raises :class:`storage.errors.StoreFormatError` if something that is not a complete store is there.
    """
    if isinstance(store, Store):
        return read_attrs(store)
    fs, root = filesystem(store)
    if not fs.exists(root) or claimed_here(fs, root):  # nothing, or a new store this process locked before its ingest
        return None
    attrs = read_attrs(store)  # validates: complete, known schema, no pickle codecs
    return attrs


def open_existing(store_url: str) -> Store | None:
    """The handle of the complete store at ``store_url`` (:meth:`Store.open`: its one validation, shared by the
    checks before a run and by the run itself); None if nothing is there, or something that is not a complete
    store (which the ingest then reports, or replaces with ``overwrite``)."""
    fs, root = filesystem(store_url)
    if not fs.exists(root):
        return None
    try:
        return Store.open(store_url, "r+")
    except StoreFormatError:
        return None


def with_opened(candidates) -> list:
    """``candidates`` (URLs or opened :class:`Store` handles) with each URL that names the location of an opened
    candidate replaced by that handle (a source that is the store itself is not validated again)."""
    opened = [c for c in candidates if isinstance(c, Store)]
    return [c if isinstance(c, Store) else next((s for s in opened if same_location(c, s.url)), c)
            for c in candidates]


def first_store_attrs(candidates) -> dict | None:
    """Root attributes of the first of ``candidates`` (URLs or opened :class:`Store` handles, in order) that is a
    complete store; None if none is. A candidate that is not a store (e.g. the source file itself) is skipped: the
    ingest reports what is wrong with it."""
    for candidate in with_opened(candidates):
        try:
            attrs = existing_store_attrs(candidate)
        except Exception:  # noqa: BLE001 - not a store
            continue
        if attrs is not None:
            return attrs
    return None


def ingest_source(
    source: str,
    store_url: str | Store,
    *,
    labels: str | None = None,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    use_rep: str | None = None,
    labels_obs: str | None = None,
    executor: Any = None,
) -> dict[str, Any]:
    """Ingest ``source`` into ``store_url`` (a URL, or the opened :class:`Store` of an existing store) unless the
    store already holds it; return the store's summary.

    Skipped (``{"skipped": True, ...}``) when ``source`` is the store itself, or when a complete store at
    ``store_url`` was ingested from the same ``source`` (a re-run after a crash). A store holding another
    source is refused unless ``overwrite``.

    ``executor`` (anything with ``map``: a Dask client's executor, a thread pool): every chunk is read, validated
    and written by one of its tasks for the sources that allow it (``.npy``, zarr); the result's ``parallel``
    says whether that happened (CSV, parquet and npz are streamed in order).

    ``use_rep`` (``"X"`` or an ``obsm`` key) and ``labels_obs`` (an ``obs`` column) select X and the labels of an
    AnnData source (:mod:`storage.anndata_io`); a store holds this source only if it was ingested with the same.
    """
    source = os.fspath(source)
    if same_location(source, str(store_url)):
        return {"skipped": True, "reason": "source is the store", **_summary(store_url)}
    attrs = None if overwrite else existing_store_attrs(store_url)
    if attrs is not None:
        labels_ok = labels is None or bool(attrs.get(layout.ATTR_HAS_LABELS))
        if same_location(str(attrs.get(layout.ATTR_SOURCE, "")), source) and labels_ok and \
                _same_selection(attrs, use_rep, labels_obs):
            return {"skipped": True, "reason": "store already holds this source", **_summary(store_url)}
        selection = (f" with use_rep={attrs[layout.ATTR_CELLS_X_KEY]!r}, labels_obs="
                     f"{attrs.get(layout.ATTR_CELLS_LABELS_KEY)!r}" if layout.ATTR_CELLS_X_KEY in attrs else "")
        raise StoreFormatError(
            f"store {store_url} already exists (ingested from {attrs.get(layout.ATTR_SOURCE)!r}{selection}); "
            "choose another store path, pass the store itself as SOURCE, or use overwrite"
        )
    keys = {"x_key": use_rep or "X", "labels_key": labels_obs or "auto"}
    target, options = (store_url.url, store_url.storage_options or None) if isinstance(store_url, Store) \
        else (store_url, None)
    result = ingest(source, target, labels=labels, chunk_rows=chunk_rows, overwrite=overwrite,
                    storage_options=options, executor=executor, **keys)
    return {"skipped": False, **result.to_dict()}


def _same_selection(attrs: dict, use_rep: str | None, labels_obs: str | None) -> bool:
    """Whether a store's X and labels were read from the representation and ``obs`` column asked for."""
    if layout.ATTR_CELLS_X_KEY not in attrs:
        return use_rep is None and labels_obs is None
    return attrs[layout.ATTR_CELLS_X_KEY] == (use_rep or "X") and attrs.get(layout.ATTR_CELLS_LABELS_KEY) == labels_obs


def _summary(store_url: str | Store) -> dict[str, Any]:
    attrs = read_attrs(store_url)
    keys = (layout.ATTR_N, layout.ATTR_D, layout.ATTR_CHUNK_ROWS, layout.ATTR_DTYPE, layout.ATTR_HAS_LABELS,
            layout.ATTR_FINGERPRINT, layout.ATTR_SOURCE)
    return {"store": str(store_url) if isinstance(store_url, Store) else os.fspath(store_url),
            **{key: attrs.get(key) for key in keys}}
