"""The ``embed`` flow: any registered method, from a source file or store to every point's outputs in the store.

The body reads as the run's stages, in order: check the arguments (before anything is touched) -> the store's lock
(a new store is claimed before its ingest) -> cluster ->
ingest -> the method's fit stages (:func:`tasks.fitting.fit_stages`; Laplacian eigenmaps: kNN graph -> weights ->
eigensolve) -> the outputs of every point, chunk by chunk on the workers (``embed-points``: fit rows get their
fitted results, held-out rows the out-of-sample map) -> the report (quality figures, plot, Prefect artifacts).

Each stage is a Prefect task whose work runs on the Dask workers of the client the flow owns. Without
``PREFECT_API_URL`` Prefect runs ephemerally; with it, runs are reported to that server. A re-run with the same
``run_name`` on the same store resumes that run: the stages its manifest records as completed, whose outputs
are intact in the store, are reused (:func:`tasks.resume.finished_stages`).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from eigenflow.storage import layout
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.lock import store_lock
from eigenflow.storage.manifest import add_results
from eigenflow.storage.run_outputs import drop_run_outputs
from eigenflow.tasks.checks import check_embed_arguments, opened_or_url
from eigenflow.tasks.fitting import FitRequest, Stage, fit_stages
from eigenflow.tasks.model_index import model_index_name, release_index
from eigenflow.tasks.points import embed_points_task
from eigenflow.tasks.registry import DEFAULT_METHOD, LABELS, SCORES, get_entry
from eigenflow.tasks.resume import check_run_identity, finished_stages
from eigenflow.tasks.sharded_choice import resolve_sharded
from eigenflow.tasks.update import align_task
from eigenflow.tasks.bodies.stage_handoff import PLUGIN_NAME as HANDOFF_PLUGIN, HandoffPlugin
from eigenflow.tasks.warm_up import planned_dtype, warm_workers

from eigenflow.flows.cluster import dask_client, keeps_index
from eigenflow.flows.reporting import figures_on_worker, publish_run
from eigenflow.flows.run import RunContext, ingest, new_run_id, open_run, run_watch


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
    align: bool = False,
    keep_index: bool | None = None,
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
        workers and solve with the distributed eigensolver (:mod:`tasks.bodies.sharded_eigenmaps`; needs
        ``normalization="symmetric"``). None (default): sharded when the single-process kNN stage would need more
        than half of the smallest worker's memory.
    overwrite_run : bool
        Start the run ``run_name`` again from nothing instead of resuming it: its identity is not checked (its
        manifest may be unreadable) and what it wrote before is dropped (:func:`storage.run_outputs.drop_run_outputs`).
    use_rep : str, optional
        AnnData source: X is ``"X"`` (default) or this key of ``obsm`` (e.g. ``"X_pca"``).
    labels_obs : str, optional
        AnnData source: the ``obs`` column of the labels (categorical or string; missing values are unlabeled).
    align : bool
        A refit: the eigensolver starts from the store's previous results (Laplacian eigenmaps), and the run's
        coordinates are aligned to them on the rows both hold (an ``align`` stage after the fit:
        :mod:`tasks.bodies.alignment`), so that points whose data did not change keep their place.
    keep_index : bool or None
        Leave the fit's kNN index on the cluster for the later ``update`` / ``extend`` runs that map rows with the
        model (:mod:`tasks.model_index`); None (default): when ``scheduler`` names an existing cluster, which
        outlives the run.

    Returns
    -------
    dict
        ``store``, ``run``, ``flow``, ``status``, ``seconds``, ``stages`` (name -> seconds), ``results``,
        ``fixed_seconds`` (``compile``: the workers' load of the kNN kernels), ``total_seconds``.
    """
    target = store if overwrite else opened_or_url(store)  # an existing store's one validation, kept by the run
    full = check_embed_arguments(source, target, method, params, labels=labels, holdout=holdout, n_workers=n_workers,
                                 random_state=random_state, overwrite=overwrite, sharded=sharded, use_rep=use_rep,
                                 labels_obs=labels_obs, run=run_name)
    run = new_run_id("embed", run_name)
    identity = {"method": method, "labels": labels, "holdout": holdout, "sharded": sharded, "use_rep": use_rep,
                "labels_obs": labels_obs, **({"align": True} if align else {}), **full}
    check_run_identity(target, run, identity, overwrite_run=overwrite_run)
    finished = {} if overwrite_run or run_name is None else finished_stages(target, run)
    parameters = {"source": str(source), "chunk_rows": chunk_rows, "n_workers": n_workers, "scheduler": scheduler,
                  **identity}

    t0 = time.perf_counter()
    with store_lock(target, run), dask_client(scheduler, n_workers=n_workers) as client, run_watch(client) as watch:
        cluster_seconds = time.perf_counter() - t0
        warm = warm_workers(client, planned_dtype(source, target, full, holdout, sharded, overwrite))
        client.register_plugin(HandoffPlugin(), name=HANDOFF_PLUGIN)  # stage outputs kept for the next stage
        ingested, opened, t_ingest = ingest(source, target, client, labels=labels, chunk_rows=chunk_rows,
                                            overwrite=overwrite, use_rep=use_rep, labels_obs=labels_obs)
        before = [("cluster", cluster_seconds, {}), ("ingest", t_ingest, ingested)]
        with open_run(opened, run, client, flow="embed", parameters=parameters, seed=random_state,
                      stages_before=before, stop=watch) as ctx:
            if overwrite_run:
                drop_run_outputs(ctx.store, ctx.run)
            check_labels_present(method, ingested, store)
            use_shards = resolve_sharded(sharded, method, full, ingested["n"], ingested["d"], client)
            ctx.manifest.results.update(sharded=use_shards, n=ingested["n"], method=method,
                                        n_fit=ingested["n"] - round(holdout * ingested["n"]))
            index_name = model_index_name(ctx.store, ctx.run, ctx.manifest.started)
            keep = keeps_index(keep_index, scheduler)
            request = FitRequest(store=ctx.store, run=ctx.run, token=ctx.token, method=method, params=full,
                                 holdout=holdout, random_state=random_state, sharded=use_shards, warm_start=align,
                                 index_name=index_name, keep_index=keep)
            fitted = False
            try:
                for stage in fit_stages(request):
                    run_stage(ctx, stage, finished)
                if align:
                    with ctx.stage("align") as rec:
                        rec.info.update(align_task(ctx.store, ctx.run))
                    ctx.manifest.results["alignment"] = dict(rec.info)
                with ctx.stage("embed-points") as rec:
                    rec.info.update(embed_points_task(ctx.store, ctx.run, index_name, holdout=holdout,
                                                      random_state=random_state,
                                                      on_progress=ctx.progress("embed-points")))
                ctx.manifest.results.update(output_paths(method, run, rec.info))
                fitted = True
            finally:  # a completed fit's index stays for the runs that map rows with it (tasks.model_index)
                release_index(ctx.store, index_name, ctx.run, keep=keep and fitted)
            ctx.manifest.fixed_seconds["compile"] = max(client.gather(warm), default=0.0)
            figures = figures_on_worker(client, ctx.store, ctx.run, method)
    summary = ctx.summary()
    sizes = {"points": ingested["n"], "fitted": ctx.manifest.results["n_fit"], "features": ingested["d"]}
    summary["results"].update(publish_run(summary, ctx.store, method, full, sizes, figures))
    add_results(ctx.store, run, summary["results"])
    return summary


def run_stage(ctx: RunContext, stage: Stage, finished: dict[str, dict]) -> None:
    """Run one fit stage, or reuse it when an earlier attempt of the run completed it and its outputs are intact."""
    if stage.name in finished and stage.outputs_intact():
        ctx.record_stage(stage.name, 0.0, {**finished[stage.name], "reused": True})
        record_fit_results(ctx.manifest.results, finished[stage.name])
        return
    with ctx.stage(stage.name) as rec:
        rec.info.update(stage.call())
    record_fit_results(ctx.manifest.results, rec.info)


def check_labels_present(method: str, ingested: dict, store: str) -> None:
    """A method that needs labels refuses a store ingested without them (a source whose labels were unknown
    before its ingest: a CSV)."""
    if get_entry(method).needs_labels and not ingested.get(layout.ATTR_HAS_LABELS, True):
        raise StoreFormatError(f"method {method!r} needs labels; store {store} has none (pass labels=...)")


def record_fit_results(results: dict, info: dict) -> None:
    """Copy the figures of a fit stage's record that the run's results show (eigenvalues, fitted scales, ...)."""
    for key in ("eigenvalues", "mu", "sigma", "theta", "beta", "n_labeled", "n_components_graph", "n_duplicates",
                "n_clusters", "eigengap", "cluster_sizes"):
        if key in info:
            results[key] = info[key]


def output_paths(method: str, run: str, info: dict) -> dict[str, Any]:
    """Where the run's per-point outputs are in the store (and the label counts of a classifier)."""
    entry = get_entry(method)
    out: dict[str, Any] = {"embedding": f"embeddings/{run}"}
    for name in (LABELS, SCORES):
        if name in entry.outputs:
            out[name] = f"outputs/{run}/{name}"
    if "label_counts" in info:
        out["label_counts"] = info["label_counts"]
    return out

