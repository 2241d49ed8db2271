"""The second stage: the weighted graph of the kNN lists and its Laplacian.

:mod:`.weights` (kNN weights, out-of-sample rows), :mod:`.laplacian` (Laplacians, components, connectivity),
and their sharded variant on the Dask workers, :mod:`.sharded` (weight rows, transpose exchange, Laplacian rows);
:mod:`.halo`: the values at a shard's columns looked up from the shards that own them.
"""
