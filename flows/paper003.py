"""The GraphKPCA flow (paper 003): ingest -> kNN graph -> GraphKPCA at scale -> embedding of every point.

``graph_kpca(source, store, n_landmarks=2000, n_neighbors=10, ...)`` builds the kNN graph of the fit rows
(NN-descent at scale, :func:`tasks.laplacian_eigenmaps.knn_task`), fits graph-regularized kernel PCA
(eq. 13; eq. 24 constraints from stored labels / must-link / cannot-link pairs) with Nystrom features and
the implicit operator Phi Phi^T - gamma L_G (no n x n matrix), stores the model in ``models/<run>`` and
writes ``embeddings/<run>`` for every row of X chunk by chunk on the flow's Dask cluster. The method is
also registered as ``"graph_kpca"`` for the generic ``embed`` / ``extend`` flows: ``extend`` rebuilds the kNN
index over the model's fit points from the model store's X (or takes the one the fit left on the cluster),
queries it per chunk of new points and writes their out-of-sample embedding (:func:`tasks.paper003.extend_points_task`).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from spectral._validation import check_choice, check_float, check_int
from spectral.graph_kpca.graphs import GRAPH_WEIGHTS, LAPLACIANS
from spectral.knn import METHODS as KNN_METHODS
from tasks import paper003 as t
from tasks.laplacian_eigenmaps import knn_task, release_index

from flows._runtime import RunContext, new_run_id
from flows._ingested_run import ingested_run
from flows.methods import Method, register_method

#: Defaults: 2,000 landmarks (the scale target of issue 8), Gaussian kNN weights, unnormalized Laplacian.
DEFAULTS = {"kernel": "rbf", "kernel_gamma": None, "gamma": 1.0, "graph_weight": "gaussian",
            "laplacian": "unnormalized", "n_landmarks": 2000, "nystrom_rank": None, "eigen_solver": "arpack",
            "gamma_must": 0.5, "gamma_cannot": 0.5}
FIT_PARAMETERS = ("n_components", "kernel", "kernel_gamma", "gamma", "graph_weight", "laplacian", "n_landmarks",
                  "nystrom_rank", "eigen_solver", "gamma_must", "gamma_cannot", "random_state")


def _validate(p: dict) -> None:
    check_int("n_components", p["n_components"], low=1)
    check_int("n_neighbors", p["n_neighbors"], low=1)
    check_int("n_landmarks", p["n_landmarks"], low=1)
    if p["nystrom_rank"] is not None:
        check_int("nystrom_rank", p["nystrom_rank"], low=1, high=p["n_landmarks"])
    if p["kernel_gamma"] is not None:
        check_float("kernel_gamma", p["kernel_gamma"], low=0.0, low_inclusive=False)
    for name in ("gamma", "gamma_must", "gamma_cannot"):
        check_float(name, p[name], low=0.0)
    check_choice("graph_weight", p["graph_weight"], tuple(w for w in GRAPH_WEIGHTS if w != "cosine"))
    check_choice("laplacian", p["laplacian"], LAPLACIANS)
    check_choice("eigen_solver", p["eigen_solver"], ("arpack", "lobpcg", "randomized"))
    check_choice("knn_method", p["knn_method"], KNN_METHODS)


def _fit(ctx: RunContext, p: dict) -> None:
    if p["holdout"] > 0:
        ctx.require_cluster()  # the kNN stage publishes its index on the cluster for the held-out queries
    with ctx.stage("knn") as rec:
        rec.info.update(knn_task(ctx.store, ctx.run, ctx.token, n_neighbors=p["n_neighbors"],
                                 knn_method=p["knn_method"], metric="euclidean", holdout=p["holdout"],
                                 random_state=p["random_state"]))
    with ctx.stage("graph-kpca-fit") as rec:
        rec.info.update(t.fit_graph_kpca_task(ctx.store, ctx.run, ctx.token, **{k: p[k] for k in FIT_PARAMETERS}))
        ctx.manifest.results["eigenvalues"] = rec.info["eigenvalues"]


@flow(name="graph_kpca", validate_parameters=True)
def graph_kpca(
    source: str,
    store: str,
    *,
    n_components: int = 2,
    kernel: str = DEFAULTS["kernel"],
    kernel_gamma: float | None = DEFAULTS["kernel_gamma"],
    gamma: float = DEFAULTS["gamma"],
    n_neighbors: int = 10,
    graph_weight: str = DEFAULTS["graph_weight"],
    laplacian: str = DEFAULTS["laplacian"],
    n_landmarks: int = DEFAULTS["n_landmarks"],
    nystrom_rank: int | None = DEFAULTS["nystrom_rank"],
    eigen_solver: str = DEFAULTS["eigen_solver"],
    gamma_must: float = DEFAULTS["gamma_must"],
    gamma_cannot: float = DEFAULTS["gamma_cannot"],
    knn_method: str = "auto",
    labels: str | None = None,
    chunk_rows: int | None = None,
    holdout: float = 0.0,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fit GraphKPCA on ``source`` and write the embedding of every point into ``store``.

    Parameters are those of :class:`spectral.graph_kpca.GraphKPCA` (``kernel_gamma`` is the kernel's gamma,
    default 1 / n_features; ``gamma`` the graph weight of eq. 13) plus the kNN / store / cluster options
    of :func:`flows.embed.embed`. ``holdout`` points are left out of the fit and extended out-of-sample.
    Returns ``store``, ``run``, ``status``, ``seconds``, ``stages``, ``results``.
    """
    params = {k: v for k, v in locals().items() if k in FIT_PARAMETERS + ("n_neighbors", "knn_method", "holdout")}
    _validate(params)
    check_float("holdout", holdout, low=0.0, high=1.0, high_inclusive=False)
    n_workers = check_int("n_workers", n_workers, low=1)
    run = new_run_id("graph_kpca", run_name)
    t_flow = time.perf_counter()
    with ingested_run(source, store, run=run, flow="embed", method=t.METHOD, params=params, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state) as (ctx, ingested):
        try:
            _fit(ctx, params)
            ctx.require_cluster()
            with ctx.stage("embed-points") as rec:
                rec.info.update(t.embed_points_task(ctx.store, ctx.run, ctx.token))
            ctx.manifest.results.update({"n": ingested["n"], "method": t.METHOD, "embedding": f"embeddings/{run}"})
        finally:
            if ctx.pending_client.done():
                release_index(ctx.token, ctx.run)
    return {**ctx.summary(), "total_seconds": time.perf_counter() - t_flow}


def _fit_from_embed(ctx: RunContext, p: dict) -> None:
    """``embed(method="graph_kpca")``: the embed flow's shared parameters, this module's defaults."""
    params = {**DEFAULTS, **{k: p[k] for k in ("n_components", "n_neighbors", "knn_method", "holdout",
                                                "random_state")}}
    _validate(params)
    _fit(ctx, params)


register_method(Method(
    name=t.METHOD,
    fit=_fit_from_embed,
    embed_points=lambda ctx: t.embed_points_task(ctx.store, ctx.run, ctx.token),
    extend_points=lambda ctx, store, run, token: t.extend_points_task(store, run, token, ctx.store, ctx.run,
                                                                      ctx.token),
    parameters=("n_components", "n_neighbors", "knn_method", "holdout", "random_state"),
    cleanup=lambda ctx: release_index(ctx.token, ctx.run),  # embed() calls it once the cluster is up
))
