"""Growing sources: a folder (or glob) of partition files, or one array whose rows are only appended.

A partitioned source is a directory that is not itself a zarr store or an AnnData zarr directory, or a path
with glob characters (``data/day-*.parquet``): its partitions are the files (and zarr / AnnData directories)
with a format ``embed`` reads, in name order. Its rows are the partitions' rows in that order
(:func:`partitioned_source`), and the ingest records each partition in the store's root attribute
``partitions``: ``{"name", "rows", "bytes", "checksum"}`` (the name relative to the folder, the BLAKE2b digest of
the file's bytes: :func:`storage.checksums.file_digest`).

An update (:func:`new_rows`) finds what is new by content, never by modification time: every recorded
partition must still be there with the same size and checksum (else :class:`ChangedSourceError` names it: its
rows are in the store and in results already, and nothing is re-ingested or dropped silently); the partitions
not recorded are new, appended in name order. A single source (an ``.npy``, a zarr array, an ``.h5ad``) may only
grow: the store's ``n`` rows must still be its first ``n`` rows, compared by the digest of the rows as stored
(:func:`rows_digest` of the source against the store's X); rows past ``n`` are new.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import IngestError, StorageError
from .source import Source

#: Characters that make a source path a glob pattern.
GLOB_CHARS = "*?["


class ChangedSourceError(StorageError):
    """A part of a growing source that the store already holds changed or disappeared."""


def is_partitioned(source: Any) -> bool:
    """Whether ``source`` is a folder or glob of partitions (module docstring), not one file or store."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = os.fspath(source)
    if "://" in path:
        return False
    if any(c in path for c in GLOB_CHARS):
        return True
    from .anndata_io import is_anndata_zarr

    return os.path.isdir(path) and not os.path.isfile(os.path.join(path, "zarr.json")) and not is_anndata_zarr(path)


def partition_paths(source: str, *, required: bool = True) -> list[str]:
    """The partitions of a partitioned ``source``, in name order (hidden files left out); with ``required``, refuses
    an empty folder or pattern. :func:`storage.readers.open_source` refuses a partition of an unknown format."""
    path = os.fspath(source)
    if any(c in path for c in GLOB_CHARS):
        found = sorted(glob.glob(path))
    else:
        found = sorted(os.path.join(path, name) for name in os.listdir(path) if not name.startswith("."))
    if not found and required:
        raise IngestError(f"source {path} holds no partition (a folder or glob of .npy / .npz / .csv / .parquet / "
                          ".h5ad files or zarr stores)")
    return found


def partitions_root(source: str) -> str:
    path = os.fspath(source)
    return os.path.dirname(path) if any(c in path for c in GLOB_CHARS) else path


def partition_digest(path: str) -> tuple[int, str]:
    """``(bytes, checksum)`` of one partition: its size and the BLAKE2b digest of its bytes (for a directory, of
    its files' relative names and bytes, in name order)."""
    digest = hashlib.blake2b(digest_size=16)
    total = 0
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    for name in files:
        if len(files) > 1 or name != path:
            digest.update(os.path.relpath(name, path).encode())
        with open(name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
                total += len(block)
    return total, "blake2b:" + digest.hexdigest()


def partition_record(path: str, root: str, rows: int) -> dict[str, Any]:
    """The record of one partition kept in the store (module docstring)."""
    size, checksum = partition_digest(path)
    return {"name": os.path.relpath(path, root), "rows": int(rows), "bytes": size, "checksum": checksum}


def chained_source(source: str, paths: list[str], parts: list[Source]) -> Source:
    """The partitions ``paths``, opened as ``parts``, as one :class:`Source`: rows in partition order, its
    ``partitions`` their records. Every partition must have the same width and all or none labels."""
    widths = {p.n_columns for p in parts if p.n_columns is not None}
    if len(widths) > 1:
        raise IngestError(f"the partitions of {source} have different widths {sorted(widths)}: "
                          + ", ".join(f"{os.path.basename(p)} {s.n_columns}" for p, s in zip(paths, parts)))
    if len({s.has_labels for s in parts}) > 1:
        with_labels = [os.path.basename(p) for p, s in zip(paths, parts) if s.has_labels]
        raise IngestError(f"some partitions of {source} carry labels and others do not (with labels: {with_labels})")
    rows = [s.n_rows for s in parts]
    counted: list[int] = []

    def blocks(size: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for part in parts:
            n = 0
            for xb, yb in part.blocks(size):
                n += xb.shape[0]
                yield xb, yb
            counted.append(n)

    return Source(kind="partitions", description=os.fspath(source),
                  n_rows=None if None in rows else int(sum(rows)), n_columns=widths.pop() if widths else None,
                  has_labels=parts[0].has_labels, blocks=blocks,
                  partitions=_Records(paths, partitions_root(source), rows, counted))


@dataclass
class _Records:
    """The records of a partitioned source's partitions, made once its rows were read (a CSV's rows are known only
    then)."""

    paths: list[str]
    root: str
    rows: list[int | None]
    counted: list[int]

    def records(self) -> list[dict[str, Any]]:
        rows = [r if r is not None else c for r, c in zip(self.rows, self.counted or self.rows)]
        return [partition_record(p, self.root, r) for p, r in zip(self.paths, rows)]


def rows_digest(blocks: Iterator[np.ndarray], n: int, dtype: str) -> str:
    """BLAKE2b digest of the first ``n`` rows of ``blocks`` as stored (``dtype``, C order): the same for a source
    and for the store it was ingested into, whatever the block sizes."""
    digest = hashlib.blake2b(digest_size=16)
    seen = 0
    for block in blocks:
        take = np.ascontiguousarray(np.asarray(block[: n - seen]), dtype=dtype)
        digest.update(take.tobytes())
        seen += take.shape[0]
        if seen >= n:
            break
    if seen < n:
        raise ChangedSourceError(f"the source now has {seen} rows; the store holds {n} of its rows")
    return "blake2b:" + digest.hexdigest()


@dataclass(frozen=True)
class NewRows:
    """What an update appends: the new partitions' paths (a partitioned source), or the rows past ``start`` of a
    single source (``paths`` empty, ``start`` the rows the store holds)."""

    paths: list[str]
    start: int
    n_new: int
