"""The ``extend`` flow: the outputs of new points with a model stored by an ``embed`` run, into a store of their own.

The body reads as its stages: check the model and the new points' width (before anything is touched) -> cluster
-> ingest of the new points -> (sharded models: their candidate fit points, ``knn``) -> ``extend-points``, chunk by
chunk on the workers -> the report.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from eigenflow.storage.arrays import x_shape
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.manifest import add_results, recorded_location
from eigenflow.tasks.checks import check_extend_arguments
from eigenflow.tasks.model_index import model_index
from eigenflow.tasks.points import extend_candidates_task, extend_points_task
from eigenflow.tasks.bodies.sharded_eigenmaps import candidates_complete
from eigenflow.tasks.warm_up import model_dtype, warm_workers

from eigenflow.flows.cluster import dask_client, keeps_index
from eigenflow.flows.embed import output_paths
from eigenflow.flows.reporting import figures_on_worker, publish_run
from eigenflow.flows.run import ingest, new_run_id, open_run, run_watch


@flow(name="extend", validate_parameters=True)
def extend(
    store: str,
    new_source: str,
    out_store: str,
    *,
    run: str | None = None,
    chunk_rows: int | None = None,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
    sharded: bool | None = None,
    use_rep: str | None = None,
    keep_index: bool | None = None,
) -> dict[str, Any]:
    """Map the points of ``new_source`` with the model of ``run`` stored in ``store``, into ``out_store``.

    ``run`` defaults to the latest completed ``embed`` run of ``store`` that has a model (any method).
    ``new_source`` is ingested into ``out_store`` (skipped if it is that store); the outputs are written to
    ``embeddings/<extend run>`` (and ``outputs/<extend run>/labels|scores`` for classifiers) of ``out_store``,
    with a manifest naming the model store and run.

    ``sharded`` (Laplacian eigenmaps models): True searches the new points in per-shard indexes of the fit rows
    on the workers and maps them from their stored candidates (:mod:`tasks.bodies.sharded_extend`: no process holds an
    index of all fit rows; a ``knn`` stage before ``extend-points``); False rebuilds one index of the fit rows
    (in the worker that restores the model); None (default): as the model's run was fitted.

    ``use_rep``: for an AnnData ``new_source``, ``"X"`` (default) or the ``obsm`` key of the representation the
    model was fitted on; ``out_store`` keeps the new file's obs names for the export back into it.

    ``keep_index``: leave the model's kNN index on the cluster for later ``update`` / ``extend`` runs
    (:mod:`tasks.model_index`); None (default): when ``scheduler`` names an existing cluster, which outlives the run.
    """
    model, use_shards = check_extend_arguments(store, new_source, run=run, n_workers=n_workers, sharded=sharded,
                                               use_rep=use_rep)
    model_store, model_run, method = model.store, model.run, model.method
    out_run = new_run_id("extend", run_name)
    parameters = {"store": recorded_location(store), "model_run": model_run, "method": method,
                  "new_source": str(new_source), "chunk_rows": chunk_rows, "n_workers": n_workers,
                  "scheduler": scheduler, "sharded": use_shards, "use_rep": use_rep}

    t0 = time.perf_counter()
    with dask_client(scheduler, n_workers=n_workers) as client, run_watch(client) as watch:
        cluster_seconds = time.perf_counter() - t0
        warm = warm_workers(client, model_dtype(model_store, model.manifest, use_shards))
        ingested, out, t_ingest = ingest(new_source, out_store, client, chunk_rows=chunk_rows, overwrite=overwrite,
                                         use_rep=use_rep)
        if ingested["d"] != x_shape(model_store)[1]:
            raise StoreFormatError(f"new points must have {x_shape(model_store)[1]} features like the model's "
                                   f"training data; got {ingested['d']}")
        before = [("cluster", cluster_seconds, {}), ("ingest", t_ingest, ingested)]
        with open_run(out, out_run, client, flow="extend", parameters=parameters, seed=None, stages_before=before,
                      stop=watch) as ctx:
            if use_shards:
                with ctx.stage("knn") as rec:
                    if candidates_complete(ctx.store, ctx.run):  # a resumed run keeps them
                        rec.info.update(reused=True)
                    else:
                        rec.info.update(extend_candidates_task(model_store, model_run, ctx.store, ctx.run))
            with ctx.stage("extend-points") as rec:
                index, rec.info["model_index"] = (None, "stored candidates") if use_shards else model_index(
                    model_store, model_run, model.manifest.started, keep=keeps_index(keep_index, scheduler))
                rec.info.update(extend_points_task(model_store, model_run, ctx.store, ctx.run, index=index,
                                                   stored_candidates=use_shards,
                                                   on_progress=ctx.progress("extend-points")))
            ctx.manifest.results.update(output_paths(method, out_run, rec.info))
            ctx.manifest.results.update({"n": ingested["n"], "model_store": parameters["store"],
                                         "model_run": model_run, "method": method})
            ctx.manifest.fixed_seconds["compile"] = max(client.gather(warm), default=0.0)
            figures = figures_on_worker(client, ctx.store, ctx.run, method)
    summary = ctx.summary()
    summary["results"].update(publish_run(summary, out, method, parameters, {"points": ingested["n"]}, figures))
    add_results(out, out_run, summary["results"])
    return summary
