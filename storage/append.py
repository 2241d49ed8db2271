"""Append the new rows of a growing source to a store's X (and y), with their checksums, safe against a kill.

The store's root attribute ``n`` is the commit point. An append first writes ``appending = {"n", "n_new"}`` into the
root attributes, then grows X and y to ``n_new`` rows and writes the new rows (validated as an ingest validates
them: :func:`storage.ingest.validate_x_block`), records the checksums of X and y, and finally writes ``n = n_new``,
the new fingerprint and the partition records, and removes ``appending``, in one write of the root attributes.
A store killed in between is refused by every command but ``update`` (:func:`storage.store.check_shapes` names
it); the next ``update`` starts the append again from ``n``, so every row is in the store exactly once.

The fingerprint of a grown store chains the old one with the digest of the rows appended:
``blake2b(old fingerprint, n_new, digest of rows n..n_new)``; the token of the store changes with it, so nothing
computed for the old rows (a kNN index, a stage's hand-off) is taken for the new ones.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from . import layout
from .checksums import record_checksums
from .errors import IngestError
from .ingest import read_block_rows, validate_label_block, validate_x_block
from .partitions import (ChangedSourceError, NewRows, is_partitioned, partition_digest, partition_paths,
                         partitions_root, rows_digest)
from .store import Store, as_group, read_attrs


def append_rows(store: Store, source: str, new: NewRows, **options: Any) -> dict[str, Any]:
    """Append ``new`` (:func:`storage.partitions.new_rows`) of ``source`` to ``store``; returns ``{"n_before",
    "n", "appended", "partitions"}`` (the names of the partitions appended)."""
    from .readers import open_source

    group = as_group(store, "r+")
    attrs = dict(group.attrs)
    pending = attrs.get(layout.ATTR_APPENDING)
    n0 = int(pending["n"]) if pending else int(attrs[layout.ATTR_N])
    dtype, d, has_labels = attrs[layout.ATTR_DTYPE], int(attrs[layout.ATTR_D]), bool(attrs[layout.ATTR_HAS_LABELS])
    if new.n_new == 0 and not pending:
        return {"n_before": n0, "n": n0, "appended": 0, "partitions": []}
    src = _new_source(source, new, **options)
    if src.has_labels and not has_labels:
        raise IngestError(f"the new rows of {source} carry labels and the store's rows have none; re-ingest the "
                          "source with --overwrite to keep them")
    group.attrs.update({layout.ATTR_APPENDING: {"n": n0, "n_new": n0 + new.n_new}})
    x, y = group[layout.X], group[layout.Y] if has_labels else None
    skip = 0 if new.paths else new.start  # a single growing source: its first rows are in the store already
    n, digest = n0, hashlib.blake2b(digest_size=16)
    for xb, yb in src.blocks(read_block_rows(int(attrs[layout.ATTR_CHUNK_ROWS]), d, dtype)):
        if skip:
            cut = min(skip, xb.shape[0])
            xb, yb, skip = xb[cut:], (None if yb is None else yb[cut:]), skip - cut
            if xb.shape[0] == 0:
                continue
        xb = validate_x_block(xb, n, dtype, d)
        stop = n + xb.shape[0]
        if stop > x.shape[0]:
            x.resize((stop, d))
            if y is not None:
                y.resize((stop,))
        x[n:stop] = xb
        digest.update(np.ascontiguousarray(xb).tobytes())
        if y is not None:  # new rows without labels are unlabeled (-1)
            y[n:stop] = validate_label_block(yb, n) if yb is not None else np.full(xb.shape[0], -1, np.int32)
        n = stop
    if n != n0 + new.n_new:
        raise IngestError(f"source {source} announced {new.n_new} new rows but {n - n0} were read")
    x.resize((n, d))  # a resumed append that read fewer rows than a first attempt wrote
    if y is not None:
        y.resize((n,))
    record_checksums(store)
    fingerprint = hashlib.blake2b(f"{attrs[layout.ATTR_FINGERPRINT]},{n}".encode(), digest_size=16)
    fingerprint.update(digest.digest())
    committed = {layout.ATTR_N: n, layout.ATTR_FINGERPRINT: "blake2b:" + fingerprint.hexdigest()}
    records = src.partitions.records() if src.partitions is not None else []
    if records:
        committed[layout.ATTR_PARTITIONS] = list(attrs.get(layout.ATTR_PARTITIONS) or []) + records
    root = dict(group.attrs)
    root.pop(layout.ATTR_APPENDING, None)
    group.attrs.put({**root, **committed})  # the commit: n, fingerprint and partitions at once
    return {"n_before": n0, "n": n, "appended": n - n0,
            "partitions": [rec["name"] for rec in records]}


def _new_source(source: str, new: NewRows, **options: Any) -> Any:
    """The new partitions as one source, or the whole single source (its first ``new.start`` rows are skipped)."""
    from .partitions import chained_source
    from .readers import open_source

    if not new.paths:
        return open_source(source, **options)
    return chained_source(source, new.paths, [open_source(p, **options) for p in new.paths])


def new_rows(store: Store, source: str, **options: Any) -> NewRows:
    """The rows of ``source`` that ``store`` does not hold yet; raises :class:`ChangedSourceError` naming a part that
    changed (:mod:`storage.partitions`). ``options``: the readers' (``x_key``, ``labels_key``, ...)."""
    from .arrays import iter_row_chunks
    from .readers import open_source

    attrs = read_attrs(store)
    n_stored, dtype = int(attrs[layout.ATTR_N]), attrs[layout.ATTR_DTYPE]
    if is_partitioned(source):
        recorded = attrs.get(layout.ATTR_PARTITIONS)
        if recorded is None:
            raise ChangedSourceError(f"store {store} was not ingested from the partitioned source {source} (it records "
                                     "no partitions); ingest it with `eigenflow embed` first")
        root = partitions_root(source)
        current = {os.path.relpath(p, root): p for p in partition_paths(source, required=False)}
        for rec in recorded:
            path = current.get(rec["name"])
            if path is None:
                raise ChangedSourceError(f"partition {rec['name']} of {source} was ingested and has disappeared; "
                                         "restore it, or re-ingest the source with --overwrite")
            size, checksum = partition_digest(path)
            if (size, checksum) != (rec["bytes"], rec["checksum"]):
                raise ChangedSourceError(f"partition {rec['name']} of {source} changed after it was ingested "
                                         f"({rec['bytes']} -> {size} bytes, checksum {rec['checksum']} -> {checksum}); "
                                         "restore it, or re-ingest the source with --overwrite")
        known = {rec["name"] for rec in recorded}
        paths = [p for name, p in current.items() if name not in known]
        n_new = sum(_rows_of(open_source(p, **options)) for p in paths)
        return NewRows(paths, n_stored, n_new)
    src = open_source(source, **options)
    total = _rows_of(src)
    if total < n_stored:
        raise ChangedSourceError(f"source {source} has {total} rows; store {store} holds {n_stored} of its rows "
                                 "(a growing source may only gain rows)")
    stored = (block for _, _, block in iter_row_chunks(store, layout.X))
    if rows_digest((xb for xb, _ in src.blocks(1 << 16)), n_stored, dtype) != rows_digest(stored, n_stored, dtype):
        raise ChangedSourceError(f"the first {n_stored} rows of source {source} are not the rows store {store} holds "
                                 "(a growing source may only gain rows at its end); re-ingest it with --overwrite")
    return NewRows([], n_stored, total - n_stored)


def _rows_of(src: Any) -> int:
    """Rows of a source: from its header, or counted (a CSV)."""
    return int(src.n_rows) if src.n_rows is not None else sum(xb.shape[0] for xb, _ in src.blocks(1 << 16))


def pending_append(store: Any) -> dict | None:
    """The ``appending`` record of a store whose last append did not finish (None when there is none, or when
    ``store`` is no store: opening it says what is wrong). Read without validating the store, which refuses it."""
    try:
        return dict(Store(store, mode="r").group.attrs).get(layout.ATTR_APPENDING)
    except Exception:  # noqa: BLE001 - not a readable store: Store.open names the problem
        return None
