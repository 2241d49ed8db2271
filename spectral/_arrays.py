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
    n = rows.size
    parts = [np.ascontiguousarray(X_rows).view(np.uint8).reshape(n, -1)]
    if y_rows is not None:
        parts.append(np.ascontiguousarray(np.asarray(y_rows, dtype=np.int64)).view(np.uint8).reshape(n, -1))
    raw = np.ascontiguousarray(np.hstack(parts)) if len(parts) > 1 else parts[0]
    keys = raw.view(np.dtype((np.void, raw.shape[1]))).ravel()  # one opaque key per row: its bytes
    _, first = np.unique(keys, return_index=True)
    kept = rows[np.sort(first)]
    return kept, int(rows.size - kept.size)
