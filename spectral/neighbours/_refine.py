"""Exact distances of selected neighbour pairs, recomputed and re-sorted (the refinement step of :mod:`.knn`).

One fused numba kernel per call: for each query row, the float64 distance to each of its candidate
neighbours is computed straight from the coordinates (no ``(m, k, d)`` gather of neighbour rows, no
``|x|^2 - 2 x.y + |y|^2`` expansion), then each is inserted into the row's sorted prefix, which keeps equal
distances in their candidate order (a stable sort). Rows run in parallel (numba ``prange``).

This replaces a numpy gather of the neighbour rows and an ``argsort``: each coordinate is read once, no
``(m, k, d)`` temporary is made, and the rows use every core. A row's k distances are computed before they are
sorted, with the sums allowed to re-associate (``fastmath={"reassoc"}``) so that numba vectorizes them. The sums
stay deterministic, and ``d(i, j) == d(j, i)`` bitwise (the same squares summed in the same order).
"""

from __future__ import annotations

import numba
import numpy as np

from eigenflow.spectral.neighbours.jit_cache import cached_njit

#: metric codes of the kernel
METRIC_CODES = {"euclidean": 0, "manhattan": 1, "cosine": 2}


@cached_njit(parallel=True, fastmath={"reassoc"})
def _refine_rows(X, Q, indices, metric):  # pragma: no cover - compiled
    m, k = indices.shape
    d = X.shape[1]
    out_i = np.empty((m, k), dtype=np.int64)
    out_d = np.empty((m, k), dtype=np.float64)
    for r in numba.prange(m):
        qn = 0.0
        if metric == 2:
            for t in range(d):
                qn += np.float64(Q[r, t]) * np.float64(Q[r, t])
            qn = np.sqrt(qn)
        row = np.empty(k)  # the row's k distances first: independent loads the CPU overlaps
        for j in range(k):
            c = indices[r, j]
            s = 0.0
            if metric == 0:
                for t in range(d):
                    diff = np.float64(X[c, t]) - np.float64(Q[r, t])
                    s += diff * diff
                s = np.sqrt(s)
            elif metric == 1:
                for t in range(d):
                    s += abs(np.float64(X[c, t]) - np.float64(Q[r, t]))
            else:
                dot, xn = 0.0, 0.0
                for t in range(d):
                    dot += np.float64(X[c, t]) * np.float64(Q[r, t])
                    xn += np.float64(X[c, t]) * np.float64(X[c, t])
                denom = qn * np.sqrt(xn)
                # zero vectors: distance 0 to another zero vector, 1 otherwise (scikit-learn's convention)
                if denom > 0.0:
                    sim = dot / denom
                elif qn == 0.0 and xn == 0.0:
                    sim = 1.0
                else:
                    sim = 0.0
                s = min(max(1.0 - sim, 0.0), 2.0)
            row[j] = s
        for j in range(k):  # insert into the sorted prefix; equal distances keep candidate order
            s, c, p = row[j], indices[r, j], j
            while p > 0 and out_d[r, p - 1] > s:
                out_d[r, p] = out_d[r, p - 1]
                out_i[r, p] = out_i[r, p - 1]
                p -= 1
            out_d[r, p] = s
            out_i[r, p] = c
    return out_i, out_d


@cached_njit(parallel=True)
def _drop_self_rows(indices, k):  # pragma: no cover - compiled
    n = indices.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for r in numba.prange(n):
        drop = k  # the last column when the point is missing from its own list (duplicates at distance 0)
        for j in range(k + 1):
            if indices[r, j] == r:
                drop = j
                break
        c = 0
        for j in range(k + 1):
            if j != drop:
                out[r, c] = indices[r, j]
                c += 1
    return out


def drop_self(indices: np.ndarray, k: int) -> np.ndarray:
    """Remove the point itself from each row of ``indices`` (n, k + 1) of a training graph -> (n, k) int64
    (rows in parallel).

    With duplicates the point may be missing from its own k + 1 list (all ties at distance 0); then the
    last column is dropped. A duplicate twin is never dropped in place of the point itself.
    """
    indices = np.ascontiguousarray(indices)  # int32 (pynndescent's) or int64 as they are: no widening copy
    if indices.dtype not in (np.int32, np.int64):
        indices = indices.astype(np.int64)
    return _drop_self_rows(indices, int(k))


def refine(X: np.ndarray, Q: np.ndarray, indices: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Recompute ``d(Q[r], X[indices[r, j]])`` in float64 and sort each row by it (stable).

    Parameters
    ----------
    X : ndarray (n, d)
        Indexed points (float32 or float64).
    Q : ndarray (m, d)
        Query points (float32 or float64; other dtypes are read as float64, as for X).
    indices : ndarray (m, k) of int
        Candidate neighbours of each query row, rows of X.
    metric : {"euclidean", "manhattan", "cosine"}

    Returns
    -------
    indices : ndarray (m, k) int64, sorted by distance
    distances : ndarray (m, k) float32
    """
    X, Q = (np.ascontiguousarray(A, dtype=A.dtype if A.dtype in (np.float32, np.float64) else np.float64)
            for A in (X, Q))
    idx, dist = _refine_rows(X, Q, np.ascontiguousarray(indices, dtype=np.int64), METRIC_CODES[metric])
    return idx, dist.astype(np.float32)
