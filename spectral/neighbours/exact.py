"""Exact k nearest neighbours (``method="exact"`` of :mod:`.knn`): a pruned leaf scan in float32, certified in float64.

The result is defined by the refinement's float64 distances (:mod:`._refine`, computed from the coordinates):
the ``k`` neighbours of a point are the first ``k`` of all other training points sorted by (distance, index), i.e.
equal distances resolve to the smaller training index, in the selection at the k-th place as in the order
within the row. That is scikit-learn's brute force in float64 followed by the refinement, for candidate lists
that hold every point tied at the k-th distance, listed in index order (``tests/spectral/test_knn.py``).

How (:mod:`._exact_search` has the compiled kernels):

1. The training points are cut into leaves of at most :data:`LEAF_SIZE` rows by recursive median splits along an
   approximate principal direction (:func:`partition`); each leaf has a centre and a radius.
2. Each block of nearby queries scans the leaves nearest first and skips, per query, every leaf whose lower bound
   ``|q - c| - rho`` exceeds its current ``kk``-th distance (``kk = k + EXTRA_CANDIDATES``); the distances are
   computed in float32 on leaf-centred coordinates (euclidean: one BLAS ``sgemm`` per leaf and block).
3. The ``kk`` candidates are refined (float64 distances, stable sort; equal distances then put in index order)
   and each row is certified (:func:`certified`): its k-th refined distance must lie strictly below a lower
   bound of the refined distance of every point it did not list, from the rounding-error bound of step 2. A row
   that is not certified (a tie or a near-tie at the k-th place) is searched again with twice as many
   candidates, until certified or listing every eligible point.

Equal rows (byte for byte) are at the same refined distance from everything: a training graph searches each
distinct row once, for its ``k + 1`` nearest points (itself included), and the rows equal to it take that list
without themselves; only the first ``k + 1`` (graph) or ``k`` (query) rows of a group of equal training rows can
be neighbours, so the others are never candidates. A group of 10^4 copies costs one search, not 10^4 searches
with 10^4 tied candidates each. Equal query rows are searched once.

Metrics: euclidean and manhattan directly; cosine as euclidean on rows scaled to unit length in ``d + 1``
dimensions, all-zero rows mapped to the extra axis (so they are at cosine distance 0 from each other and 1 from
the others, as in the refinement).

Memory beyond X and the result (``n * k * 12`` bytes): the leaf-ordered float32 copy (``n * d * 4`` bytes, plus
``n * 4``), a float64 copy of X while the index is built when X is float32 or the metric is cosine, 24 bytes per
row for the equal-row check, the graph's ``(n, k + 1)`` lists before the rows drop themselves (``n * (k + 1) * 12``
bytes) and per chunk of :data:`CHUNK_ROWS` queries about ``CHUNK_ROWS * kk * 28`` bytes (18 MB at kk = 20).
Measured peaks in benchmarks/results/knn_exact.md.
"""

from __future__ import annotations

import contextlib

import numpy as np

from eigenflow.spectral._arrays import row_bytes, row_hashes
from eigenflow.spectral.neighbours import _exact_search
from eigenflow.spectral.neighbours._refine import METRIC_CODES, _refine_rows

#: Rows per leaf of the training points and per block of queries (the float32 products are (block, leaf) tiles).
#: Smaller leaves prune more, larger ones make longer BLAS tiles; of the sizes 64 to 512, 256 is at or near the
#: fastest on every data set of ``benchmarks/results/knn_exact.md`` ("Design choices").
LEAF_SIZE = 256

#: Candidates searched beyond k: the margin that lets the k-th distance be certified at the first pass. With
#: fewer, some rows fail the certification and are searched again; more cost time for nothing
#: (``benchmarks/results/knn_exact.md``, "Design choices").
EXTRA_CANDIDATES = 4

#: Queries per chunk: bounds the per-chunk candidate arrays (``CHUNK_ROWS * kk`` entries).
CHUNK_ROWS = 32_768

#: Rows per chunk of a second pass are ``CANDIDATE_BUDGET // kk``: a row with a large tie group (``kk`` up to n)
#: never holds more than ~40 bytes * this much memory at once.
CANDIDATE_BUDGET = 1 << 22

#: Rows sampled per tree node to estimate its principal direction (the split itself uses every row).
_DIRECTION_SAMPLE = 512

_U32 = 2.0**-24
_U64 = 2.0**-53


class ExactIndex:
    """The leaves of the training points of an exact search (the training points themselves are not held).

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    metric : {"euclidean", "manhattan", "cosine"}
    leaf_size : int or None
        Rows per leaf and per block of queries; None is :data:`LEAF_SIZE`.
    n_jobs : int or None
        Threads of the construction's kernels (None: numba's thread count).
    """

    def __init__(self, X: np.ndarray, metric: str, leaf_size: int | None = None, n_jobs: int | None = None):
        self.metric = metric
        self.leaf_size = LEAF_SIZE if leaf_size is None else leaf_size
        P = search_coordinates(X, metric)
        with _threads(n_jobs):
            self.perm, self.starts = partition(P, self.leaf_size)
            self.centers, self.radii = _exact_search.leaf_statistics(P, self.perm, self.starts, self._code)
        groups = duplicate_groups(X)
        #: (n,) int64 in the leaf order: how many equal rows precede each row in X; (0,) when all rows differ
        self.rank = np.empty(0, dtype=np.int64) if groups is None else groups[1][self.perm]
        self._groups = [groups]  # for the first graph() only (then dropped): no second hashing pass over X
        self._points = None

    @property
    def _code(self) -> int:
        return 1 if self.metric == "manhattan" else 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_points": None, "_groups": []}  # prepare rebuilds the float32 copy from X

    def prepare(self, X: np.ndarray) -> None:
        """Build the leaf-ordered float32 copy of the training points ``X`` (n, d) the scan reads (kept)."""
        if self._points is None:
            self._points = self._float32_points(X)

    def release(self) -> None:
        """Drop the float32 copy (:meth:`prepare` builds it again)."""
        self._points = None

    def _float32_points(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = X.shape[0]
        sizes = np.diff(self.starts)
        d = self.centers.shape[1]
        euclid = self._code == 0
        X32 = np.empty((n if euclid else 0, d), dtype=np.float32)
        XB = np.empty(0 if euclid else n * d, dtype=np.float32)
        norms = np.empty(n if euclid else 0, dtype=np.float32)
        for b0, b1 in _leaf_chunks(self.starts, CHUNK_ROWS):
            s, e = self.starts[b0], self.starts[b1]
            rows = search_coordinates(X[self.perm[s:e]], self.metric) - np.repeat(self.centers[b0:b1],
                                                                                    sizes[b0:b1], axis=0)
            rows32 = rows.astype(np.float32)
            if euclid:
                X32[s:e] = rows32
                norms[s:e] = np.einsum("ij,ij->i", rows32.astype(np.float64), rows32.astype(np.float64))
            else:
                for b in range(b0, b1):
                    lo, hi = self.starts[b] - s, self.starts[b + 1] - s
                    XB[self.starts[b] * d: self.starts[b + 1] * d] = rows32[lo:hi].T.ravel()
        return X32, XB, norms

    def _eligible(self, cap: int) -> int:
        """Training rows that may be candidates when at most ``cap`` equal rows count."""
        return self.perm.size if self.rank.size == 0 else int(np.count_nonzero(self.rank < cap))

    def graph(self, X: np.ndarray, k: int, n_jobs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest other training points of each row of the training points ``X`` (n, d), on ``n_jobs``
        threads (None: numba's thread count).

        Each distinct row is searched once for its ``k + 1`` nearest training points (itself included); every
        row equal to it takes that list without itself (without the last entry when it is not listed). Equal
        rows are at the same refined distance from everything, so only the first ``k + 1`` of a group of equal
        rows can be among anyone's ``k + 1`` nearest: the others are never candidates.

        Returns ``(indices int64 (n, k), distances float32 (n, k))``, sorted by (distance, index).
        """
        X = np.ascontiguousarray(X)
        n = X.shape[0]
        groups = self._groups.pop() if self._groups else duplicate_groups(X)
        first = np.arange(n) if groups is None else groups[0]
        distinct = first[self.perm] == self.perm
        queries = self.perm[distinct]  # in the leaf order
        leaf = np.repeat(np.arange(self.starts.size - 1), np.diff(self.starts))[distinct]
        blocks = np.append(np.flatnonzero(np.diff(leaf, prepend=-1)), queries.size)
        kept = self._points is not None
        self.prepare(X)
        try:
            found, dist = self._search(X, X, queries, blocks, k + 1, self._eligible(k + 1), n_jobs)
        finally:
            if not kept:
                self.release()
        slot = np.empty(n, dtype=np.int64)
        slot[queries] = np.arange(queries.size)
        found, dist = found[slot[first]], dist[slot[first]]  # (n, k + 1): each row takes its group's list
        own = found == np.arange(n)[:, None]
        keep = np.ones(found.shape, dtype=bool)
        keep[np.arange(n), np.where(own.any(axis=1), own.argmax(axis=1), k)] = False
        return found[keep].reshape(n, k), dist[keep].reshape(n, k)

    def query(self, X: np.ndarray, Q: np.ndarray, k: int, n_jobs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest training points (of ``X`` (n, d)) of each row of ``Q`` (m, d), ``k <= n``, on ``n_jobs``
        threads; builds the float32 copy first if needed (:meth:`prepare`). Equal query rows are searched once.

        Returns ``(indices int64 (m, k), distances float32 (m, k))``, sorted by (distance, index).
        """
        X, Q = np.ascontiguousarray(X), np.ascontiguousarray(Q)
        self.prepare(X)
        groups = duplicate_groups(Q)
        first = None if groups is None else groups[0]
        distinct = np.arange(Q.shape[0]) if first is None else np.flatnonzero(first == np.arange(Q.shape[0]))
        with _threads(n_jobs):
            order, qstarts = partition(search_coordinates(Q[distinct], self.metric), self.leaf_size)
        queries = distinct[order]
        found, dist = self._search(X, Q, queries, qstarts, k, self._eligible(k), n_jobs)
        slot = np.empty(Q.shape[0], dtype=np.int64)
        slot[queries] = np.arange(queries.size)
        if first is not None:
            slot = slot[first]
        return found[slot], dist[slot]

    def _search(self, X, source, rows, qstarts, k, eligible, n_jobs):
        """Certified ``k`` nearest training points of the query rows ``source[rows]`` (m, d), given in blocks of
        nearby rows ``rows[qstarts[b]:qstarts[b + 1]]``, in chunks of about :data:`CHUNK_ROWS` rows (each gathered
        from ``source`` when searched)."""
        m = rows.size
        indices = np.empty((m, k), dtype=np.int64)
        distances = np.empty((m, k), dtype=np.float32)
        with _threads(n_jobs):
            for b0, b1 in _leaf_chunks(qstarts, CHUNK_ROWS):
                s, e = qstarts[b0], qstarts[b1]
                indices[s:e], distances[s:e] = self._solve(X, source[rows[s:e]], qstarts[b0:b1 + 1] - s, k,
                                                           eligible)
        return indices, distances

    def _solve(self, X, Q, qstarts, k, eligible):
        """:meth:`_search` of one chunk: a first pass with ``k + EXTRA_CANDIDATES`` candidates, then the rows that
        are not certified again with twice as many, until every row is certified."""
        m = Q.shape[0]
        P = search_coordinates(Q, self.metric)
        indices = np.empty((m, k), dtype=np.int64)
        distances = np.empty((m, k), dtype=np.float32)
        todo = np.arange(m)
        kk = min(k + EXTRA_CANDIDATES, eligible)
        while todo.size:
            failed = []
            step = todo.size if todo.size == m else max(1, CANDIDATE_BUDGET // kk)
            for lo in range(0, todo.size, step):
                rows = todo[lo:lo + step]
                blocks = qstarts if rows.size == m else _even_blocks(rows.size, self.leaf_size)
                found, dist, ok = self._pass(X, Q[rows], P[rows], blocks, k, kk, eligible)
                indices[rows[ok]], distances[rows[ok]] = found[ok], dist[ok]
                failed.append(rows[~ok])
            todo = np.concatenate(failed)
            kk = min(2 * kk, eligible)
        return indices, distances

    def _pass(self, X, Q, P, qstarts, k, kk, eligible):
        X32, XB, norms = self._points
        with _single_threaded_blas():
            cand, values, reach = _exact_search.search(X32, XB, norms, self.starts, self.centers, self.radii,
                                                       self.rank, k, np.ascontiguousarray(P),
                                                       np.asarray(qstarts, np.int64), kk, self._code)
        # in the scan's order (nearly sorted: the refinement's insertion sort has little to move), then equal
        # refined distances put in index order
        found, dist = _refine_rows(X, np.ascontiguousarray(Q), self.perm[cand], METRIC_CODES[self.metric])
        tied = np.flatnonzero((dist[:, 1:] == dist[:, :-1]).any(axis=1))
        if tied.size:
            order = np.lexsort((found[tied], dist[tied]))
            found[tied] = np.take_along_axis(found[tied], order, axis=1)
            dist[tied] = np.take_along_axis(dist[tied], order, axis=1)
        if kk == eligible:
            ok = np.ones(Q.shape[0], dtype=bool)
        else:
            ok = certified(dist[:, k - 1], values[:, -1].astype(np.float64), reach, self.metric, X.shape[1])
        return found[:, :k], dist[:, :k].astype(np.float32), ok


def certified(kth: np.ndarray, tau: np.ndarray, reach: np.ndarray, metric: str, d: int) -> np.ndarray:
    """Rows whose k nearest neighbours are proven: (m,) bool.

    Parameters
    ----------
    kth : float64 (m,)
        Refined distance of each row's k-th candidate (candidates sorted by (distance, index)).
    tau : float64 (m,)
        The scan's approximate value (squared for euclidean and cosine) of each row's last candidate: every
        point not listed had an approximate value >= ``tau`` or lay in a leaf whose lower bound exceeded it.
    reach : float64 (m,)
        ``max (|q - c| + rho)`` over the leaves the row scanned: the leaf-centred coordinates have norms at most
        that, so the float32 rounding of the scan is bounded through it.
    metric : str
    d : int
        Number of features.

    A row is certified when ``kth`` is strictly below a lower bound of the refined distance of every point not
    listed: no such point can come before the k-th, even on a tie (which the stable sort would resolve by index).
    Bounds: rounding the centred coordinates to float32 moves a distance by at most ``u32 * reach``; the float32
    ``|q|^2 + |x|^2 - 2 q.x`` errs by at most ``(d' + 6) u32 reach^2`` (``d'`` summed products, three roundings);
    manhattan's float32 sum by ``(d + 4) u32`` relative; the refinement by ``(d + 4) u64`` relative (euclidean,
    manhattan) or ``4 (d + 8) u64`` absolute (cosine, whose unit vectors are within ``(d + 4) u64`` of exact).
    """
    shift = 1.001 * _U32 * reach
    if metric == "manhattan":
        low = tau * (1.0 - (d + 4) * _U32) - shift
        return kth < low * (1.0 - (d + 4) * _U64)
    dims = d + 1 if metric == "cosine" else d
    low = np.sqrt(np.maximum(tau - 1.001 * (dims + 6) * _U32 * reach**2, 0.0)) - shift
    if metric == "euclidean":
        return kth < low * (1.0 - (d + 4) * _U64)
    low = np.maximum(low - 2.0 * (d + 4) * _U64, 0.0)
    return kth < 0.5 * low**2 - 4.0 * (d + 8) * _U64


def duplicate_groups(X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows equal byte for byte: ``(first (n,) int64, rank (n,) int64)``, ``first[i]`` the smallest index of a row
    equal to row ``i`` (``i`` itself when none is), ``rank[i]`` the number of equal rows before it; None when all
    rows differ. Rows are compared through 64-bit hashes, the ones whose hash repeats byte for byte."""
    n = X.shape[0]
    raw = row_bytes(X)
    hashes = row_hashes(raw)
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    repeated = sorted_hashes[1:] == sorted_hashes[:-1]
    if not repeated.any():
        return None
    rows = np.sort(order[np.isin(sorted_hashes, sorted_hashes[1:][repeated])])
    keys = np.ascontiguousarray(raw[rows]).view(np.dtype((np.void, raw.shape[1]))).ravel()
    _, first_of_key, group = np.unique(keys, return_index=True, return_inverse=True)
    group = group.ravel()
    first = np.arange(n, dtype=np.int64)
    first[rows] = rows[first_of_key][group]
    by_group = np.argsort(group, kind="stable")  # each group's rows in increasing index
    sorted_group = group[by_group]
    group_start = np.flatnonzero(np.diff(sorted_group, prepend=-1))
    sizes = np.diff(np.append(group_start, rows.size))
    rank = np.zeros(n, dtype=np.int64)
    rank[rows[by_group]] = np.arange(rows.size) - np.repeat(group_start, sizes)
    return (first, rank) if rank.any() else None


def search_coordinates(X: np.ndarray, metric: str) -> np.ndarray:
    """float64 coordinates the scan works on (m, d'): X itself (d' = d; not a copy when X is float64) for euclidean
    and manhattan, unit rows with an extra zero column for cosine (d' = d + 1; all-zero rows become the extra unit
    axis)."""
    if metric != "cosine":
        return np.asarray(X, dtype=np.float64)
    P = np.zeros((X.shape[0], X.shape[1] + 1))
    norms = np.sqrt(np.einsum("ij,ij->i", X.astype(np.float64), X.astype(np.float64)))
    nonzero = norms > 0
    P[nonzero, :-1] = X[nonzero] / norms[nonzero, None]
    P[~nonzero, -1] = 1.0
    return P


def partition(P: np.ndarray, leaf_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Leaves of the rows of ``P`` (n, d) float64: ``(order int64 (n,), starts int64 (L + 1,))``, leaf ``b`` being the
    rows ``order[starts[b]:starts[b + 1]]`` (``leaf_size / 2`` to ``leaf_size`` of them, or all n when fewer).

    Each node is split at the median of its rows' projections on an approximate principal direction (two power
    iterations from the axis of largest variance, on at most :data:`_DIRECTION_SAMPLE` evenly spaced rows;
    :func:`spectral.neighbours._exact_search.partition_rows`). Deterministic: no random draws.
    """
    return _exact_search.partition_rows(np.ascontiguousarray(P, dtype=np.float64), int(leaf_size), _DIRECTION_SAMPLE)


def _leaf_chunks(starts: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """Consecutive leaf ranges ``(b0, b1)`` of about ``rows`` rows each (at least one leaf)."""
    chunks, b0 = [], 0
    n_leaves = starts.size - 1
    while b0 < n_leaves:
        b1 = max(b0 + 1, int(np.searchsorted(starts, starts[b0] + rows, side="right")) - 1)
        b1 = min(b1, n_leaves)
        chunks.append((b0, b1))
        b0 = b1
    return chunks


def _even_blocks(m: int, size: int) -> np.ndarray:
    """Block boundaries (int64) cutting ``m`` consecutive rows into blocks of at most ``size``."""
    return np.append(np.arange(0, m, size), m).astype(np.int64)


@contextlib.contextmanager
def _threads(n_jobs: int | None):
    """numba's kernels on ``n_jobs`` threads within the block (None: as they are)."""
    import numba

    if n_jobs is None:
        yield
        return
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n_jobs), int(numba.config.NUMBA_NUM_THREADS))))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


@contextlib.contextmanager
def _single_threaded_blas():
    """BLAS on one thread while the kernel's own threads each call it (no oversubscription)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
