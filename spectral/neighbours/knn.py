"""k-nearest-neighbour graphs, the front door of :mod:`spectral.neighbours`: one call for every method.

:func:`knn_graph` builds the graph of a single-machine :class:`~spectral.neighbours.index.KNNIndex` (exact or
NN-descent) or, with ``method="sharded"``, of the sharded build on the Dask workers
(:mod:`spectral.neighbours.sharded`), both with the contract of :mod:`spectral.neighbours.index`: rows sorted
by increasing distance, no self-neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_choice
from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.neighbours.index import METHODS, KNNIndex

#: methods of :func:`knn_graph`: those of :class:`KNNIndex` plus "sharded" (a graph, no queryable index)
GRAPH_METHODS = METHODS + ("sharded",)


def knn_graph(X: Any, n_neighbors: int, *, method: str = "auto", metric: str = "euclidean", random_state: Any = None,
              n_jobs: int | None = None, n_shards: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours of every row of ``X`` among the other rows.

    Parameters
    ----------
    X : array-like, shape (n, d)
        Finite numeric data; with ``method="sharded"`` also a dask array (row chunks).
    n_neighbors : int in [1, n - 1]
        Number of neighbours ``k`` per point, the point itself excluded.
    method : {"auto", "exact", "nndescent", "sharded"}
        "exact" is :mod:`spectral.neighbours.exact` (a pruned scan of a leaf partition in float32, every row's
        k-th neighbour certified in float64; ties go to the smaller index); "nndescent" is
        ``pynndescent.NNDescent`` built with ``k + 1`` neighbours; "auto" is
        :func:`~spectral.neighbours.method_choice.auto_method`: "exact" below
        :data:`~spectral.neighbours.method_choice.EXACT_MAX_SAMPLES` points and
        :data:`~spectral.neighbours.method_choice.EXACT_MAX_CELLS` values of X, else "nndescent" (never
        "sharded": callers that own a cluster choose "sharded" explicitly). "sharded" runs on the active ``distributed.Client``: one NN-descent index per row shard, every shard queried against every other shard's index, the candidates merged (:func:`spectral.neighbours.sharded.sharded_knn_graph`).
    metric : {"euclidean", "manhattan", "cosine"}
    random_state : None, int, Generator
        Seeds NN-descent (through one integer drawn from the generator); unused by "exact". "sharded" seeds
        shard ``p`` with the ``p``-th child of ``SeedSequence(that integer).spawn(n_shards)``.
    n_jobs : int or None
        Threads of the search (NN-descent's or the exact scan's), in [1, numba's thread count]; None uses them
        all (the cores this process may run on: ``taskset`` / container CPU limits count, not
        ``os.cpu_count()``). Pass 1 inside Dask workers.
        With "sharded": threads per shard task on the workers, None meaning 1 there.
    n_shards : int in [1, n // 2] or None
        Only with "sharded": the number of row shards; None is
        :func:`spectral.neighbours.sharded.default_n_shards` (one per worker thread, more when a shard would exceed
        :data:`spectral.neighbours.sharded.ROWS_PER_SHARD` rows).

    Returns
    -------
    indices : ndarray of int64, shape (n, k)
        Neighbours sorted by increasing distance; the point itself is never among them, but a duplicate of
        it (another row with the same coordinates) is, at distance 0.
    distances : ndarray of float32, shape (n, k)
    """
    method = check_choice("method", method, GRAPH_METHODS)
    if method == "sharded":
        from eigenflow.spectral.neighbours.sharded import sharded_knn_graph

        return sharded_knn_graph(X, n_neighbors, n_shards=n_shards, metric=metric, random_state=random_state,
                                 n_jobs=1 if n_jobs is None else n_jobs)
    if n_shards is not None:
        raise ParameterError(f"n_shards is used only by method='sharded'; got n_shards={n_shards!r} with "
                             f"method={method!r}")
    return KNNIndex.build(
        X, n_neighbors, method=method, metric=metric, random_state=random_state, n_jobs=n_jobs
    ).neighbor_graph()
