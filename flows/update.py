"""The ``update`` flow: a growing source's new rows appended to its store and placed with the store's current model.

The body reads as its stages: check the store, its current model and the source's new rows, found by content
(:func:`storage.append.new_rows`: a changed or vanished part is refused before anything is touched) -> the store's
lock -> cluster -> ``append`` (the new rows, with their checksums) -> ``map-points`` (the model's out-of-sample map
of the rows no run has placed yet, into ``embeddings/<run>`` of the same store) -> ``drift`` (does the model still
describe them: :mod:`tasks.bodies.drift`) -> the report. The store's table of results
(:mod:`storage.results_table`) then gives every row once: ``export`` and the AnnData export read it.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from eigenflow.storage.append import new_rows
from eigenflow.storage.arrays import x_shape
from eigenflow.storage.lock import store_lock
from eigenflow.storage.manifest import add_results, read_manifest
from eigenflow.storage.results_table import placed_segments
from eigenflow.tasks.bodies.drift import DEFAULT_MAX_SHARE
from eigenflow.tasks.checks import check_update_arguments
from eigenflow.tasks.model_index import model_index
from eigenflow.tasks.points import extend_points_task
from eigenflow.tasks.update import DEFAULT_REFIT_SHARE, append_task, drift_task, refit_arguments, refit_reason

from eigenflow.flows.cluster import dask_client, keeps_index
from eigenflow.flows.embed import embed, output_paths
from eigenflow.flows.reporting import publish_drift, publish_run
from eigenflow.flows.run import new_run_id, open_run, run_watch


@flow(name="update", validate_parameters=True)
def update(
    source: str,
    store: str,
    *,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    use_rep: str | None = None,
    labels_obs: str | None = None,
    random_state: int = 0,
    max_share: float = DEFAULT_MAX_SHARE,
    refit: str = "auto",
    refit_share: float = DEFAULT_REFIT_SHARE,
    keep_index: bool | None = None,
) -> dict[str, Any]:
    """Append the rows of ``source`` that ``store`` does not hold yet and place them with the store's current model.

    ``source``: the growing source the store was ingested from (a folder or glob of partitions, or an array whose
    rows are appended: :mod:`storage.partitions`). The current model is the one of the store's latest completed
    ``embed`` run; rows appended since it are mapped by its out-of-sample map. ``random_state`` draws the drift
    samples; ``max_share``: the share of new rows beyond the fitted rows' 99th-percentile k-th-neighbour distance
    above which the batch is flagged as drifted (in (0, 1]).

    ``refit`` (``"auto"``, ``"never"``, ``"always"``): after the rows are placed, the model is fitted again on every
    row when the policy says so (:func:`tasks.update.refit_reason`: ``"auto"`` when the rows mapped since the last
    fit reach ``refit_share`` of its fitted rows, or the batch drifted), by the ``embed`` flow on the store itself,
    with the last fit's parameters and its coordinates aligned to the previous results (``align=True``).

    ``keep_index``: leave the model's kNN index on the cluster for later ``update`` / ``extend`` runs
    (:mod:`tasks.model_index`); None (default): when ``scheduler`` names an existing cluster, which outlives the run.

    Returns the run's summary; ``results`` holds ``rows`` (``[start, stop)`` placed by this run), ``model_run``,
    ``drift`` (the figures of :mod:`tasks.bodies.drift`) and ``refit`` (the decision, its reason and the refit's
    run and alignment figures).
    """
    model = check_update_arguments(source, store, n_workers=n_workers, max_share=max_share, refit=refit,
                                   refit_share=refit_share, use_rep=use_rep, labels_obs=labels_obs)
    opened, model_run, fitted, method = model.store, model.run, model.manifest, model.method
    options = {"x_key": use_rep or "X", "labels_key": labels_obs or "auto"}
    new = new_rows(opened, source, **options)  # refuses a changed or vanished part, before any start-up
    run = new_run_id("update", run_name)
    parameters = {"source": str(source), "store": str(opened), "model_run": model_run, "method": method,
                  "n_workers": n_workers, "scheduler": scheduler, "use_rep": use_rep, "labels_obs": labels_obs,
                  "max_share": max_share, "refit": refit, "refit_share": refit_share}

    keep = keeps_index(keep_index, scheduler)
    t0 = time.perf_counter()
    with store_lock(opened, run), dask_client(scheduler, n_workers=n_workers) as client, run_watch(client) as watch:
        before = [("cluster", time.perf_counter() - t0, {})]
        with open_run(opened, run, client, flow="update", parameters=parameters, seed=random_state,
                      stages_before=before, stop=watch) as ctx:
            with ctx.stage("append") as rec:
                rec.info.update(append_task(ctx.store, source, new, **options))
            rows = (placed_segments(ctx.store)[-1].stop, x_shape(ctx.store)[0])
            ctx.manifest.results.update(model_run=model_run, method=method, rows=list(rows), n=rows[1],
                                        n_new=rows[1] - rows[0])
            if rows[1] > rows[0]:
                with ctx.stage("map-points") as rec:
                    index, rec.info["model_index"] = model_index(ctx.store, model_run, fitted.started, keep=keep)
                    rec.info.update(extend_points_task(ctx.store, model_run, ctx.store, ctx.run, index=index, rows=rows,
                                                       on_progress=ctx.progress("map-points")))
                ctx.manifest.results.update(output_paths(method, run, rec.info))
                with ctx.stage("drift") as rec:
                    rec.info.update(drift_task(ctx.store, model_run, ctx.run, rows, seed=random_state,
                                               max_share=max_share))
                ctx.manifest.results["drift"] = {k: v for k, v in rec.info.items() if not k.startswith("worker")}
            mapped = rows[1] - int(fitted.results["n"])  # decided inside the run: a completed run holds its decision
            n_fit = int(fitted.results.get("n_fit") or fitted.results["n"])
            reason = refit_reason(refit, share=refit_share, n_fit=n_fit, n_mapped=mapped,
                                  drifted=bool(ctx.manifest.results.get("drift", {}).get("drifted")))
            decision = ctx.manifest.results["refit"] = {"decided": reason is not None, "reason": reason or (
                f"refit={refit}: {mapped} rows mapped since the last fit, below {refit_share:.0%} of its {n_fit} "
                "fitted rows, and no drift")}
    summary = ctx.summary()
    sizes = {"points": rows[1], "new": rows[1] - rows[0], "model": model_run, **summary["results"].get("drift", {}),
             "refit": decision["reason"]}
    summary["results"].update(publish_run(summary, ctx.store, method, parameters, sizes, figures={}))
    publish_drift(ctx.store)
    add_results(ctx.store, run, summary["results"])
    if reason is not None:  # the update's rows are placed and its lock released: the refit is an embed run of its own
        try:
            refitted = embed(str(opened), str(opened), align=True, scheduler=scheduler, n_workers=n_workers,
                             keep_index=keep,
                             **refit_arguments(fitted, method))
        except Exception as exc:
            add_results(ctx.store, run, {"refit": {**decision, "error": f"{type(exc).__name__}: {exc}"}})
            raise
        solve = {s.name: s.info for s in read_manifest(opened, refitted["run"]).stages}.get("eigensolve", {})
        decision.update(run=refitted["run"], alignment=refitted["results"].get("alignment"), stages=refitted["stages"],
                        eigensolve={k: solve[k] for k in ("eigen_solver", "n_iter", "warm_start") if k in solve})
        add_results(ctx.store, run, {"refit": decision})
    return summary
