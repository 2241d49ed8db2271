"""The ``extend`` flow: the outputs of new points with a model stored by an ``embed`` run, into a store of their own.

The body reads as its stages: check the model and the new points' width (before anything is touched) -> cluster
-> ingest of the new points -> (sharded models: their candidate fit points, ``knn``) -> ``extend-points``, chunk by
chunk on the workers -> the report.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from eigenflow.spectral._validation import check_int
from eigenflow.spectral.errors import ParameterError
from eigenflow.storage.arrays import x_shape
from eigenflow.storage.checksums import check_intact
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.ingest import store_token
from eigenflow.storage.manifest import add_results, read_manifest, readable_manifests, recorded_location
from eigenflow.storage.models import list_models
from eigenflow.storage.store import Store
from eigenflow.tasks.checks import check_anndata_options
from eigenflow.tasks.points import extend_candidates_task, extend_points_task
from eigenflow.tasks.sharded_choice import SHARDED_METHOD
from eigenflow.tasks.bodies.sharded_eigenmaps import candidates_complete
from eigenflow.tasks.bodies.sharded_extend import sharded_fit_record
from eigenflow.tasks.warm_up import model_dtype, warm_workers

from eigenflow.flows.cluster import dask_client
from eigenflow.flows.embed import DEFAULT_METHOD, output_paths
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
    """
    n_workers = check_int("n_workers", n_workers, low=1)
    check_anndata_options(new_source, use_rep, None, None)
    if sharded is not None and not isinstance(sharded, bool):
        raise ParameterError(f"sharded must be True, False or None (as the model was fitted); got {sharded!r}")
    model_store = Store.open(store, "r")  # the model store's one whole-store check; read only
    model_run = run if run is not None else latest_model_run(model_store)
    if model_run not in list_models(model_store):
        raise StoreFormatError(f"store {store} has no model for run {model_run!r}; runs with models: "
                               f"{list_models(model_store)}")
    model = read_manifest(model_store, model_run)
    method = model.parameters.get("method", DEFAULT_METHOD)
    fit_record = sharded_fit_record(model_store, model_run)
    use_shards = fit_record is not None if sharded is None else sharded
    if use_shards and method != SHARDED_METHOD:
        raise ParameterError(f"sharded=True extends {SHARDED_METHOD!r} models; run {model_run!r} is method {method!r}")
    check_new_points_header(model_store, new_source, use_rep)
    check_intact(model_store)  # the model store's X (a kNN index may be rebuilt from it)
    out_run = new_run_id("extend", run_name)
    parameters = {"store": recorded_location(store), "model_run": model_run, "method": method,
                  "new_source": str(new_source), "chunk_rows": chunk_rows, "n_workers": n_workers,
                  "scheduler": scheduler, "sharded": use_shards, "use_rep": use_rep}

    t0 = time.perf_counter()
    with dask_client(scheduler, n_workers=n_workers) as client, run_watch(client) as watch:
        cluster_seconds = time.perf_counter() - t0
        warm = warm_workers(client, model_dtype(model_store, model, use_shards))
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
                        rec.info.update(extend_candidates_task(model_store, model_run, ctx.store, ctx.run,
                                                               n_shards=(fit_record or {}).get("n_shards")))
            with ctx.stage("extend-points") as rec:
                rec.info.update(extend_points_task(model_store, model_run, store_token(model_store), ctx.store,
                                                   ctx.run, stored_candidates=use_shards,
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


def check_new_points_header(store: Store, new_source: str, use_rep: str | None = None) -> None:
    """New points must have the model's number of features: checked from the source's header, before the ingest
    (a CSV, whose width is known only once read, is checked after it)."""
    from eigenflow.storage.readers import source_n_columns

    expected = x_shape(store)[1]
    got = source_n_columns(new_source, x_key=use_rep or "X")
    if got is not None and got != expected:
        raise StoreFormatError(f"new points must have {expected} features like the model's training data; "
                               f"{new_source} has {got}")


def latest_model_run(store: Store) -> str:
    """The most recent completed ``embed`` run of ``store`` that has a model (any method)."""
    with_models = set(list_models(store))
    done = [m for m in readable_manifests(store)  # a damaged manifest is skipped, with a warning
            if m.flow == "embed" and m.status == "completed" and m.run_id in with_models]
    if not done:
        raise StoreFormatError(f"store {store} has no completed embed run with a model; run `eigenflow embed` first")
    return max(done, key=lambda m: m.started).run_id
