"""Compiled kernels of the exact kNN search (:mod:`.exact`): leaf statistics and the pruned leaf-by-leaf scan.

The training points are cut into leaves (contiguous row ranges of a leaf-ordered copy), each with a float64
centre ``c`` and radius ``rho`` (the largest distance of its points to ``c``). Queries are grouped into blocks of
nearby rows. A block scans the leaves in increasing order of the block-level lower bound
``|c_A - c_B| - r_A - rho_B``; each query skips a leaf when its own lower bound ``|q - c_B| - rho_B`` exceeds the
distance of its current ``kk``-th candidate, and the block stops when the next leaf is out of reach of all its
queries. Within a leaf the approximate distances are computed in float32 from coordinates centred on the leaf
(``x - c_B``, ``q - c_B``, rounded to float32): euclidean through a matrix product (BLAS ``sgemm``, squared
distances ``|q|^2 + |x|^2 - 2 q.x``), manhattan as a direct sum of ``|x_t - q_t|``.

Each query also returns ``s = max (|q - c_B| + rho_B)`` over the leaves it scanned: the float32 rounding error of
every approximate distance it saw is bounded through ``s`` (:func:`spectral.neighbours.exact.certified`).
"""

from __future__ import annotations

import numba
import numpy as np

from eigenflow.spectral.neighbours.jit_cache import cached_njit

#: float64 unit roundoff; the lower bounds allow ``4 (d + 4)`` of it relative to their terms
_U64 = 2.0**-53


@cached_njit()
def _distance64(a, b, metric):  # pragma: no cover - compiled
    """Euclidean (metric 0) or manhattan (1) distance of two float64 vectors."""
    s = 0.0
    if metric == 0:
        for t in range(a.size):
            diff = a[t] - b[t]
            s += diff * diff
        return np.sqrt(s)
    for t in range(a.size):
        s += abs(a[t] - b[t])
    return s


@cached_njit(parallel=True)
def leaf_statistics(P, order, starts, metric):  # pragma: no cover - compiled
    """Centres (mean, float64 (L, d)) and radii (float64 (L,)) of the leaves ``P[order[starts[b]:starts[b + 1]]]``."""
    n_leaves = starts.size - 1
    d = P.shape[1]
    centers = np.zeros((n_leaves, d))
    radii = np.zeros(n_leaves)
    for b in numba.prange(n_leaves):
        s, e = starts[b], starts[b + 1]
        for i in range(s, e):
            for t in range(d):
                centers[b, t] += P[order[i], t]
        for t in range(d):
            centers[b, t] /= e - s
        r = 0.0
        for i in range(s, e):
            r = max(r, _distance64(P[order[i]], centers[b], metric))
        radii[b] = r
    return centers, radii


@cached_njit()
def _block_leaf_order(Q, s, e, centers, radii, metric):  # pragma: no cover - compiled
    """Block-level lower bounds ``|c_A - c_B| - r_A - rho_B`` of the queries ``Q[s:e]`` to every leaf, the
    leaves in increasing order of it, and the block radius ``r_A``."""
    d = Q.shape[1]
    center = np.zeros(d)
    for i in range(s, e):
        for t in range(d):
            center[t] += Q[i, t]
    center /= e - s
    r_block = 0.0
    for i in range(s, e):
        r_block = max(r_block, _distance64(Q[i], center, metric))
    n_leaves = centers.shape[0]
    bound = np.empty(n_leaves)
    for b in range(n_leaves):
        bound[b] = _distance64(center, centers[b], metric) - r_block - radii[b]
    return bound, np.argsort(bound), r_block


@cached_njit()
def _sift_down(values, indices, size, v, j):  # pragma: no cover - compiled
    """Put ``(v, j)`` at the root of the max-heap ``values[:size]`` (with ``indices``) and restore the heap."""
    p = 0
    while True:
        c = 2 * p + 1
        if c >= size:
            break
        if c + 1 < size and values[c + 1] > values[c]:
            c += 1
        if values[c] <= v:
            break
        values[p] = values[c]
        indices[p] = indices[c]
        p = c
    values[p] = v
    indices[p] = j


@cached_njit()
def _heap_sort(values, indices):  # pragma: no cover - compiled
    """Sort a max-heap in place into increasing values."""
    for end in range(values.size - 1, 0, -1):
        v, j = values[end], indices[end]
        values[end], indices[end] = values[0], indices[0]
        _sift_down(values, indices, end, v, j)


@cached_njit(parallel=True)
def search(X32, XB, norms, starts, centers, radii, rank, cap, Q, qstarts, kk, metric):  # pragma: no cover
    """``kk`` approximate nearest leaf-ordered training rows of every query row.

    Parameters
    ----------
    X32 : float32 (n, d)
        Leaf-ordered training points centred on their leaf (euclidean; (0, d) for manhattan).
    XB : float32 (n * d,)
        The same for manhattan, each leaf stored coordinate-major (its ``d`` rows of length ``L_b``); (0,) for
        euclidean.
    norms : float32 (n,)
        ``|x - c_B|^2`` of each row of ``X32`` (euclidean).
    starts : int64 (L + 1,)
        Leaf boundaries in the leaf order; ``centers`` float64 (L, d), ``radii`` float64 (L,).
    rank : int64 (n,) or (0,)
        Of each leaf-ordered row, how many equal rows come before it in the training order; rows with
        ``rank >= cap`` are never candidates. (0,): no repeated rows.
    Q : float64 (m, d)
        Queries, grouped into blocks ``Q[qstarts[b]:qstarts[b + 1]]`` of nearby rows.
    kk : int
        Candidates per query, at most the number of eligible rows.
    metric : int
        0 euclidean, 1 manhattan.

    Returns
    -------
    candidates : int64 (m, kk)
        Leaf-order positions, sorted by approximate distance.
    values : float32 (m, kk)
        Their approximate squared euclidean or manhattan distances.
    reach : float64 (m,)
        ``max (|q - c_B| + rho_B)`` over the leaves the query scanned.
    """
    d = Q.shape[1]
    m = Q.shape[0]
    n_blocks = qstarts.size - 1
    out_i = np.empty((m, kk), dtype=np.int64)
    out_v = np.empty((m, kk), dtype=np.float32)
    out_s = np.zeros(m)
    widest = 0
    for b in range(starts.size - 1):
        widest = max(widest, starts[b + 1] - starts[b])
    slack = 4.0 * (d + 4) * _U64
    two = np.float32(2.0)
    capped = rank.size > 0
    for blk in numba.prange(n_blocks):
        s, e = qstarts[blk], qstarts[blk + 1]
        mb = e - s
        bound, order, r_block = _block_leaf_order(Q, s, e, centers, radii, metric)
        heap_v = np.full((mb, kk), np.inf, dtype=np.float32)  # max-heaps: the root is the kk-th candidate
        heap_i = np.full((mb, kk), -1, dtype=np.int64)
        reach = np.full(mb, np.inf)  # the root as a distance
        far = np.zeros(mb)
        active = np.empty(mb, dtype=np.int64)
        Qa = np.empty((mb, d), dtype=np.float32)
        qnorm = np.empty(mb, dtype=np.float32)
        row = np.empty(widest, dtype=np.float32)
        G = np.empty((1, 1), dtype=np.float32)
        top = np.inf
        for o in range(order.size):
            leaf = order[o]
            lb = bound[leaf]
            if lb - slack * (abs(lb) + 2.0 * (r_block + radii[leaf])) > top:
                break
            ls, le = starts[leaf], starts[leaf + 1]
            size = le - ls
            na = 0
            for qi in range(mb):
                qc = _distance64(Q[s + qi], centers[leaf], metric)
                if qc - radii[leaf] - slack * (qc + radii[leaf]) > reach[qi]:
                    continue
                active[na] = qi
                sq = 0.0
                for t in range(d):
                    v32 = np.float32(Q[s + qi, t] - centers[leaf, t])
                    Qa[na, t] = v32
                    sq += np.float64(v32) * np.float64(v32)
                qnorm[na] = np.float32(sq)
                far[qi] = max(far[qi], qc + radii[leaf])
                na += 1
            if na == 0:
                continue
            if metric == 0:
                G = np.dot(Qa[:na], X32[ls:le].T)
            for a in range(na):
                qi = active[a]
                tq = heap_v[qi, 0]
                below = 0
                if metric == 0:
                    xn = norms[ls:le]
                    for j in range(size):
                        v = qnorm[a] + xn[j] - two * G[a, j]
                        row[j] = v
                        below += v < tq
                else:
                    for j in range(size):
                        row[j] = 0.0
                    for t in range(d):
                        qt = Qa[a, t]
                        xr = XB[ls * d + t * size: ls * d + (t + 1) * size]
                        for j in range(size):
                            row[j] += abs(xr[j] - qt)
                    for j in range(size):
                        below += row[j] < tq
                if below == 0:
                    continue
                hv, hi = heap_v[qi], heap_i[qi]
                for j in range(size):
                    v = row[j]
                    if v < hv[0] and not (capped and rank[ls + j] >= cap):
                        _sift_down(hv, hi, kk, v, ls + j)
                tq = hv[0]
                reach[qi] = np.sqrt(max(np.float64(tq), 0.0)) if metric == 0 else np.float64(tq)
            top = 0.0
            for qi in range(mb):
                top = max(top, reach[qi])
        for qi in range(mb):
            _heap_sort(heap_v[qi], heap_i[qi])
            for j in range(kk):
                out_i[s + qi, j] = heap_i[qi, j]
                out_v[s + qi, j] = heap_v[qi, j]
            out_s[s + qi] = far[qi]
    return out_i, out_v, out_s


@cached_njit()
def _principal_direction(P, rows, sample):  # pragma: no cover - compiled
    """Approximate principal direction (unit, float64 (d,)) of the points ``P[rows]``: two power iterations from
    the axis of largest variance, on ``sample`` evenly spaced rows at most."""
    d = P.shape[1]
    step = max(1, rows.size // sample)
    picked = rows[::step]
    m = picked.size
    S = np.empty((m, d))
    for i in range(m):
        for t in range(d):
            S[i, t] = P[picked[i], t]
    mean = np.zeros(d)
    for i in range(m):
        for t in range(d):
            mean[t] += S[i, t]
    mean /= m
    var = np.zeros(d)
    for i in range(m):
        for t in range(d):
            S[i, t] -= mean[t]
            var[t] += S[i, t] * S[i, t]
    direction = np.zeros(d)
    direction[np.argmax(var)] = 1.0
    scores = np.empty(m)
    for _ in range(2):
        for i in range(m):
            acc = 0.0
            for t in range(d):
                acc += S[i, t] * direction[t]
            scores[i] = acc
        v = np.zeros(d)
        for i in range(m):
            for t in range(d):
                v[t] += S[i, t] * scores[i]
        norm = np.sqrt(np.sum(v * v))
        if not norm > 0.0:
            break
        direction = v / norm
    return direction


@cached_njit(parallel=True)
def partition_rows(P, leaf_size, sample):  # pragma: no cover - compiled
    """Leaves of the rows of ``P`` (n, d) by recursive median splits along approximate principal directions,
    level by level (the nodes of a level in parallel): ``(order int64 (n,), starts int64 (L + 1,))``.

    A node of more than ``leaf_size`` rows is split at the median of its projections: the rows below it go
    left, those above right, equal ones fill the left half first in their current order (deterministic).
    """
    n, d = P.shape
    order = np.arange(n)
    proj = np.empty(n)
    scratch = np.empty(n, dtype=np.int64)
    bounds = np.array([0, n], dtype=np.int64)
    while True:
        nodes = bounds.size - 1
        split = np.full(nodes, -1, dtype=np.int64)
        for b in numba.prange(nodes):
            s, e = bounds[b], bounds[b + 1]
            if e - s <= leaf_size:
                continue
            direction = _principal_direction(P, order[s:e], sample)
            for i in range(s, e):
                acc = 0.0
                for t in range(d):
                    acc += P[order[i], t] * direction[t]
                proj[i] = acc
            half = (e - s) // 2
            median = np.partition(proj[s:e].copy(), half)[half]
            below = 0
            for i in range(s, e):
                below += proj[i] < median
            left, right, equal_left = s, s + half, half - below
            for i in range(s, e):
                if proj[i] < median or (proj[i] == median and equal_left > 0):
                    if proj[i] == median:
                        equal_left -= 1
                    scratch[left] = order[i]
                    left += 1
                else:
                    scratch[right] = order[i]
                    right += 1
            for i in range(s, e):
                order[i] = scratch[i]
            split[b] = s + half
        extra = 0
        for b in range(nodes):
            extra += split[b] >= 0
        if extra == 0:
            return order, bounds
        new = np.empty(bounds.size + extra, dtype=np.int64)
        j = 0
        for b in range(nodes):
            new[j] = bounds[b]
            j += 1
            if split[b] >= 0:
                new[j] = split[b]
                j += 1
        new[j] = n
        bounds = new
