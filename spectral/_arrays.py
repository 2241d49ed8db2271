"""NumPy / Dask duck typing and row access (the one place that decides "is this a dask array"), and exact-duplicate
rows (:func:`distinct_rows`).

Every at-scale routine (Nystrom features, the chunked sums of DNE / MFA / LFDA, LNEG's chunk tasks, the
low-rank operators) accepts X as a NumPy array or a ``dask.array.Array`` (n, d) and reads rows through
these helpers, which always return float64 NumPy blocks.
"""

from __future__ import annotations

import numpy as np


def is_dask(X) -> bool:
    """True for a ``dask.array.Array`` (duck-typed: it has ``chunks`` and ``compute``)."""
    return hasattr(X, "chunks") and hasattr(X, "compute")


def to_numpy(block, dtype=np.float64) -> np.ndarray:
    """A (lazy or in-memory) array as NumPy of ``dtype`` (``compute()`` for dask)."""
    return np.asarray(block.compute() if is_dask(block) else block, dtype=dtype)


def row_block(X, i0: int, i1: int) -> np.ndarray:
    """Rows ``X[i0:i1]`` (i1 - i0, d) as float64 NumPy."""
    return to_numpy(X[i0:i1])


def row_chunk_futures(X, client) -> tuple[list, np.ndarray]:
    """``(futures, bounds)``: the row chunks ``(m_j, d)`` of a dask ``X`` (n, d) with known row chunks, computed on
    the workers of the ``distributed`` ``client`` (never gathered; the caller releases the futures), and their
    ``(B + 1,)`` row bounds. The same keys for every caller of the same ``X``: the scheduler computes them once."""
    import math

    from eigenflow.spectral.errors import InputDataError

    if X.ndim != 2 or any(math.isnan(s) for s in X.shape) or X.shape[0] < 1:
        raise InputDataError(f"X must be a 2-D dask array with known row chunks; got shape {X.shape}")
    X = X.rechunk({1: X.shape[1]})
    bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    return client.compute(X.to_delayed().ravel().tolist()), bounds


def take_rows(X, idx) -> np.ndarray:
    """Rows ``X[idx]`` (len(idx), d) as float64 NumPy, in the order of ``idx`` (sorted gather for dask)."""
    idx = np.asarray(idx)
    if not is_dask(X):
        return np.asarray(X[idx], dtype=np.float64)
    order = np.argsort(idx, kind="stable")
    out = np.empty((len(idx), X.shape[1]))
    out[order] = to_numpy(X[idx[order]])
    return out


def distinct_rows(X_rows: np.ndarray, y_rows: np.ndarray | None, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """``(rows kept, number dropped)``: the first of each group of fit rows with equal X (and equal label).

    Exact copies are collapsed before any graph is built, so that 2,000 copies of a point never form a
    clique of their own: the model is fitted on one of them and the others, left out of the fit, get its
    result through the out-of-sample map (which returns a training point's own value for an exact match).
    Rows that differ in any bit, or in their label, are kept (near-duplicates are ordinary points).
    """
    raw = row_bytes(X_rows, y_rows)
    # Rows are compared through a 64-bit hash each: sorting n integers is much cheaper than sorting n rows of
    # bytes, and only the rows whose hash repeats (the duplicates, plus rare collisions) go through the exact
    # byte comparison.
    hashes = row_hashes(raw)
    sorted_hashes = np.sort(hashes)
    repeated = sorted_hashes[1:] == sorted_hashes[:-1]
    if not repeated.any():
        return rows, 0
    candidates = np.flatnonzero(np.isin(hashes, sorted_hashes[1:][repeated]))  # ascending positions
    dropped = repeats_of_earlier(raw[candidates], candidates)
    keep = np.ones(rows.size, dtype=bool)
    keep[dropped] = False
    return rows[keep], int(dropped.size)


def row_bytes(X_rows: np.ndarray, y_rows: np.ndarray | None = None) -> np.ndarray:
    """The bytes of each row of ``X_rows`` (n, d), followed by those of its label ``y_rows`` (n,) as int64 when
    given: ``(n, b)`` uint8, equal exactly for rows that :func:`distinct_rows` calls copies."""
    n = X_rows.shape[0]
    parts = [np.ascontiguousarray(X_rows).view(np.uint8).reshape(n, -1)]
    if y_rows is not None:
        parts.append(np.ascontiguousarray(np.asarray(y_rows, dtype=np.int64)).view(np.uint8).reshape(n, -1))
    return np.ascontiguousarray(np.hstack(parts)) if len(parts) > 1 else parts[0]


def repeats_of_earlier(raw: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Of the rows ``raw`` (m, b) uint8 at the ascending ``positions`` (m,), the positions of those equal byte for
    byte to a row at a smaller position (every row of a group of equal rows but the first): sorted (r,) int64."""
    keys = np.ascontiguousarray(raw).view(np.dtype((np.void, raw.shape[1]))).ravel()  # one opaque key per row
    _, first = np.unique(keys, return_index=True)
    return np.setdiff1d(positions, positions[first], assume_unique=True).astype(np.int64)


def row_hashes(raw: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of the byte matrix ``raw`` (n, b): the rows' words times fixed odd constants,
    summed modulo 2**64 (equal rows always get equal hashes)."""
    width = next(w for w in (8, 4, 2, 1) if raw.shape[1] % w == 0)
    words = raw.view(np.dtype(f"<u{width}")).astype(np.uint64, copy=False)  # (n, b / width)
    constants = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64) | np.uint64(1)
    if width == 8:  # words is a view: one matrix product, one pass over the rows (its sums wrap modulo 2**64 too)
        return words @ constants
    hashes = np.zeros(raw.shape[0], dtype=np.uint64)
    for j in range(words.shape[1]):  # column by column: no (n, b / width) temporary
        hashes += words[:, j] * constants[j]
    return hashes
