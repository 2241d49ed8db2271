"""NumPy / Dask duck typing and row access: the one place that decides "is this a dask array".

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
