"""The first stage: k nearest neighbours of the rows of X, on one machine or sharded over the Dask workers.

- :mod:`.knn`: :func:`~spectral.neighbours.knn.knn_graph`, the front door of every method;
  :mod:`.index`: :class:`~spectral.neighbours.index.KNNIndex` (build once, query new points), the only kNN search;
- :mod:`.exact` + :mod:`._exact_search`: the exact search; :mod:`._refine`: the float64 refinement of every path;
  :mod:`.nndescent_kernels` + :mod:`.jit_cache`: NN-descent in eigenflow's compiled-code cache;
- sharded: :mod:`.sharded` (one index per shard on the workers), :mod:`.merge` (per-point merge of the shards'
  candidates), :mod:`.sharded_query` (new points against the shards); the shards are the parts of
  :mod:`.partition` (its per-block tasks in :mod:`.partition_tasks`), assembled on the workers by
  :mod:`.sharded_assembly`; :mod:`.sharded_duplicates`: exact copies among rows held by the workers.
"""
