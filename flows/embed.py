"""The two flows of eigenflow: ``embed`` (any registered method) and ``extend`` (any stored model).

``embed``: check the method and its parameters (before anything is touched) -> ingest -> the method's fit
stages (:func:`tasks.fitting.fit_stages`: kNN graph + eigensolve, chunked sums, or the estimator's own fit)
-> the per-point outputs of every point, per chunk on Dask (fit rows: fitted results; held-out rows: the
out-of-sample map) -> manifest. ``extend``: the per-point outputs of the points of a new file or store with a
stored model, into its own store.

Both submit their per-chunk work to the Dask client the flow owns (:mod:`flows.cluster`). Without
``PREFECT_API_URL`` Prefect runs ephemerally; with it, runs are reported to that server. A re-run with the
same ``run_name`` on the same store reuses the tasks that had finished with the same inputs (Prefect result
cache, see :mod:`tasks.task_options`); the cache key holds the method parameters.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from eigenflow.spectral._validation import check_int
from eigenflow.spectral.placement import worker_list
from eigenflow.spectral.errors import ParameterError
from eigenflow.storage import layout
from eigenflow.storage.checksums import check_intact
from eigenflow.storage.errors import DamagedManifestError, StoreFormatError
from eigenflow.storage.lock import store_lock
from eigenflow.storage.manifest import list_runs, read_manifest, readable_manifests, recorded_location, write_manifest
from eigenflow.storage.models import list_models
from eigenflow.storage.run_outputs import drop_run_outputs
from eigenflow.storage.ingest import store_token
from eigenflow.storage.store import Store
from eigenflow.tasks.fitting import FitRequest, fit_stages, release_index
from eigenflow.tasks.ingest import existing_store_attrs
from eigenflow.tasks.ingest_task import ingest_task
from eigenflow.tasks.points import embed_points_task, extend_candidates_task, extend_points_task
from eigenflow.tasks.registry import LABELS, SCORES, get_entry
from eigenflow.tasks._warm_up import ended_warm_up_seconds, import_point_modules
from eigenflow.tasks.sharded_choice import SHARDED_METHOD, resolve_sharded
from eigenflow.tasks.sharded_eigenmaps import candidates_complete
from eigenflow.tasks.sharded_extend import sharded_fit_record
from eigenflow.tasks.stage_handoff import PLUGIN_NAME as HANDOFF_PLUGIN, HandoffPlugin

from eigenflow.flows._embed_checks import check_anndata_options, check_embed_arguments, opened_or_url
from eigenflow.flows._fixed_time import cluster_seconds, entry_seconds, final_write
from eigenflow.flows._run_prologue import early_fit, ingested_run
from eigenflow.flows._stop import bridge_prefect_sigterm
from eigenflow.flows._runtime import cache_refreshed, emit, new_run_id, run_context, timed
from eigenflow.flows._warm_up import finish_on_workers, model_dtypes, planned_dtypes, start_when_ready, uses_nndescent
from eigenflow.flows.cluster import dask_client_in_background
from eigenflow.flows.reporting import figures_on_worker, publish_run

DEFAULT_METHOD = "laplacian_eigenmaps"


@flow(name="embed", validate_parameters=True)
def embed(
    source: str,
    store: str,
    *,
    method: str = DEFAULT_METHOD,
    params: dict[str, Any] | None = None,
    labels: str | None = None,
    holdout: float = 0.0,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    sharded: bool | None = None,
    overwrite_run: bool = False,
    use_rep: str | None = None,
    labels_obs: str | None = None,
) -> dict[str, Any]:
    """Embed the points of ``source`` into ``store`` with ``method`` and return a summary of the run.

    Parameters
    ----------
    source : str
        A ``.npy`` / ``.npz`` / ``.csv`` / ``.parquet`` file, a zarr store, an ``.h5ad`` file or AnnData zarr
        directory, or an HDF5 dataset ``file.h5:/group/dataset``; ``store`` itself (or a store already ingested
        from ``source``) skips the ingest.
    store : str
        The eigenflow store to write (local path or fsspec URL).
    method : str
        A registered method (``eigenflow methods``; :data:`tasks.registry.REGISTRY`).
    params : dict, optional
        The method's parameters: its estimator's ``__init__`` parameters (defaults: the estimator's).
        An unknown name is an error before any work.
    labels : str, optional
        ``.npy`` file of labels (-1 = unlabeled) ingested with X.
    holdout : float in [0, 1)
        Fraction of points left out of the fit (drawn from ``random_state``) and mapped out-of-sample.
    random_state : int or None
        The run's one seed (also the estimator's ``random_state``).
    scheduler : str, optional
        Address of a Dask scheduler; default ``$EIGENFLOW_SCHEDULER``, else a local cluster of ``n_workers``
        single-threaded worker processes.
    run_name : str, optional
        Run id; reuse the id of a failed run to resume it. Default: a fresh ``embed-<UTC time>-<hex>``.
    chunk_rows : int, optional
        Rows per chunk of the store (the unit of Dask work and of writes).
    overwrite : bool
        Replace an existing store at ``store`` by a new ingest of ``source``.
    sharded : bool or None
        Laplacian eigenmaps only: build the kNN graph, the weights and the Laplacian split by rows over the
        workers and solve with the distributed eigensolver (:mod:`tasks.sharded_eigenmaps`; needs
        ``normalization="symmetric"``; held-out rows are searched in every shard's index). None (default):
        sharded when the single-process kNN stage would need more than half of the smallest worker's memory.
    overwrite_run : bool
        Start the run ``run_name`` again from nothing instead of resuming it: its identity is not checked (its
        manifest may be unreadable) and what it wrote before is dropped (:func:`storage.run_outputs.drop_run_outputs`).

    use_rep : str, optional
        AnnData source: X is ``"X"`` (default) or this key of ``obsm`` (e.g. ``"X_pca"``).
    labels_obs : str, optional
        AnnData source: the ``obs`` column of the labels (categorical or string; missing values are unlabeled).
        Its category names are kept in the store for :func:`storage.anndata_export.export_to_anndata`.

    Returns
    -------
    dict
        ``store``, ``run``, ``flow``, ``status``, ``seconds``, ``stages`` (name -> seconds), ``results``,
        ``fixed_seconds`` (name -> seconds outside the stages, :mod:`flows._fixed_time`), ``total_seconds``.
    """
    fixed = entry_seconds()  # first: the flow engine's start ends here
    bridge_prefect_sigterm()  # a CLI run's SIGTERM reaches its guard (flows._stop) whatever Prefect's handler does
    t_flow = time.perf_counter()
    target = store if overwrite else opened_or_url(store)  # an existing store's one validation, kept by the run
    opened = target if isinstance(target, Store) else None
    full = check_embed_arguments(source, target, method, params, labels=labels, holdout=holdout,
                                 n_workers=n_workers, random_state=random_state, overwrite=overwrite,
                                 sharded=sharded, use_rep=use_rep, labels_obs=labels_obs, run=run_name)
    warm_up = planned_dtypes(source, target, full, holdout, sharded, overwrite)  # begun while the ingest runs
    run = new_run_id("embed", run_name)
    finished: dict[str, dict] = {}
    if run_name is not None:
        check_run_identity(target, run, {"method": method, "labels": labels, "holdout": holdout, "sharded": sharded,
                                         "use_rep": use_rep, "labels_obs": labels_obs, **full},
                           overwrite_run=overwrite_run)
        finished = {} if overwrite_run else finished_stages(target, run)
    with ingested_run(source, store, run=run, flow="embed", method=method, params=full, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state, extra_manifest={"holdout": holdout, "sharded": sharded},
                      fixed_seconds=fixed, warm_up=warm_up, opened=opened, use_rep=use_rep,
                      labels_obs=labels_obs) as (ctx, ingested):
        if overwrite_run:  # under the store's lock
            drop_run_outputs(ctx.store, ctx.run)
        entry = get_entry(method)
        if entry.needs_labels and not ingested.get(layout.ATTR_HAS_LABELS, True):
            raise StoreFormatError(f"method {method!r} needs labels; store {store} has none (pass labels=...)")
        n_fit = ingested["n"] - round(holdout * ingested["n"])
        client = ctx.require_cluster()  # every stage runs its body on the cluster
        client.register_plugin(HandoffPlugin(), name=HANDOFF_PLUGIN)  # stage outputs kept for the next stage
        use_shards = resolve_sharded(sharded, method, full, ingested["n"], ingested["d"], client)
        ctx.manifest.results["sharded"] = use_shards
        # the fit stages the CLI began before this flow, on the one worker warmed up so far: the others warm up
        # during the eigensolve, which leaves a core free (their tasks now would be stolen by an idle worker and
        # take CPU from the build and the weights)
        early = early_fit()
        builder = None if early is None else early.builder()
        warms_up = use_shards or uses_nndescent(full, n_fit, ingested["d"])
        warm = finish_on_workers(client, dtype=ingested[layout.ATTR_DTYPE]) if warms_up and builder is None else []
        imported: list = []  # futures held until the run's end (a released one may be cancelled before it runs)
        importers: list[str] = []  # the workers that import the points stage's and the plot's modules
        request = FitRequest(store=ctx.store, run=ctx.run, token=ctx.token, method=method, params=full,
                             holdout=holdout, random_state=random_state, sharded=use_shards)
        try:
            for stage in fit_stages(request):
                recorded = stage.name in finished
                if recorded and stage.outputs_intact():  # resumed: done before the crash
                    ctx.record_stage(stage.name, 0.0, {**finished[stage.name], "reused": True})
                    _record_fit_results(ctx.manifest.results, finished[stage.name])
                    continue
                with ctx.stage(stage.name) as rec, cache_refreshed(recorded):  # recorded, outputs lost: again
                    rec.info.update(stage.call())
                _record_fit_results(ctx.manifest.results, rec.info)
                if stage.name == "weights" and builder is not None:  # beside the one-core eigensolve
                    if warms_up and _maps_points_outside(ctx):  # every worker queries the index: NN-descent's kernels
                        warm = finish_on_workers(client, dtype=ingested[layout.ATTR_DTYPE])
                    else:  # the points stage's and the plot's imports alone, on the workers other than the builder
                        importers = [w for w in worker_list(client) if w != builder]
                        imported = [client.submit(import_point_modules, method, workers=[w], allow_other_workers=False,
                                                  pure=False) for w in importers]
            with ctx.stage("embed-points") as rec:
                rec.info.update(embed_points_task(ctx.store, ctx.run, ctx.token, holdout=holdout,
                                                  random_state=random_state))
            ctx.manifest.results.update(_output_paths(method, run, rec.info))
            ctx.manifest.results.update({"n": ingested["n"], "n_fit": n_fit, "method": method})
            # each worker's warm-up (loaded from the cache: ~1 s); or the builder's alone, ended long ago
            compile_seconds = client.gather(warm) if warm or builder is None else \
                _builder_warm_up_seconds(client, builder, ingested[layout.ATTR_DTYPE])
            ctx.manifest.fixed_seconds["compile"] = max(compile_seconds, default=0.0)
            if compile_seconds:
                ctx.manifest.results["nndescent_compile_seconds"] = [round(s, 2) for s in compile_seconds]
        finally:
            release_index(ctx.token, ctx.run)
            del warm, imported
        figures = figures_on_worker(client, ctx.store, ctx.run, method, importers)  # while the cluster is up
        work_ended = time.perf_counter()
        ctx.pending_client.begin_close()  # the cluster's shutdown overlaps the run's end (a client of its own)
    summary = ctx.summary()
    summary["results"].update(publish_run(summary, ctx.store, method, full, {"points": ingested["n"],
                                                                             "fitted": n_fit,
                                                                             "features": ingested["d"]}, figures))
    fixed = final_write({**summary["fixed_seconds"], **cluster_seconds(ctx.pending_client)}, work_ended,
                        lambda seconds: write_manifest_results(ctx.store, run, summary["results"], seconds))
    return {**summary, "fixed_seconds": fixed, "total_seconds": time.perf_counter() - t_flow}


#: Manifest parameters that do not change a run's result (how it was executed), left out of its identity.
EXECUTION_PARAMETERS = ("source", "chunk_rows", "n_workers", "scheduler")


def check_run_identity(store: str | Store, run: str, identity: dict[str, Any], *, overwrite_run: bool = False) -> None:
    """Refuse to reuse the name of a run of ``store`` that was started with other parameters, or whose manifest
    cannot be read (its parameters are unknown), unless ``overwrite_run``.

    A re-run under the same name resumes that run (finished tasks are reused), so it must be the same run:
    the method, labels, hold-out and every method parameter must be equal. The error names the differences.
    """
    if overwrite_run:
        return
    try:
        if existing_store_attrs(store) is None or run not in list_runs(store):
            return
        before = read_manifest(store, run).parameters
    except DamagedManifestError as exc:
        raise StoreFormatError(f"run {run!r} of store {store} cannot be resumed: its manifest {exc.path} cannot be "
                               f"read ({exc.reason}); pass overwrite_run=True (CLI --overwrite-run) to start it "
                               "again from nothing, or choose a new run name") from exc
    except StoreFormatError:
        return  # not a store yet (or not one of ours): the ingest decides
    now = _jsonable(identity)
    keys = (set(before) | set(now)) - set(EXECUTION_PARAMETERS)
    differing = sorted(k for k in keys if before.get(k) != now.get(k))
    if differing:
        changes = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differing)
        raise ParameterError(f"run_name {run!r} of store {store} was started with other parameters ({changes}); "
                             "choose a new run name")


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(values, default=str))


def finished_stages(store: str | Store, run: str) -> dict[str, dict]:
    """``{stage: info}`` of the stages that a previous attempt of ``run`` (failed, or crashed: killed) completed,
    read from its manifest in the store; empty for a new run or one that is still running."""
    from eigenflow.storage.manifest import effective_status

    try:
        if existing_store_attrs(store) is None or run not in list_runs(store):
            return {}
        previous = read_manifest(store, run)
    except StoreFormatError:
        return {}
    if effective_status(previous) == "running":
        return {}  # a live run: the lock refuses this one
    return {s.name: dict(s.info) for s in previous.stages if s.status == "completed"}


def write_manifest_results(store: Store, run: str, results: dict, fixed_seconds: dict | None = None) -> None:
    """Add the report figures (quality, plot, peak memory) and the final ``fixed_seconds``
    (:mod:`flows._fixed_time`) to the completed run's manifest."""
    manifest = read_manifest(store, run)
    manifest.results.update(results)
    manifest.fixed_seconds.update(fixed_seconds or {})
    write_manifest(store, manifest)


def _builder_warm_up_seconds(client: Any, builder: str, dtype: str) -> list[float]:
    """``[seconds]`` of the builder worker's warm-up (:func:`tasks._warm_up.ended_warm_up_seconds`), ``[]`` when it
    is gone (killed: its warm-up went with it; a worker that took its stages over warmed up in them)."""
    if builder not in worker_list(client):
        return []
    return client.run(ended_warm_up_seconds, (dtype,), workers=[builder], on_error="ignore").get(builder, [])


def _maps_points_outside(ctx: Any) -> bool:
    """Whether the run's kNN stage left points outside the fit set (held out, or copies of a fit point): their
    out-of-sample map queries the kNN index on every worker, which then need NN-descent's kernels."""
    knn = next((s.info for s in ctx.manifest.stages if s.name == "knn"), {})
    return knn.get("n_heldout", 1) > 0


def _record_fit_results(results: dict, info: dict) -> None:
    for key in ("eigenvalues", "mu", "sigma", "theta", "beta", "n_labeled", "n_components_graph", "n_duplicates"):
        if key in info:
            results[key] = info[key]


def _output_paths(method: str, run: str, info: dict) -> dict[str, Any]:
    entry = get_entry(method)
    out: dict[str, Any] = {"embedding": f"embeddings/{run}"}
    for name in (LABELS, SCORES):
        if name in entry.outputs:
            out[name] = f"outputs/{run}/{name}"
    if "label_counts" in info:
        out["label_counts"] = info["label_counts"]
    return out


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
    on the workers and maps them from their stored candidates (:mod:`tasks.sharded_extend`: no process holds an
    index of all fit rows; a ``knn`` stage before ``extend-points``); False rebuilds one index of the fit rows
    (in the worker that restores the model); None (default): as the model's run was fitted.

    ``use_rep``: for an AnnData ``new_source``, ``"X"`` (default) or the ``obsm`` key of the representation the
    model was fitted on; ``out_store`` keeps the new file's obs names for the export back into it.
    """
    fixed = entry_seconds()  # first: the flow engine's start ends here
    bridge_prefect_sigterm()  # a CLI run's SIGTERM reaches its guard (flows._stop) whatever Prefect's handler does
    t_flow = time.perf_counter()
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
    _check_new_points_header(model_store, new_source, use_rep)
    check_intact(model_store)  # the model store's X (a kNN index may be rebuilt from it)
    out_run = new_run_id("extend", run_name)
    warm_up = model_dtypes(model_store, model, use_shards)
    with dask_client_in_background(scheduler, n_workers=n_workers) as pending:
        start_when_ready(pending, warm_up)  # the workers' warm-up overlaps the ingest
        emit("start", "ingest")
        with timed() as t_ingest:
            ingested = ingest_task(new_source, out_store, chunk_rows=chunk_rows, overwrite=overwrite,
                                   use_rep=use_rep)
        emit("end", "ingest", t_ingest["seconds"])
        out = Store.open(out_store, "r+")  # the output store's one whole-store check
        check_intact(out)
        from eigenflow.storage.arrays import x_shape

        if ingested["d"] != x_shape(model_store)[1]:
            raise StoreFormatError(f"new points must have {x_shape(model_store)[1]} features like the model's "
                                   f"training data; got {ingested['d']}")
        parameters = {"store": recorded_location(store), "model_run": model_run, "method": method,
                      "new_source": str(new_source),
                      "chunk_rows": chunk_rows, "n_workers": n_workers, "scheduler": scheduler, "sharded": use_shards,
                      "use_rep": use_rep}
        with store_lock(out, out_run), \
                run_context(out, out_run, flow="extend", parameters=parameters, seed=None,
                            pending_client=pending, token=store_token(out),
                            stages_before=[("ingest", t_ingest["seconds"], ingested)], fixed_seconds=fixed) as ctx:
            client = ctx.require_cluster()
            warm = [finish_on_workers(client, dtype=dtype) for dtype in warm_up]
            if use_shards:
                with ctx.stage("knn") as rec:
                    if candidates_complete(ctx.store, ctx.run):  # a resumed run keeps them
                        rec.info.update(reused=True)
                    else:
                        rec.info.update(extend_candidates_task(model_store, model_run, ctx.store, ctx.run,
                                                               n_shards=(fit_record or {}).get("n_shards")))
            with ctx.stage("extend-points") as rec:
                rec.info.update(extend_points_task(model_store, model_run, store_token(model_store), ctx.store,
                                                   ctx.run, stored_candidates=use_shards))
            ctx.manifest.results.update(_output_paths(method, out_run, rec.info))
            ctx.manifest.results.update({"n": ingested["n"], "model_store": parameters["store"], "model_run": model_run,
                                         "method": method})
            ctx.manifest.fixed_seconds["compile"] = max((s for w in warm for s in client.gather(w)), default=0.0)
            figures = figures_on_worker(client, ctx.store, ctx.run, method)
            work_ended = time.perf_counter()
            pending.begin_close()  # the cluster's shutdown overlaps the run's end (a client of its own)
    summary = ctx.summary()
    summary["results"].update(publish_run(summary, out, method, parameters, {"points": ingested["n"]},
                                          figures))
    fixed = final_write({**summary["fixed_seconds"], **cluster_seconds(pending)}, work_ended,
                        lambda seconds: write_manifest_results(out, out_run, summary["results"], seconds))
    return {**summary, "fixed_seconds": fixed, "total_seconds": time.perf_counter() - t_flow}



def _check_new_points_header(store: Store, new_source: str, use_rep: str | None = None) -> None:
    """New points must have the model's number of features: checked from the source's header, before the ingest
    (a CSV, whose width is known only once read, is checked after it)."""
    from eigenflow.storage.arrays import x_shape
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
