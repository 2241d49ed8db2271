"""The parts of a :class:`~spectral.neighbours.partition.BlockPartition` assembled on the Dask workers: each part's row
list and rows of X, built from the per-block labels where the blocks are, so the driving process never holds one
number per row.

Each row block is split by part once on its own worker (:func:`split_block`); part ``p`` then joins its pieces,
in block order (so its rows are ascending), on worker ``p mod W`` of the ``W`` workers (allowed elsewhere if
that worker is lost). Every row of X moves once, whatever ``P``; only the (B, P) counts of the partition tell the
driver which pieces exist.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_workers
from eigenflow.spectral.neighbours.partition import BlockPartition
from eigenflow.spectral.placement import item, worker_list


def split_block(block, labels, n_parts: int, start: int) -> list:
    """Task: one row block split by part: ``[(rows (m_p,) int64 global, X rows (m_p, d) or None)] * P``, rows
    ascending inside each piece. ``block`` None: the row numbers only."""
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    cuts = np.searchsorted(labels[order], np.arange(n_parts + 1))
    Y = None if block is None else np.asarray(block)
    return [(start + order[a:b], None if Y is None else Y[order[a:b]]) for a, b in zip(cuts[:-1], cuts[1:])]


def join_part(*pieces) -> tuple[np.ndarray, Any]:
    """Task: ``(rows (n_p,), X_p (n_p, d) or None)`` of one part from its pieces in block order."""
    rows = np.concatenate([p[0] for p in pieces]).astype(np.int64, copy=False)
    X = None if pieces[0][1] is None else np.concatenate([p[1] for p in pieces], axis=0)
    return rows, X


def assemble_parts(client, parts: BlockPartition, blocks: list | None = None) -> tuple[list, list | None]:
    """``(rows, shards)``: per part ``p`` a future of its rows ``(n_p,)`` int64 (global row numbers, ascending)
    and, when ``blocks`` (the futures of X's row blocks, as the partition's) is given, a future of its rows of X
    ``(n_p, d)``; both on the same worker, ``p mod W``. None for ``shards`` without ``blocks``."""
    workers = check_workers(worker_list(client))
    P, starts = parts.bounds.size - 1, parts.block_bounds[:-1]
    splits = [client.submit(split_block, None if blocks is None else blocks[j], lab, P, int(starts[j]), pure=False)
              for j, lab in enumerate(parts.labels)]
    rows, shards = [], []
    for p in range(P):
        pieces = [client.submit(item, splits[j], p, pure=False) for j in np.flatnonzero(parts.counts[:, p])]
        joined = client.submit(join_part, *pieces, workers=[workers[p % len(workers)]], allow_other_workers=True,
                               pure=False)
        rows.append(client.submit(item, joined, 0, pure=False))
        shards.append(client.submit(item, joined, 1, pure=False))
    return rows, (shards if blocks is not None else None)


def rows_digest(rows: np.ndarray) -> str:
    """Task: BLAKE2b digest (16 bytes, hex) of a part's rows as int64."""
    return hashlib.blake2b(np.asarray(rows, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


def parts_digest(client, rows: list, bounds: np.ndarray) -> str:
    """Digest of a partition from its parts' row futures (each digested on its worker) and ``bounds``: equal for
    equal partitions."""
    digest = hashlib.blake2b(np.asarray(bounds, dtype=np.int64).tobytes(), digest_size=16)
    for d in client.gather([client.submit(rows_digest, r, pure=False) for r in rows]):
        digest.update(bytes.fromhex(d))
    return digest.hexdigest()
