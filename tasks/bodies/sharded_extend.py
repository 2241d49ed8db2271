"""``extend`` of a Laplacian eigenmaps model without one kNN index of all its fit rows.

The fit rows of the model's store are indexed per shard on the workers
(:func:`spectral.neighbours.sharded.build_shard_indexes` with the partition of the sharded path,
:data:`tasks.bodies.sharded_eigenmaps.PARTITION`, and the embed run's number of shards); every row of the new store
is searched
in every shard's index by tasks on the workers (:func:`spectral.neighbours.sharded_query.query_shard_indexes`, the
search of the embed run's held-out rows), and its
:attr:`~spectral.embedding.out_of_sample.LaplacianEigenmapsModel.n_candidates` nearest fit points are written to the new
store's candidate arrays (:func:`tasks.bodies.sharded_eigenmaps.write_candidates_chunk`, one task per row chunk). The
``extend-points`` stage then maps every row by the model's Nystrom map of its stored candidates
(:meth:`~spectral.embedding.out_of_sample.LaplacianEigenmapsModel.transform_candidates`), as the embed run maps its
held-out rows: no process holds the fit rows' X or an index of all of them, only its shard.

Like the embed run's held-out rows, each new point is searched in all P shard indexes (no pruning).
:func:`write_extend_candidates` runs in the flow process and holds futures and the model's fit rows ((n_fit,) int64).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_random_state
from eigenflow.storage.arrays import read_X, row_chunks
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.manifest import read_manifest
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.fit_rows import fit_X
from eigenflow.tasks.bodies.sharded_eigenmaps import PARTITION, create_candidates, write_candidates_chunk


def sharded_fit_record(store: Store, run: str) -> dict | None:
    """The kNN stage record of ``run`` of ``store`` when that run took the sharded path (``n_shards``, ...), else
    None."""
    for stage in read_manifest(store, run).stages:
        if stage.name == "knn" and stage.info.get("method") == "sharded":
            return dict(stage.info)
    return None


def extend_plan(model_store: Store, model_run: str) -> dict[str, Any]:
    """Task (on a worker): what the shard indexes of the model need: its fit rows (as
    :class:`tasks.bodies.fit_rows.FitRows`:
    the rows left out, no (n_fit,) array for the driver), the kNN parameters it was fitted with and its number of
    candidates. Refuses a model without a candidates map."""
    from eigenflow.storage.arrays import x_shape
    from eigenflow.tasks.bodies.fit_rows import FitRows
    from eigenflow.tasks.bodies.stored_model import load_fitted

    _, model, rows = load_fitted(model_store, model_run, with_index=False)
    if not hasattr(model, "transform_candidates"):
        raise StoreFormatError(f"model {model_run!r} of {model_store} ({type(model).__name__}) has no map from "
                               "candidate neighbours: extend it with sharded=False")
    return {"fit": FitRows.from_rows(x_shape(model_store)[0], rows), "knn_params": dict(model.knn_params),
            "n_candidates": int(model.n_candidates)}


def write_extend_candidates(model_store: Store, model_run: str, out_store: Store, out_run: str,
                            client: Any) -> dict[str, Any]:
    """Write the candidate fit points of every row of ``out_store`` (see the module docstring), in as many shards as
    the embed run used (a model without that record: from the cluster and the data size). Returns sizes and
    timings."""
    from eigenflow.spectral.neighbours.sharded import build_shard_indexes
    from eigenflow.spectral.neighbours.sharded_query import query_shard_indexes

    t0 = time.perf_counter()
    n_shards = (sharded_fit_record(model_store, model_run) or {}).get("n_shards")
    plan = client.submit(extend_plan, model_store, model_run, pure=False).result()
    fit, params, kc = plan["fit"], plan["knn_params"], plan["n_candidates"]
    sharded = build_shard_indexes(fit_X(model_store, fit), int(params["n_neighbors"]), n_shards=n_shards,
                                  metric=params.get("metric", "euclidean"),
                                  random_state=check_random_state(params.get("seed")), partition=PARTITION,
                                  queried=True, client=client)
    build_seconds = time.perf_counter() - t0
    create_candidates(out_store, out_run, kc)
    chunks = row_chunks(out_store)
    queries = [client.submit(read_X, out_store, start, stop, pure=False) for start, stop in chunks]
    answers, searches = query_shard_indexes(sharded, queries, kc, with_search_counts=True)
    writes = [client.submit(write_candidates_chunk, out_store, out_run, start, stop - start, answer,
                            np.arange(stop - start), pure=False) for (start, stop), answer in zip(chunks, answers)]
    n_rows = sum(client.gather(writes))
    n_searches = sum(client.gather(searches))
    n_used = len(sharded.partition.bounds) - 1
    del sharded, answers, writes, queries, searches
    return {"method": "sharded", "n_shards": int(n_used), "n_fit": fit.size, "n_rows": int(n_rows),
            "n_candidates": kc, "shards_searched": n_searches / max(int(n_rows), 1),  # per new point, of n_shards
            "index_build_seconds": build_seconds, "seconds": time.perf_counter() - t0}
