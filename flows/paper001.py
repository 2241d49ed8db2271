"""The NSSE flow (paper 001): ingest -> NSSE fit on a labeled subset -> interpolator write-back of every point.

``nsse(source, store, labels=..., n_train=2000, ...)`` trains NSSE on ``n_train`` labeled rows (stratified,
drawn from ``random_state``; training is O(n_train^3)), stores the interpolator in ``models/<run>`` and
writes ``embeddings/<run>`` for every row of X, chunk by chunk on the flow's Dask cluster (training rows
get their coordinates Y, the others f(x), eq. 6). The method is also registered as ``"nsse"`` for the
generic ``embed`` / ``extend`` flows; through ``embed`` the NSSE weights are this module's defaults.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow

from spectral._validation import check_float, check_int
from tasks import paper001 as t

from flows._runtime import RunContext, new_run_id
from flows._ingested_run import ingested_run
from flows.methods import Method, register_method

#: Defaults of the NSSE weights (paper 001 eq. 11) for images scaled to [0, 1]; see
#: benchmarks/results/nsse.md for the values chosen by cross-validation on COIL-20 / ORL / Yale B.
DEFAULTS = {"n_train": 2000, "mu1": 0.01, "mu2": 0.01, "mu3": 100.0, "max_iter": 10}


def _validate(p: dict) -> None:
    check_int("n_components", p["n_components"], low=1, high=p["n_train"] - 1)
    check_int("n_train", p["n_train"], low=2)
    check_int("n_neighbors", p["n_neighbors"], low=1)
    check_int("max_iter", p["max_iter"], low=1)
    for name in ("mu1", "mu2", "mu3"):
        check_float(name, p[name], low=0.0)


def _fit(ctx: RunContext, p: dict) -> None:
    with ctx.stage("nsse-fit") as rec:
        rec.info.update(t.fit_nsse_task(ctx.store, ctx.run, ctx.token, **{k: p[k] for k in (
            "n_train", "n_components", "mu1", "mu2", "mu3", "n_neighbors", "max_iter", "random_state")}))
        ctx.manifest.results["sigma"] = rec.info["sigma"]
        ctx.manifest.results["objective"] = rec.info["objective"]


@flow(name="nsse", validate_parameters=True)
def nsse(
    source: str,
    store: str,
    *,
    labels: str | None = None,
    n_train: int = DEFAULTS["n_train"],
    n_components: int = 10,
    mu1: float = DEFAULTS["mu1"],
    mu2: float = DEFAULTS["mu2"],
    mu3: float = DEFAULTS["mu3"],
    n_neighbors: int = 5,
    max_iter: int = DEFAULTS["max_iter"],
    chunk_rows: int | None = None,
    random_state: int | None = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    run_name: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fit NSSE on ``n_train`` labeled points of ``source`` and embed every point into ``store``.

    Parameters are those of :class:`spectral.nsse.NSSE` plus ``n_train`` and the store / cluster
    options of :func:`flows.embed.embed`. Returns ``store``, ``run``, ``status``, ``seconds``, ``stages``,
    ``results`` (sigma, objective per iteration, n, embedding path).
    """
    params = {k: v for k, v in locals().items() if k in PARAMETERS}
    _validate(params)
    n_workers = check_int("n_workers", n_workers, low=1)
    run = new_run_id("nsse", run_name)
    t_flow = time.perf_counter()
    with ingested_run(source, store, run=run, flow="embed", method=t.METHOD, params=params, labels=labels,
                      chunk_rows=chunk_rows, overwrite=overwrite, scheduler=scheduler, n_workers=n_workers,
                      seed=random_state) as (ctx, ingested):
        _fit(ctx, params)
        ctx.require_cluster()
        with ctx.stage("embed-points") as rec:
            rec.info.update(t.embed_points_task(ctx.store, ctx.run, ctx.token))
        ctx.manifest.results.update({"n": ingested["n"], "method": t.METHOD, "embedding": f"embeddings/{run}"})
    return {**ctx.summary(), "total_seconds": time.perf_counter() - t_flow}


PARAMETERS = ("n_train", "n_components", "mu1", "mu2", "mu3", "n_neighbors", "max_iter", "random_state")


def _fit_from_embed(ctx: RunContext, p: dict) -> None:
    """``embed(method="nsse")``: the embed flow's n_components / n_neighbors / random_state, our defaults."""
    params = {**DEFAULTS, **{k: p[k] for k in ("n_components", "n_neighbors", "random_state")}}
    _validate(params)
    _fit(ctx, params)


register_method(Method(
    name=t.METHOD,
    fit=_fit_from_embed,
    embed_points=lambda ctx: t.embed_points_task(ctx.store, ctx.run, ctx.token),
    extend_points=lambda ctx, store, run, token: t.extend_points_task(store, run, token, ctx.store, ctx.run,
                                                                      ctx.token),
    parameters=("n_components", "n_neighbors", "random_state"),
))
