"""Compiled kernels of the weights stage: the directed kNN weight rows and their symmetrization ``op(A, A^T)``.

:func:`directed_csr` gives the CSR arrays of the directed weight matrix A that :mod:`spectral.graph.weights` used to
build with numpy and scipy (the kernel exponents, numpy's ``exp``, each row's columns sorted and repeated ones
added), with the same values bit for bit; rows in parallel, in one pass when no row repeats a column (a kNN graph's
rows never do), so no (m, k) array of exponents and no separate counting pass. The distances are read as given
(float32 or float64), without a float64 copy.

:func:`symmetrized_csr` gives the same matrix as scipy's ``A.maximum(A.T)`` / ``A.minimum(A.T)`` /
``(A + A.T) * 0.5`` followed by dropping the diagonal and zeros and sorting the indices (the same values, bit
for bit, in the same order), without scipy's transpose-to-CSC, its CSC-to-CSR conversion and its generic
binary operation, a large part of the weights stage: the kernel transposes by a counting sort and merges
each row's two sorted lists, rows in parallel.
"""

from __future__ import annotations

import numba
import numpy as np

from eigenflow.spectral.neighbours.jit_cache import cached_njit

#: ``op`` codes of :func:`symmetrized_csr`
OPS = {"or": 0, "and": 1, "mean": 2}
#: weighting codes of :func:`directed_csr`
WEIGHTING_CODES = {"heat": 0, "local_scaling": 1, "hein_maier": 2, "binary": 3}


@cached_njit()
def _exponent(d, s_a, s_b, code, sigma2):  # pragma: no cover - compiled
    """The kernel exponent of a distance ``d`` between points of scales ``s_a`` and ``s_b``, computed as
    :func:`spectral.graph.weights._exponent` does with numpy (the same operations in the same order, so the same
    bits)."""
    if code == 3:
        return 0.0
    if code == 0:
        denom = sigma2
    elif code == 1:
        denom = s_b * s_a
    else:
        denom = max(s_b, s_a)
        denom = denom * denom
    d = np.float64(d)
    return -((d * d) / denom)


@cached_njit(parallel=True)
def _exponents(idx, dist, row_scales, scales, code, sigma2):  # pragma: no cover - compiled
    """Kernel exponents (m, k) float64 of the rows (:func:`_exponent`)."""
    m, k = idx.shape
    out = np.empty((m, k), dtype=np.float64)
    for r in numba.prange(m):
        for j in range(k):
            out[r, j] = _exponent(dist[r, j], row_scales[r], scales[idx[r, j]], code, sigma2)
    return out


@cached_njit(parallel=True)
def _sorted_exponent_rows(idx, dist, row_scales, scales, code, sigma2, out_idx, out_val):  # pragma: no cover
    """Each row's columns sorted (stable insertion sort, as :func:`_row_sorted_csr`) with their kernel exponents
    (:func:`_exponent`), written from ``out_idx[r * k]`` / ``out_val[r * k]``: the CSR arrays of
    the directed exponents when no row repeats a column. Returns the number of repeated columns (0: the result
    is complete; else the caller adds the repeats with :func:`_row_sorted_csr`). No (m, k) temporary."""
    m, k = idx.shape
    repeats = 0
    for r in numba.prange(m):
        cols = np.empty(k, dtype=np.int64)
        vals = np.empty(k, dtype=np.float64)
        for j in range(k):
            c = idx[r, j]
            v = _exponent(dist[r, j], row_scales[r], scales[c], code, sigma2)
            b = j - 1  # insertion into the sorted prefix
            while b >= 0 and cols[b] > c:
                cols[b + 1], vals[b + 1] = cols[b], vals[b]
                b -= 1
            cols[b + 1], vals[b + 1] = c, v
        base = r * k
        for a in range(k):
            out_idx[base + a] = cols[a]
            out_val[base + a] = vals[a]
            if a > 0 and cols[a] == cols[a - 1]:
                repeats += 1
    return repeats


@cached_njit(parallel=True)
def _row_sorted_csr(idx, values, out_ptr, out_idx, out_val, count_only):  # pragma: no cover - compiled
    """Each row's (column, value) pairs sorted by column, repeated columns added (stable: in candidate order).
    With ``count_only`` the rows' lengths go to ``out_ptr[r + 1]``, else the entries from ``out_ptr[r]``."""
    m, k = idx.shape
    for r in numba.prange(m):
        cols = idx[r].copy()
        vals = values[r].copy()
        for a in range(1, k):  # insertion sort: k is small
            c, v = cols[a], vals[a]
            b = a - 1
            while b >= 0 and cols[b] > c:
                cols[b + 1], vals[b + 1] = cols[b], vals[b]
                b -= 1
            cols[b + 1], vals[b + 1] = c, v
        w = 0 if count_only else out_ptr[r]
        count = 0
        for a in range(k):
            if count > 0 and cols[a] == cols[a - 1]:
                if not count_only:
                    out_val[w + count - 1] += vals[a]
                continue
            if not count_only:
                out_idx[w + count] = cols[a]
                out_val[w + count] = vals[a]
            count += 1
        if count_only:
            out_ptr[r + 1] = count


@cached_njit(parallel=True)
def _transpose(indptr, indices, data, n_cols, n_parts):  # pragma: no cover - compiled
    """CSR of the transpose, by a counting sort over the columns; rows of the result come out sorted.

    The rows are cut into ``n_parts`` ranges counted and scattered in parallel: each range writes its entries of
    a column after those of the ranges before it (a column's rows stay in increasing order)."""
    n_rows = indptr.shape[0] - 1
    bounds = np.linspace(0, n_rows, n_parts + 1).astype(np.int64)
    counts = np.zeros((n_parts, n_cols), dtype=np.int64)
    for t in numba.prange(n_parts):
        for p in range(indptr[bounds[t]], indptr[bounds[t + 1]]):
            counts[t, indices[p]] += 1
    t_ptr = np.zeros(n_cols + 1, dtype=np.int64)
    for c in range(n_cols):  # counts become each range's first position in column c
        start = t_ptr[c]
        for t in range(n_parts):
            here = counts[t, c]
            counts[t, c] = start
            start += here
        t_ptr[c + 1] = start
    t_idx = np.empty(indptr[n_rows], dtype=indices.dtype)
    t_val = np.empty(indptr[n_rows], dtype=data.dtype)
    for t in numba.prange(n_parts):
        fill = counts[t]
        for r in range(bounds[t], bounds[t + 1]):
            for p in range(indptr[r], indptr[r + 1]):
                c = indices[p]
                t_idx[fill[c]] = r
                t_val[fill[c]] = data[p]
                fill[c] += 1
    return t_ptr, t_idx, t_val


@cached_njit()
def _combine(a, b, op):  # pragma: no cover - compiled
    if op == 0:
        return a if a >= b else b
    if op == 1:
        return a if a <= b else b
    return (a + b) * 0.5


@cached_njit(parallel=True)
def _merge_rows(indptr, indices, data, t_ptr, t_idx, t_val, op, count_only, out_ptr, out_idx, out_val):
    # pragma: no cover - compiled
    """Row ``i`` of ``op(A, A^T)`` = the merge of A's row ``i`` and A^T's row ``i`` (both sorted, no repeats);
    an entry only one side has meets 0 on the other. The diagonal and zero results are left out. With
    ``count_only`` the rows' lengths go to ``out_ptr[i + 1]``, else the entries to ``out_idx`` / ``out_val`` from
    ``out_ptr[i]``."""
    n = indptr.shape[0] - 1
    for i in numba.prange(n):
        p, p_end = indptr[i], indptr[i + 1]
        q, q_end = t_ptr[i], t_ptr[i + 1]
        w = 0 if count_only else out_ptr[i]
        count = 0
        while p < p_end or q < q_end:
            if q >= q_end or (p < p_end and indices[p] < t_idx[q]):
                col, value = indices[p], _combine(data[p], 0.0, op)
                p += 1
            elif p >= p_end or t_idx[q] < indices[p]:
                col, value = t_idx[q], _combine(0.0, t_val[q], op)
                q += 1
            else:
                col, value = indices[p], _combine(data[p], t_val[q], op)
                p += 1
                q += 1
            if col == i or value == 0.0:
                continue
            if not count_only:
                out_idx[w + count] = col
                out_val[w + count] = value
            count += 1
        if count_only:
            out_ptr[i + 1] = count


def directed_csr(idx: np.ndarray, dist: np.ndarray, row_scales: np.ndarray, scales: np.ndarray, weighting: str,
                 sigma: float | None, index_dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr (m + 1,), indices (nnz,), data (nnz,) float64)`` of the directed weight rows of the points with
    neighbours ``idx`` (m, k) int at distances ``dist`` (m, k) and scales ``row_scales`` (m,); ``scales`` (n,) of
    every point (:func:`spectral.graph.weights.directed_weight_rows`). Index arrays of ``index_dtype``."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    dist = np.asarray(dist)
    dist = np.ascontiguousarray(dist, dtype=dist.dtype if dist.dtype in (np.float32, np.float64) else np.float64)
    kernel_args = (idx, dist, np.ascontiguousarray(row_scales, dtype=np.float64),
                   np.ascontiguousarray(scales, dtype=np.float64), WEIGHTING_CODES[weighting],
                   float(sigma) ** 2 if sigma is not None else 1.0)
    m, k = idx.shape
    indices = np.empty(m * k, dtype=index_dtype)
    data = np.empty(m * k, dtype=np.float64)
    if _sorted_exponent_rows(*kernel_args, indices, data) == 0:  # no row repeats a column: one pass
        np.exp(data, out=data)  # numpy's exp (its bits differ from numba's libm exp in the last place)
        return np.arange(0, m * k + 1, k, dtype=index_dtype), indices, data
    del indices, data
    values = _exponents(idx, dist.astype(np.float64, copy=False), *kernel_args[2:])  # one dtype for this rare path
    np.exp(values, out=values)
    indptr = np.zeros(m + 1, dtype=np.int64)
    no_i, no_v = np.empty(0, dtype=index_dtype), np.empty(0, dtype=np.float64)
    _row_sorted_csr(idx, values, indptr, no_i, no_v, True)
    np.cumsum(indptr, out=indptr)
    indices = np.empty(indptr[-1], dtype=index_dtype)
    data = np.empty(indptr[-1], dtype=np.float64)
    _row_sorted_csr(idx, values, indptr, indices, data, False)
    return indptr.astype(index_dtype, copy=False), indices, data


def symmetrized_csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n: int, symmetrize: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr (n + 1,), indices (nnz,), data (nnz,) float64)`` of ``op(A, A^T)`` for the square CSR matrix A
    ``(n, n)`` given by ``indptr`` / ``indices`` / ``data``, whose rows hold sorted, distinct columns (scipy's
    canonical format): ``"or"`` max, ``"and"`` min, ``"mean"`` the mean (a missing entry counts as 0), without
    the diagonal and without zeros, each row's columns sorted. The index arrays keep the dtype of ``indices``
    (int32 or int64; int64 when the result's entries would not fit in int32)."""
    wide = indices.dtype == np.int64 or 2 * (int(indptr[-1]) + 1) >= 2**31 or n >= 2**31 - 1
    indices = np.ascontiguousarray(indices, dtype=np.int64 if wide else np.int32)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    data = np.ascontiguousarray(data, dtype=np.float64)
    op = OPS[symmetrize]
    t_ptr, t_idx, t_val = _transpose(indptr, indices, data, n, max(1, numba.get_num_threads()))
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    empty_i, empty_v = np.empty(0, dtype=indices.dtype), np.empty(0, dtype=np.float64)
    _merge_rows(indptr, indices, data, t_ptr, t_idx, t_val, op, True, out_ptr, empty_i, empty_v)
    np.cumsum(out_ptr, out=out_ptr)
    out_idx = np.empty(out_ptr[-1], dtype=indices.dtype)
    out_val = np.empty(out_ptr[-1], dtype=np.float64)
    del empty_i, empty_v
    _merge_rows(indptr, indices, data, t_ptr, t_idx, t_val, op, False, out_ptr, out_idx, out_val)
    del t_ptr, t_idx, t_val
    return out_ptr.astype(indices.dtype, copy=False), out_idx, out_val
