"""The paper 000 flow: ingest a labeled store -> (SS-)(K)DNE / MFA / LFDA fitted at scale -> embedding of every point.

``paper000(source, store, labels=..., algorithm="lfda", mode="linear", gamma=1.0, ...)`` fits on all points of
the store (labels -1 = unlabeled; gamma > 0 adds the manifold regularizer over every point, eq. 12) with
:func:`spectral.discriminant.scale.fit_at_scale` (chunked d0 x d0 accumulation over the store's Dask array; kernel
variants on ``n_landmarks`` Nyström features), stores the model in ``models/<run>`` and writes
``embeddings/<run>`` for every row, chunk by chunk on the flow's Dask cluster. The algorithms are also
registered as ``"dne"``, ``"mfa"`` and ``"lfda"`` for the generic ``embed`` / ``extend`` flows (linear,
semi-supervised with gamma = 1).
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from spectral._validation import check_choice, check_int
from spectral.errors import ParameterError
from tasks import paper000 as t

from flows._ingested_run import ingested_run
from flows._runtime import RunContext, new_run_id
from flows.methods import Method, register_method

#: defaults of the generic ``embed(method="lfda" | "mfa" | "dne")`` route
EMBED_DEFAULTS = {"gamma": 1.0, "mode": "linear", "n_neighbors": 3}
PARAMETERS = ("n_components", "n_neighbors", "gamma", "mode", "kernel", "manifold_neighbors", "manifold_weighting",
              "regularization", "reg_eps", "scaling", "n_landmarks", "random_state")


def _validate(algorithm: str, p: dict) -> None:
    check_choice("algorithm", algorithm, sorted(t.ESTIMATORS))
    t.make_estimator(algorithm, p)._check_params()
    if p["mode"] == "transductive" or (p["mode"] == "kernel" and p.get("n_landmarks") is None):
        raise ParameterError("the paper000 flow needs mode='linear', or mode='kernel' with n_landmarks "
                                 f"(Nystrom features); got mode={p['mode']!r}, n_landmarks={p.get('n_landmarks')}")


def _fit(ctx: RunContext, algorithm: str, p: dict, knn_method: str) -> None:
    with ctx.stage("paper000-fit") as rec:
        rec.info.update(t.fit_task(ctx.store, ctx.run, ctx.token, algorithm=algorithm, params=p,
                                   knn_method=knn_method))
        ctx.manifest.results["eigenvalues"] = rec.info["eigenvalues"]
        ctx.manifest.results["n_components"] = rec.info["n_components"]


@flow(name="paper000", validate_parameters=True)
def paper000(
    source: str,
    store: str,
    *,
    labels: str | None = None,
    algorithm: str = "lfda",
    mode: str = "linear",
    gamma: float = 1.0,
    n_components: int | None = None,
    n_neighbors: int = 3,
    manifold_neighbors: int | None = None,
    manifold_weighting: str = "local_scaling",
    kernel: str = "poly",
    n_landmarks: int | None = None,
    regularization: str = "eps",
    reg_eps: float = 1e-4,
    scaling: str = "identity",
    knn_method: str = "auto",
    chunk_rows: int | None = None,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fit (SS-)(K)DNE / MFA / LFDA on the labeled points of ``source`` and embed every point into ``store``.

    Parameters are those of :class:`spectral.discriminant.LFDA` (``algorithm`` picks DNE / MFA / LFDA) plus
    ``knn_method`` (of the W^(2) kNN graph) and the store / cluster options of :func:`flows.embed.embed`.
    Returns ``store``, ``run``, ``status``, ``seconds``, ``stages``, ``results``.
    """
    params = {k: v for k, v in locals().items() if k in PARAMETERS}
    _validate(algorithm, params)
    n_workers = check_int("n_workers", n_workers, low=1)
    run = new_run_id(f"paper000-{algorithm}", run_name)
    with ingested_run(source, store, run=run, flow="paper000", method=algorithm, params=params, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state, extra_manifest={"knn_method": knn_method}) as (ctx, ingested):
        _fit(ctx, algorithm, params, knn_method)  # in the flow process (threads), overlaps the cluster start
        ctx.require_cluster()
        with ctx.stage("embed-points") as rec:
            rec.info.update(t.embed_points_task(ctx.store, ctx.run, ctx.token))
        ctx.manifest.results.update({"n": ingested["n"], "method": algorithm, "embedding": f"embeddings/{run}"})
    return ctx.summary()


def _register(algorithm: str) -> None:
    def fit(ctx: RunContext, p: dict) -> None:
        params = {**EMBED_DEFAULTS, **{k: p[k] for k in ("n_components", "random_state")}}
        _validate(algorithm, params)
        _fit(ctx, algorithm, params, p.get("knn_method", "auto"))

    def embed_points(ctx: RunContext) -> dict:
        ctx.require_cluster()
        return t.embed_points_task(ctx.store, ctx.run, ctx.token)

    register_method(Method(
        name=algorithm,
        fit=fit,
        embed_points=embed_points,
        extend_points=lambda ctx, store, run, token: t.extend_points_task(store, run, token, ctx.store, ctx.run,
                                                                          ctx.token),
        parameters=("n_components", "knn_method", "random_state"),
    ))


for _algorithm in t.ESTIMATORS:
    _register(_algorithm)
