"""The ``embed`` and ``extend`` Prefect flows.

``embed``: ingest -> (method's fit stages: kNN graph, weights, eigensolve + model) -> embedding of every point
(fitted rows written back, held-out rows extended out-of-sample), per chunk on Dask -> manifest.
``extend``: embed the points of a new file or store with a model stored by ``embed``, into its own store.

Both run with Prefect's default task runner (tasks in the flow process) and submit their per-chunk work to
the Dask client the flow owns (:mod:`flows.cluster`). Without ``PREFECT_API_URL`` Prefect runs ephemerally;
with it, runs are reported to that server. A re-run with the same ``run_name`` on the same store reuses the
tasks that had finished (Prefect result cache, see :mod:`tasks.common`).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from spectral._validation import check_float, check_int
from storage.manifest import list_runs, read_manifest
from storage.models import list_models
from storage.errors import StoreFormatError
from tasks.common import store_token, warm_nndescent
from tasks.ingest import ingest_task

from flows._runtime import new_run_id, run_context, timed, emit
from flows._ingested_run import ingested_run
from flows.cluster import dask_client_in_background
from flows.methods import get_method

DEFAULT_METHOD = "laplacian_eigenmaps"


@flow(name="embed", validate_parameters=True)
def embed(
    source: str,
    store: str,
    *,
    method: str = DEFAULT_METHOD,
    n_components: int = 2,
    n_neighbors: int = 15,
    weighting: str = "local_scaling",
    symmetrize: str = "or",
    normalization: str = "symmetric",
    eigen_solver: str = "auto",
    knn_method: str = "auto",
    metric: str = "euclidean",
    on_disconnected: str = "raise",
    labels: str | None = None,
    chunk_rows: int | None = None,
    holdout: float = 0.0,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Embed the points of ``source`` into ``store`` and return a summary of the run.

    Parameters
    ----------
    source : str
        A ``.npy`` / ``.npz`` / ``.csv`` / ``.parquet`` file or a zarr store; ``store`` itself (or a store
        already ingested from ``source``) skips the ingest.
    store : str
        The eigenflow store to write (local path or fsspec URL).
    method : str
        A registered method (:data:`flows.methods.METHODS`).
    n_components, n_neighbors, weighting, symmetrize, normalization, eigen_solver, knn_method, metric, on_disconnected
        As :class:`spectral.embedding.LaplacianEigenmaps`.
    labels : str, optional
        ``.npy`` file of labels (-1 = unlabeled) ingested with X.
    chunk_rows : int, optional
        Rows per chunk of the store (the unit of Dask work and of writes).
    holdout : float in [0, 1)
        Fraction of points left out of the fit (drawn from ``random_state``) and embedded out-of-sample.
        ``outputs/<run>/in_fit`` records which points were fitted.
    random_state : int or None
        The run's one seed.
    scheduler : str, optional
        Address of a Dask scheduler; default ``$EIGENFLOW_SCHEDULER``, else a local cluster of ``n_workers``
        single-threaded worker processes.
    run_name : str, optional
        Run id; reuse the id of a failed run to resume it. Default: a fresh ``embed-<UTC time>-<hex>``.
    overwrite : bool
        Replace an existing store at ``store`` by a new ingest of ``source``.

    Returns
    -------
    dict
        ``store``, ``run``, ``status``, ``seconds``, ``stages`` (name -> seconds), ``results``.
    """
    t_flow = time.perf_counter()
    spec, params = check_embed_parameters(method, n_workers, locals())
    run = new_run_id("embed", run_name)
    with ingested_run(source, store, run=run, flow="embed", method=method, params=params, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state) as (ctx, ingested):
        n_fit = ingested["n"] - round(holdout * ingested["n"])
        warm = []
        if spec.uses_nndescent_queries(params, n_fit):
            warm = _warm_workers(ctx.require_cluster())
        try:
            spec.fit(ctx, params)
            ctx.require_cluster()
            with ctx.stage("embed-points") as rec:
                rec.info.update(spec.embed_points(ctx))
            ctx.manifest.results.update({"n": ingested["n"], "n_fit": n_fit, "method": method,
                                         "embedding": f"embeddings/{run}"})
        finally:
            if ctx.pending_client.done():
                spec.cleanup(ctx)
            del warm
    return {**ctx.summary(), "total_seconds": time.perf_counter() - t_flow}


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
) -> dict[str, Any]:
    """Embed the points of ``new_source`` with the model of ``run`` stored in ``store``, into ``out_store``.

    ``run`` defaults to the latest completed ``embed`` run of ``store`` that has a model. ``new_source`` is
    ingested into ``out_store`` (skipped if it is that store); the embedding is written to
    ``embeddings/<extend run>`` of ``out_store``, with a manifest naming the model store and run.
    """
    t_flow = time.perf_counter()
    n_workers = check_int("n_workers", n_workers, low=1)
    model_run = run if run is not None else latest_model_run(store)
    if model_run not in list_models(store):
        raise StoreFormatError(f"store {store} has no model for run {model_run!r}; runs with models: "
                               f"{list_models(store)}")
    spec = get_method(read_manifest(store, model_run).parameters.get("method", DEFAULT_METHOD))
    out_run = new_run_id("extend", run_name)
    with dask_client_in_background(scheduler, n_workers=n_workers) as pending:
        emit("start", "ingest")
        with timed() as t_ingest:
            ingested = ingest_task(new_source, out_store, chunk_rows=chunk_rows, overwrite=overwrite)
        emit("end", "ingest", t_ingest["seconds"])
        parameters = {"store": str(store), "model_run": model_run, "new_source": str(new_source),
                      "chunk_rows": chunk_rows, "n_workers": n_workers, "scheduler": scheduler}
        with run_context(out_store, out_run, flow="extend", parameters=parameters, seed=None,
                         pending_client=pending, token=store_token(out_store),
                         stages_before=[("ingest", t_ingest["seconds"], ingested)]) as ctx:
            ctx.require_cluster()
            with ctx.stage("extend-points") as rec:
                rec.info.update(spec.extend_points(ctx, store, model_run, store_token(store)))
            ctx.manifest.results.update({"n": ingested["n"], "model_store": str(store), "model_run": model_run,
                                         "embedding": f"embeddings/{out_run}"})
    return {**ctx.summary(), "total_seconds": time.perf_counter() - t_flow}


def check_embed_parameters(method: str, n_workers: int, arguments: dict) -> tuple[Any, dict]:
    """Validate the arguments of :func:`embed` (before any work); returns ``(method spec, method params)``."""
    spec = get_method(method)
    params = {name: value for name, value in arguments.items() if name in spec.parameters}
    spec.validate(params)
    check_float("holdout", arguments.get("holdout", 0.0), low=0.0, high=1.0, high_inclusive=False)
    check_int("n_workers", n_workers, low=1)
    return spec, params


def latest_model_run(store: str) -> str:
    """The most recent completed ``embed`` run of ``store`` that has a model."""
    with_models = set(list_models(store))
    done = [m for m in (read_manifest(store, r) for r in list_runs(store))
            if m.flow == "embed" and m.status == "completed" and m.run_id in with_models]
    if not done:
        raise StoreFormatError(f"store {store} has no completed embed run with a model; run `eigenflow embed` first")
    return max(done, key=lambda m: m.started).run_id


def _warm_workers(client) -> list:
    """Compile pynndescent on every worker now (one pinned task each), overlapping the fit stages."""
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    return [client.submit(warm_nndescent, workers=[w], allow_other_workers=False, pure=False) for w in workers]
