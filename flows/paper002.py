"""The TSK flow (paper 002): ingest -> kNN graph -> Hein-Maier weights -> m eigenpairs + LP -> labels of every point.

``tsk(source, store, labels=..., n_components=30, ...)`` ingests ``source`` with its labels (-1 =
unlabeled), builds the k = 6 kNN graph with the weights of eq. 2, computes the m smallest eigenpairs of the
normalized Laplacian with the scalable solvers (lobpcg + AMG above 2,000 points), learns the spectrum by the
linear program of eq. 14 (m + l variables) and writes, chunk by chunk on the flow's Dask cluster, the
transductive scores ``outputs/<run>/scores`` (n, c) and labels ``outputs/<run>/labels`` (n,) of every point.

The method is also registered as ``"tsk"`` for the generic ``embed`` / ``extend`` flows:
``embed(source, store, method="tsk", n_components=m, ...)`` (m = ``n_components``; the other TSK parameters
take :data:`DEFAULTS`; no hold-out) writes the same scores / labels plus the kernel features ``V U^1/2``
(eq. 9-10) as ``embeddings/<run>`` (n, m); ``extend(store, new_source, out_store)`` with a stored ``tsk`` model
(from either flow) labels new points by eq. 17-19 (kNN rows among the model store's X, queried per chunk).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from spectral._validation import check_choice, check_float, check_int
from spectral.errors import ParameterError
from spectral.knn import METHODS as KNN_METHODS
from spectral.spectral_kernels.basis import EIGEN_SOLVERS
from spectral.spectral_kernels.lp import CONSTRAINTS
from tasks import laplacian_eigenmaps as graph_tasks
from tasks import paper002 as t

from flows._runtime import RunContext, new_run_id
from flows._ingested_run import ingested_run
from flows.methods import Method, register_method

WEIGHTING, SYMMETRIZE = t.WEIGHTING, t.SYMMETRIZE  # paper 002 eq. 2
#: TSK parameters that ``embed(method="tsk")`` does not expose. ``constraint="none"``: the variant that
#: reproduces Table 3 (benchmarks/results/tsk.md); eq. 8 with the trivial vector kept has the optimum
#: mu = 0 for c > 2 classes, and embed offers no way to change it.
DEFAULTS = {"eta": 2.0, "beta": "auto", "constraint": "none", "include_trivial": True, "class_weight": None,
            "eigen_tol": None}


def _validate(p: dict) -> None:
    check_int("n_components", p["n_components"], low=1)
    check_int("n_neighbors", p["n_neighbors"], low=1)
    check_choice("knn_method", p["knn_method"], KNN_METHODS)
    check_float("eta", p["eta"], low=1.0)
    if p["beta"] != "auto":
        check_float("beta", p["beta"], low=0.0, low_inclusive=False)
    check_choice("constraint", p["constraint"], CONSTRAINTS)
    check_choice("eigen_solver", p["eigen_solver"], EIGEN_SOLVERS)
    if p["eigen_tol"] is not None:
        check_float("eigen_tol", p["eigen_tol"], low=0.0, low_inclusive=False)
    if p["class_weight"] is not None:
        check_choice("class_weight", p["class_weight"], ("balanced",))


@flow(name="tsk", validate_parameters=True)
def tsk(
    source: str,
    store: str,
    *,
    labels: str | None = None,
    n_components: int = 30,
    eta: float = 2.0,
    beta: float | str = "auto",
    constraint: str = "decay",
    include_trivial: bool = True,
    class_weight: str | None = None,
    n_neighbors: int = 6,
    knn_method: str = "auto",
    eigen_solver: str = "auto",
    eigen_tol: float | None = None,
    chunk_rows: int | None = None,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Label every point of ``source`` with TSK and write the labels and scores into ``store``.

    Parameters are those of :class:`spectral.spectral_kernels.TSK` (``eigen_tol``: absolute residual tolerance of the
    eigensolver, default the solver's 1e-6 relative) plus the store / cluster options of
    :func:`flows.embed.embed`; ``labels`` is the ``.npy`` file of labels (-1 = unlabeled) ingested with X
    (or already in the store). Returns ``store``, ``run``, ``status``, ``seconds``, ``stages``, ``results``
    (n, n_labeled, mu, eigenvalues, LP objective, label counts, output paths).
    """
    params = {k: v for k, v in locals().items() if k in PARAMETERS}
    _validate(params)
    n_workers = check_int("n_workers", n_workers, low=1)
    run = new_run_id("tsk", run_name)
    t_flow = time.perf_counter()
    with ingested_run(source, store, run=run, flow="embed", method=t.METHOD, params=params, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state) as (ctx, ingested):
        _stages(ctx, params)
        ctx.manifest.results.update({"n": ingested["n"], "method": t.METHOD,
                                     "labels": f"outputs/{run}/{t.LABELS}", "scores": f"outputs/{run}/{t.SCORES}"})
    return {**ctx.summary(), "total_seconds": time.perf_counter() - t_flow}


def _stages(ctx: RunContext, p: dict) -> None:
    _fit(ctx, p)
    ctx.require_cluster()
    with ctx.stage("tsk-score") as rec:
        rec.info.update(t.tsk_score_task(ctx.store, ctx.run, ctx.token))
        ctx.manifest.results["label_counts"] = rec.info["label_counts"]


def _fit(ctx: RunContext, p: dict) -> None:
    with ctx.stage("knn") as rec:
        rec.info.update(graph_tasks.knn_task(ctx.store, ctx.run, ctx.token, n_neighbors=p["n_neighbors"],
                                             knn_method=p["knn_method"], metric="euclidean", holdout=0.0,
                                             random_state=p["random_state"]))
    with ctx.stage("weights") as rec:
        rec.info.update(graph_tasks.weights_task(ctx.store, ctx.run, ctx.token, weighting=WEIGHTING,
                                                 symmetrize=SYMMETRIZE))
    with ctx.stage("tsk-fit") as rec:
        rec.info.update(t.tsk_fit_task(ctx.store, ctx.run, ctx.token, **{k: p[k] for k in (
            "n_components", "eta", "beta", "constraint", "include_trivial", "class_weight", "eigen_solver",
            "random_state", "eigen_tol")}))
        ctx.manifest.results.update({k: rec.info[k] for k in ("n_labeled", "mu", "eigenvalues", "lp_objective")})


PARAMETERS = ("n_components", "eta", "beta", "constraint", "include_trivial", "class_weight", "n_neighbors",
              "knn_method", "eigen_solver", "eigen_tol", "random_state")


# ---- "tsk" in the generic embed / extend flows ----------------------------------------------------------------
EMBED_PARAMETERS = ("n_components", "n_neighbors", "knn_method", "eigen_solver", "holdout", "random_state")


def _from_embed(p: dict) -> dict:
    """TSK parameters from ``embed``'s: ``n_components`` is m (``n_components``), the rest :data:`DEFAULTS`."""
    return {**DEFAULTS, "n_components": p["n_components"],
            **{k: p[k] for k in ("n_neighbors", "knn_method", "eigen_solver", "random_state")}}


def _validate_from_embed(p: dict) -> None:
    if p.get("holdout", 0.0) != 0:
        raise ParameterError(f"holdout must be 0 for method 'tsk' (TSK fits every point of the store; label new "
                             f"points with extend); got {p['holdout']!r}")
    _validate(_from_embed(p))


def _embed_points(ctx: RunContext) -> dict:
    info = t.tsk_score_task(ctx.store, ctx.run, ctx.token, write_embedding=True)
    ctx.manifest.results.update({"labels": f"outputs/{ctx.run}/{t.LABELS}", "scores": f"outputs/{ctx.run}/{t.SCORES}",
                                 "label_counts": info["label_counts"]})
    return info


def _extend_points(ctx: RunContext, model_store: str, model_run: str, model_token: str) -> dict:
    info = t.tsk_extend_task(model_store, model_run, model_token, ctx.store, ctx.run, ctx.token)
    ctx.manifest.results.update({"labels": f"outputs/{ctx.run}/{t.LABELS}", "scores": f"outputs/{ctx.run}/{t.SCORES}",
                                 "label_counts": info["label_counts"]})
    return info


register_method(Method(
    name=t.METHOD,
    fit=lambda ctx, p: _fit(ctx, _from_embed(p)),
    embed_points=_embed_points,
    extend_points=_extend_points,
    parameters=EMBED_PARAMETERS,
    validate=_validate_from_embed,
))
