"""The kNN index: exact (:mod:`.exact`) and approximate (pynndescent) search behind one contract.

Contract (ARCHITECTURE.md): ``(indices int64 (n, k), distances float32 (n, k))``, rows sorted by increasing
distance, no self-neighbours (:func:`spectral.neighbours.knn.knn_graph`, the front door, builds its graphs
here or on the shards of :mod:`.sharded`). :class:`KNNIndex` builds the index once and answers
``.query(X_new, k)`` for new points with the same contract (a training point identical to a query point is
returned at distance 0: queries are not training points, nothing is dropped).

Both methods finish with the same refinement step: the distances of the selected neighbours are recomputed
in float64 directly from the coordinates (``||x - x_i||``, not the ``|x|^2 - 2 x.y + |y|^2`` expansion of
brute force), then each row is re-sorted (stable). So identical points are at distance exactly 0, the graph
distances are exactly symmetric (``d(i, j) == d(j, i)``) and both methods return bitwise-identical distances
for the same neighbour pairs. The exact method's neighbours are the first k by (refined distance, index) among
all training points (:mod:`.exact`): ties at the k-th place go to the smaller index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_array_2d, check_choice, check_int, check_random_state, seed_int
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours._refine import drop_self as _drop_self, refine as _refine
from eigenflow.spectral.neighbours.exact import ExactIndex
from eigenflow.spectral.neighbours.jit_cache import compile_report
from eigenflow.spectral.neighbours.method_choice import (  # noqa: F401 - the two bounds re-exported here
    EXACT_MAX_CELLS, EXACT_MAX_SAMPLES, auto_method)

METHODS = ("auto", "exact", "nndescent")
METRICS = ("euclidean", "manhattan", "cosine")
#: metrics whose NN-descent queries search in parallel (:func:`_build_nndescent`)
PARALLEL_QUERY_METRICS = ("euclidean", "cosine")

#: NN-descent query breadth (pynndescent's ``epsilon``; its default 0.1 searches too narrow a front for a high
#: query recall at small k). Queries also ask for at least the index's own k + 1 neighbours and keep the
#: first k: a wider search front, the same contract.
NNDESCENT_QUERY_EPSILON = 0.2

#: Largest absolute coordinate the search accepts. Both methods compare squared distances in float32, whose range
#: ends at 3.4e38: beyond this bound the squares overflow for any realistic number of columns (up to 8e7), and the
#: graph would be corrupt (inf distances, self-neighbours). Data that large is refused, naming its magnitude.
MAX_ABS_COORDINATE = 1e15

#: dtypes :class:`KNNIndex` indexes as given (others are converted to the first)
TRAINING_DTYPES = (np.float64, np.float32)

#: Query rows converted at a time by an NN-descent :meth:`KNNIndex.query` (float32 for pynndescent, float64 for
#: the refinement): its temporaries stay ``QUERY_BLOCK_ROWS * d * 12`` bytes (48 MB at d = 1024), where converting
#: all of ``X_new`` at once would copy it in three times its float32 size, so a sharded search task's memory stays
#: within its worker's limit. pynndescent starts each call from a copy of the index's random state, which only
#: tie-breaks and leaves smaller than k draw from, so the blocks give the answers of one call.
QUERY_BLOCK_ROWS = 4096


class KNNIndex:
    """A kNN index over training points, built once and queried for new points.

    Build with :meth:`build`; :meth:`neighbor_graph` gives the training graph (no self-neighbours) and
    :meth:`query` the ``k`` nearest training points of new points. The object pickles (for in-memory
    transport to Dask workers; an NN-descent index of ``n`` points takes about ``n * (d + 3 k) * 4``
    bytes), but it is never persisted: a stored model keeps :attr:`params` (JSON-able) and the training X is
    in the store, so :meth:`rebuild` recreates the index. Rebuilding costs one index construction and its graph
    (``benchmarks/results/knn_exact.md`` times both methods). With the same ``random_state`` and ``n_jobs=1``,
    the rebuilt NN-descent index is the same.
    """

    def __init__(self, X, method, metric, n_neighbors, seed, n_jobs, index, graph):
        self._X = X  # None once NN-descent's prepared index holds the only copy (:meth:`prepare`)
        self._position = None  # then (n,): row i of X is row _position[i] of the index's reordered points
        self._shape = X.shape
        self.method = method
        self.metric = metric
        self.n_neighbors = n_neighbors
        self.seed = seed
        self.n_jobs = n_jobs
        self._index = index
        self._graph = graph

    @classmethod
    def build(
        cls,
        X: Any,
        n_neighbors: int,
        *,
        method: str = "auto",
        metric: str = "euclidean",
        random_state: Any = None,
        n_jobs: int | None = None,
    ) -> KNNIndex:
        """Build the index of ``X`` (n, d) and its kNN graph; parameters as :func:`knn_graph`.

        A float32 ``X`` is indexed as it is (both methods search in float32 anyway; the refinement computes in
        float64 from the float32 coordinates): a conversion to float64 would cost a pass over X and leave a copy
        of twice its size in the index. Any other dtype is converted to float64.
        """
        X = check_search_range(check_array_2d(X, "X", min_rows=2, dtype=TRAINING_DTYPES), "X")
        n = X.shape[0]
        n_neighbors = check_int("n_neighbors", n_neighbors, low=1, high=n - 1)
        method = check_choice("method", method, METHODS)
        metric = check_choice("metric", metric, METRICS)
        if n_jobs is not None:
            n_jobs = check_int("n_jobs", n_jobs, low=1, high=_max_threads())
        seed = seed_int(check_random_state(random_state))
        with compile_report("the kNN search"):  # numba's first-ever compile on a machine is announced, not hidden
            return cls._build(X, n_neighbors, method, metric, seed, n_jobs)

    @classmethod
    def _build(cls, X, n_neighbors, method, metric, seed, n_jobs) -> KNNIndex:
        n = X.shape[0]
        if method == "auto":
            method = auto_method(n, X.shape[1])
        if method == "exact":
            index = ExactIndex(X, metric, n_jobs=n_jobs)
            return cls(X, method, metric, n_neighbors, seed, n_jobs, index, index.graph(X, n_neighbors, n_jobs))
        else:
            index, raw = _build_nndescent(X, metric, n_neighbors + 1, seed, n_jobs)
        indices = _drop_self(raw, n_neighbors)
        graph = _refine(X, X, indices, metric)
        return cls(X, method, metric, n_neighbors, seed, n_jobs, index, graph)

    @classmethod
    def rebuild(cls, X: Any, params: dict) -> KNNIndex:
        """Recreate an index from the training ``X`` and the :attr:`params` of the original index."""
        X = check_array_2d(X, "X", min_rows=2, dtype=TRAINING_DTYPES)
        k = check_int("n_neighbors", params["n_neighbors"], low=1, high=X.shape[0] - 1)
        method = check_choice("method", params["method"], METHODS[1:])
        metric = check_choice("metric", params["metric"], METRICS)
        seed = check_int("seed", params["seed"], low=0)
        n_jobs = params.get("n_jobs")
        n_jobs = None if n_jobs is None else check_int("n_jobs", n_jobs, low=1)
        with compile_report("the kNN search"):
            return cls._build(X, k, method, metric, seed, n_jobs)

    @property
    def params(self) -> dict:
        """JSON-able parameters that :meth:`rebuild` needs (method is the resolved one, never "auto")."""
        return {
            "n_neighbors": self.n_neighbors,
            "method": self.method,
            "metric": self.metric,
            "seed": self.seed,
            "n_jobs": self.n_jobs,
        }

    @property
    def training_points(self) -> np.ndarray:
        """The indexed training points (n, d): float64, or float32 for float32 data (read-only view; what
        :meth:`rebuild` needs)."""
        if self._X is None:  # the prepared index's reordered copy, put back in X's order (a copy)
            points = self._index._raw_data[self._position]
        else:
            points = self._X.view()
        points.flags.writeable = False
        return points

    @property
    def n_samples(self) -> int:
        """Number of training points."""
        return self._shape[0]

    def __sizeof__(self) -> int:
        """Bytes of the arrays this index holds, its NN-descent or scikit-learn index's included: what Dask's
        ``sizeof`` reads when it weighs moving the index to another worker. Without it an index counts as a few
        bytes, and the scheduler would move whole shard indexes to the workers of small query tasks as if they
        cost nothing, doubling those workers' memory."""
        return object.__sizeof__(self) + _array_bytes((self._X, self._position, self._graph, self._index), set(), 4)

    def prepare(self) -> KNNIndex:
        """Build the query structures now rather than at the first :meth:`query` (returns ``self``).

        NN-descent's search graph and search tree are otherwise built lazily by the first query, which mutates
        the index: pickling it meanwhile from another thread (a Dask worker sending it to another worker
        while a task queries it) fails in pynndescent's ``__getstate__``. What only the construction needs
        is dropped then (``NNDescent.compress_index``: its random-projection forest and its own neighbour
        heaps, a large part of its memory per point; :meth:`neighbor_graph` is this object's refined copy and
        stays). "exact" builds its leaf-ordered float32 copy of the points (``n * d * 4`` bytes;
        the graph's construction drops its own, pickles leave it out).
        """
        if self.method == "nndescent" and not self._index.compressed:
            self._index.compress_index()
            self._drop_duplicate_points()
        elif self.method == "exact":
            self._index.prepare(self._X)
        return self

    def _drop_duplicate_points(self) -> None:
        """Keep one copy of the training points: pynndescent's ``prepare`` reorders its points by its search
        tree (``_raw_data = X[_vertex_order]``, a copy), so this object's X is dropped and read through
        ``_position`` (the inverse order) instead; ``n * d * itemsize`` bytes less (256 MB for a 62,500 x 1024
        float32 shard). Kept when the index's points are not such a reordering of X (checked on the shape,
        dtype and the first rows)."""
        raw, order = getattr(self._index, "_raw_data", None), getattr(self._index, "_vertex_order", None)
        X = self._X
        if (not isinstance(raw, np.ndarray) or raw is X or order is None or raw.shape != X.shape
                or raw.dtype != X.dtype):
            return
        position = np.empty(order.size, dtype=np.int64)
        position[order] = np.arange(order.size)
        head = np.arange(min(8, X.shape[0]))
        if np.array_equal(raw[position[head]], X[head]):
            self._X, self._position = None, position

    def _refined(self, Q: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~spectral.neighbours._refine.refine` of the training rows ``indices`` (m, k) for the queries ``Q``,
        from whichever copy of the points this index holds."""
        if self._X is not None:
            return _refine(self._X, Q, indices, self.metric)
        order = self._index._vertex_order
        found, distances = _refine(self._index._raw_data, Q, self._position[indices], self.metric)
        return np.asarray(order, dtype=np.int64)[found], distances

    def points(self, rows: np.ndarray) -> np.ndarray:
        """The training points at ``rows`` (r,) (positions in the training data), ``(r, d)``, in the dtype the index
        holds them: the same values as ``X[rows]`` of the training data, read from whichever copy of the points
        this index keeps (after :meth:`prepare`, pynndescent's reordered one), so that the caller need not keep
        its own copy of X."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._X is not None:
            return self._X[rows]
        return self._index._raw_data[self._position[rows]]

    def neighbor_graph(self, copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Training graph: ``(indices int64 (n, k), distances float32 (n, k))``, no self-neighbours; copies, or with
        ``copy=False`` the index's own arrays, to be read and never written (no copies of ``n * k * 12`` bytes).
        They are not flagged read-only: numba compiles a kernel again for read-only arrays, and the compiled-code
        cache holds the kernels for writable ones."""
        if copy:
            return self._graph[0].copy(), self._graph[1].copy()
        return self._graph[0], self._graph[1]

    def query(self, X_new: Any, n_neighbors: int) -> tuple[np.ndarray, np.ndarray]:
        """``k`` nearest training points of each row of ``X_new`` (m, d).

        Returns ``(indices int64 (m, k), distances float32 (m, k))`` sorted by distance, ``k`` in [1, n].
        A query equal to a training point finds it at distance 0 (first column).
        """
        X_new = check_search_range(check_array_2d(X_new, "X_new", min_rows=1, dtype=(np.float64, np.float32)),
                                   "X_new")  # float32: no copy
        if X_new.shape[1] != self._shape[1]:
            raise InputDataError(
                f"X_new must have {self._shape[1]} columns like the training data; got {X_new.shape[1]}"
            )
        k = check_int("n_neighbors", n_neighbors, low=1, high=self.n_samples)
        with compile_report("the kNN search"):
            return self._query(X_new, k)

    def _query(self, X_new: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.prepare()
        if self.method == "exact":
            return self._index.query(self._X, X_new.astype(np.float64, copy=False), k, self.n_jobs)
        wide = min(self.n_samples, max(k, self.n_neighbors + 1))
        m = X_new.shape[0]
        indices, distances = np.empty((m, k), dtype=np.int64), np.empty((m, k), dtype=np.float32)
        for start in range(0, m, QUERY_BLOCK_ROWS):
            block = X_new[start:start + QUERY_BLOCK_ROWS]
            found = np.asarray(_query_nndescent(self._index, block, wide), dtype=np.int64)
            found, dist = self._refined(block.astype(np.float64), found)
            indices[start:start + block.shape[0]], distances[start:start + block.shape[0]] = found[:, :k], dist[:, :k]
        return indices, distances


def check_search_range(X: np.ndarray, name: str) -> np.ndarray:
    """``X`` (n, d) when every coordinate lies within :data:`MAX_ABS_COORDINATE`; else :class:`InputDataError`
    naming the largest magnitude and what to do (the heat-kernel graph, hence a Laplacian-eigenmaps embedding, does
    not change when every coordinate is divided by one constant)."""
    largest = max(float(X.max()), -float(X.min())) if X.size else 0.0
    if largest > MAX_ABS_COORDINATE:
        raise InputDataError(
            f"{name} has coordinates up to {largest:.3g} in absolute value; the kNN search accepts at most "
            f"{MAX_ABS_COORDINATE:.0e} (its float32 squared distances would overflow): divide {name} by a constant, "
            f"e.g. {largest:.0e}")
    return X


def _array_bytes(obj: Any, seen: set, depth: int) -> int:
    """Bytes of the NumPy arrays reachable from ``obj`` through tuples, lists, dicts and object attributes, down to
    ``depth`` levels, each array (or the array it views) counted once (``seen``: ids already counted)."""
    if isinstance(obj, np.ndarray):
        base = obj if obj.base is None or not isinstance(obj.base, np.ndarray) else obj.base
        if id(base) in seen:
            return 0
        seen.add(id(base))
        return int(base.nbytes)
    if depth == 0 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        items = getattr(obj, "__dict__", {}).values()
    return sum(_array_bytes(item, seen, depth - 1) for item in items)


def nndescent_index_bytes(n: int, d: int, k: int, itemsize: int = 4) -> int:
    """Approximate memory of an NN-descent :class:`KNNIndex` of ``n`` points in ``d`` dimensions with ``k``
    neighbours: ``n (d + 3 k)`` items (its copy of the points and its neighbour heaps)."""
    return n * (d + 3 * k) * itemsize


def _max_threads() -> int:
    """Threads numba may use here: its NUMBA_NUM_THREADS, which follows the process's CPU affinity.

    ``os.cpu_count()`` counts the machine's cores; under ``taskset -c 1`` it still says 2, and asking numba for
    2 threads (pynndescent's ``n_jobs``) then fails with "The number of threads must be between 1 and 1".
    """
    import numba

    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def _build_nndescent(X: np.ndarray, metric: str, k: int, seed: int, n_jobs: int | None) -> tuple[Any, np.ndarray]:
    """pynndescent's index of ``X`` and its (n, k) int32 neighbour lists (each point its own first neighbour)."""
    from eigenflow.spectral.neighbours.nndescent_kernels import CachedNNDescent

    threads = _max_threads() if n_jobs is None else min(n_jobs, _max_threads())
    # compressed=False keeps what .query needs; low_memory is pynndescent's default for large data. The NN-descent
    # loop loads from eigenflow's compiled-code cache (spectral/neighbours/nndescent_kernels.py) instead of compiling here.
    # Queries come in blocks of QUERY_BLOCK_ROWS, so they search in parallel over numba's threads: each row with its
    # own visited set; the random state, shared, drives only tie-breaks and leaves smaller than k, and the answers
    # are the serial search's (tests/spectral/test_knn.py). Only through pynndescent's compiled-once search kernels
    # (euclidean, cosine): its per-index parallel search, which manhattan would use, fails numba's compilation.
    index = CachedNNDescent(X, metric=metric, n_neighbors=k, random_state=seed, n_jobs=threads, compressed=False,
                            parallel_batch_queries=metric in PARALLEL_QUERY_METRICS)
    indices = index.neighbor_graph[0]  # its public copy; the distances are computed again in float64 by the refinement
    if np.any(indices < 0):
        raise InputDataError(
            f"NN-descent found fewer than n_neighbors + 1 = {k} neighbours for some points; "
            "use method='exact' for such small or degenerate data"
        )
    return index, indices


def _query_nndescent(index, Q: np.ndarray, k: int) -> np.ndarray:
    indices, _ = index.query(Q.astype(np.float32, copy=False), k=k, epsilon=NNDESCENT_QUERY_EPSILON)
    if np.any(indices < 0):
        raise InputDataError(f"NN-descent query returned fewer than n_neighbors={k} neighbours")
    return indices


def knn_mask_from_distances(D: np.ndarray, n_neighbors, allowed: np.ndarray | None = None) -> np.ndarray:
    """Directed kNN relation from a dense (n, n) distance matrix (squared or not): ``(n, n)`` bool.

    For points known only through their distances (kernel feature spaces, CK08 Sect. 5) and for
    label-restricted neighbourhoods (same class / other classes, CK08 Sect. 2.1.2, OV19 eq. 9-10).
    ``mask[i, j]`` is True when j is among the ``k_i`` nearest allowed columns of row i, ties broken by the
    smaller column index (stable sort). ``n_neighbors`` is an int or a per-row (n,) int array, capped at the
    number of allowed columns of each row; ``allowed`` (n, n) bool defaults to every ``j != i``.
    """
    n = D.shape[0]
    if allowed is None:
        allowed = ~np.eye(n, dtype=bool)
    k = np.minimum(np.broadcast_to(np.asarray(n_neighbors), (n,)), allowed.sum(axis=1))
    order = np.argsort(np.where(allowed, D, np.inf), axis=1, kind="stable")  # (n, n)
    rank = np.empty_like(order)
    rank[np.arange(n)[:, None], order] = np.arange(n)[None, :]
    return (rank < k[:, None]) & allowed


def check_knn_graph(indices: Any, distances: Any, n_samples: int | None = None, *, keep_float32: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Validate a kNN graph ``(indices (n, k), distances (n, k))`` and return it as (int64, float64); with
    ``keep_float32`` float32 distances are returned as they are (no (n, k) float64 copy)."""
    idx = np.asarray(indices)
    dist = np.asarray(distances)
    if idx.ndim != 2 or dist.shape != idx.shape:
        raise InputDataError(
            f"indices and distances must be 2-D arrays of the same shape; got {idx.shape} and {dist.shape}"
        )
    if not np.issubdtype(idx.dtype, np.integer):
        raise InputDataError(f"indices must have an integer dtype; got {idx.dtype}")
    n = idx.shape[0] if n_samples is None else n_samples
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InputDataError(f"indices must lie in [0, {n - 1}]; got values in [{idx.min()}, {idx.max()}]")
    if not (keep_float32 and dist.dtype == np.float32):
        dist = dist.astype(np.float64)
    if not np.all(np.isfinite(dist)) or (dist.size and dist.min() < 0):
        raise InputDataError("distances must be finite and >= 0")
    if idx.shape[1] < 1:
        raise ParameterError(f"the kNN graph must have at least 1 neighbour per row; got {idx.shape[1]}")
    return idx.astype(np.int64, copy=False), dist
