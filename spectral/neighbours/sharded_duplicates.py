"""Exact-duplicate rows of a dask array whose row chunks live on Dask workers: the rows
:func:`spectral._arrays.distinct_rows` drops, found without gathering X, its hashes or its rows anywhere.

Steps (one task per row chunk or per bucket; ``B`` buckets, by default one per worker):

1. per chunk: a 64-bit hash of each row (:func:`spectral._arrays.row_hashes` of its bytes), kept on the worker,
   and split by bucket (``hash`` modulo ``B``, from its upper bits);
2. per bucket: the hashes that occur more than once among all the chunks' pieces of that bucket. Only these
   (one per group of copies, plus rare collisions) come back to the caller;
3. if there are any, per chunk: the rows whose hash repeats, with their positions, split by bucket; per bucket:
   the exact byte comparison (:func:`spectral._arrays.repeats_of_earlier`) that names every row equal to a row
   at a smaller position.

Equal rows have equal hashes, so a group of copies never spans two buckets, and the first of a group (by
position) is kept exactly as :func:`~spectral._arrays.distinct_rows` keeps it. Traffic: 8 bytes per row
(step 2) plus the bytes of the rows whose hash repeats (step 3); the caller receives the repeated hashes and the
dropped positions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.spectral._arrays import repeats_of_earlier, row_bytes, row_chunk_futures, row_hashes
from eigenflow.spectral._validation import check_int
from eigenflow.spectral.placement import item, shared_value

#: The bucket of a hash is taken from its upper bits (the lower bits of the products depend only on the lower
#: bits of the words).
_BUCKET_SHIFT = np.uint64(40)


def repeated_positions(X: Any, client, n_buckets: int | None = None) -> np.ndarray:
    """Positions (sorted (r,) int64) of the rows of the dask array ``X`` (n, d), with known row chunks, that equal
    a row at a smaller position byte for byte: the rows :func:`spectral._arrays.distinct_rows` drops.

    The row chunks are computed on the workers of ``client`` and released at the end; ``n_buckets`` (default:
    the number of workers) sets how many tasks share steps 2 and 3 of the module docstring.
    """
    B = max(1, len(client.nthreads())) if n_buckets is None else check_int("n_buckets", n_buckets, low=1)
    blocks, bounds = row_chunk_futures(X, client)  # on the workers, never gathered here
    starts = bounds[:-1]
    try:
        hashes = [client.submit(_block_hashes, b, pure=False) for b in blocks]
        split = [client.submit(_by_bucket, h, B, pure=False) for h in hashes]
        repeated = [client.submit(_repeated_hashes, *[client.submit(item, s, b, pure=False) for s in split],
                                  pure=False) for b in range(B)]
        repeated = np.concatenate(client.gather(repeated))
        if not repeated.size:
            return np.zeros(0, dtype=np.int64)
        wanted = shared_value(client, repeated)
        candidates = [client.submit(_candidates_by_bucket, b, h, wanted, int(start), B, pure=False)
                      for b, h, start in zip(blocks, hashes, starts)]
        dropped = [client.submit(_dropped_in_bucket, *[client.submit(item, c, b, pure=False) for c in candidates],
                                 pure=False) for b in range(B)]
        return np.sort(np.concatenate(client.gather(dropped))).astype(np.int64)
    finally:
        for future in blocks:  # drop this call's references (other holders of the keys keep theirs)
            future.release()


def _bucket(hashes: np.ndarray, n_buckets: int) -> np.ndarray:
    return ((hashes >> _BUCKET_SHIFT) % np.uint64(n_buckets)).astype(np.intp)


def _block_hashes(block: np.ndarray) -> np.ndarray:
    """Task: the hash (m,) uint64 of each row of a row chunk (m, d)."""
    return row_hashes(row_bytes(np.asarray(block)))


def _by_bucket(hashes: np.ndarray, n_buckets: int) -> list:
    """Task: the chunk's hashes split by bucket (``n_buckets`` arrays)."""
    bucket = _bucket(hashes, n_buckets)
    return [hashes[bucket == b] for b in range(n_buckets)]


def _repeated_hashes(*pieces: np.ndarray) -> np.ndarray:
    """Task: the hashes occurring more than once among one bucket's pieces of every chunk, (r,) uint64."""
    values, counts = np.unique(np.concatenate(pieces), return_counts=True)
    return values[counts > 1]


def _candidates_by_bucket(block: np.ndarray, hashes: np.ndarray, repeated: np.ndarray, start: int,
                          n_buckets: int) -> list:
    """Task: the rows of a chunk (first at position ``start``) whose hash is in ``repeated``, split by bucket:
    per bucket ``(positions (m_b,), row bytes (m_b, b))``."""
    hit = np.flatnonzero(np.isin(hashes, repeated))
    raw = row_bytes(np.asarray(block)[hit])
    bucket = _bucket(hashes[hit], n_buckets)
    return [(start + hit[bucket == b], raw[bucket == b]) for b in range(n_buckets)]


def _dropped_in_bucket(*pieces: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Task: of one bucket's candidate rows from every chunk, the positions of those equal to an earlier row."""
    positions = np.concatenate([p for p, _ in pieces]).astype(np.int64)
    if not positions.size:
        return positions
    raw = np.vstack([r for _, r in pieces])
    order = np.argsort(positions, kind="stable")
    return repeats_of_earlier(raw[order], positions[order])
