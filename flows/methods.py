"""Registry of embedding methods the ``embed`` / ``extend`` flows can run: name -> :class:`Method`.

A method contributes the stages between ingest and the write-back, as functions that call its tasks inside
the run context (each in ``ctx.stage(...)`` so that it is timed into the manifest):

- ``fit(ctx, params)``: the fit stages (graph, operator, eigensolve, model written to ``models/<run>``);
- ``embed_points(ctx)``: write ``embeddings/<run>`` for every point of the store (fitted rows + out-of-sample);
- ``extend_points(ctx, model_store, model_run, model_token)``: embed the points of ``ctx.store`` with a stored
  model;
- ``cleanup(ctx)``: release what the run kept on the cluster (optional).

The flow starts the Dask cluster in the background; a stage function that submits Dask work (or calls a task
that does) first calls ``ctx.require_cluster()``. ``embed_points`` / ``extend_points`` are called after it.

``params`` are the keyword arguments of :func:`flows.embed.embed` listed in ``Method.parameters``. To add a
method (e.g. a paper's), write its tasks in ``tasks/<name>.py``, its stage functions in ``flows/<name>.py``
and call :func:`register_method` there; the module must be imported (e.g. by the CLI) before the flow runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from spectral._validation import check_choice, check_int
from spectral.embedding import EIGEN_SOLVERS, ON_DISCONNECTED
from spectral.knn import METHODS as KNN_METHODS
from spectral.knn import METRICS
from spectral.laplacian import NORMALIZATIONS
from spectral.weights import SYMMETRIZATIONS, WEIGHTINGS
from tasks import laplacian_eigenmaps as le

from flows._runtime import RunContext, progress_callback  # noqa: F401  (progress for method authors)


@dataclass(frozen=True)
class Method:
    """One embedding method of the flows (see the module docstring)."""

    name: str
    fit: Callable[[RunContext, dict], None]
    embed_points: Callable[[RunContext], dict]
    extend_points: Callable[[RunContext, str, str, str], dict]
    parameters: tuple[str, ...]
    validate: Callable[[dict], None] = lambda params: None
    cleanup: Callable[[RunContext], None] = lambda ctx: None
    uses_nndescent_queries: Callable[[dict, int], bool] = lambda params, n_fit: False


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` (replacing one of the same name) and return it."""
    METHODS[method.name] = method
    return method


# Modules that register the paper methods (imported on first lookup, so that no caller has to remember to
# import them for their side effect; a module that fails to import is an error, never silently skipped).
BUILTIN_METHOD_MODULES: tuple[str, ...] = ("flows.paper000", "flows.paper001", "flows.paper002", "flows.paper003")


def load_builtin_methods() -> dict[str, Method]:
    """Import the modules of :data:`BUILTIN_METHOD_MODULES` (idempotent) and return :data:`METHODS`."""
    for module in BUILTIN_METHOD_MODULES:
        importlib.import_module(module)
    return METHODS


def get_method(name: str) -> Method:
    """The registered method ``name`` or a :class:`spectral.errors.ParameterError` listing the choices."""
    if name not in METHODS:
        load_builtin_methods()
    check_choice("method", name, sorted(METHODS))
    return METHODS[name]


# ---- Laplacian eigenmaps -------------------------------------------------------------------------------------
def _le_validate(p: dict) -> None:
    check_int("n_components", p["n_components"], low=1)
    check_int("n_neighbors", p["n_neighbors"], low=1)
    check_choice("weighting", p["weighting"], WEIGHTINGS)
    check_choice("symmetrize", p["symmetrize"], SYMMETRIZATIONS)
    check_choice("normalization", p["normalization"], NORMALIZATIONS)
    check_choice("eigen_solver", p["eigen_solver"], EIGEN_SOLVERS[:-1])
    check_choice("knn_method", p["knn_method"], KNN_METHODS)
    check_choice("metric", p["metric"], METRICS)
    check_choice("on_disconnected", p["on_disconnected"], ON_DISCONNECTED)


def _le_fit(ctx: RunContext, p: dict) -> None:
    if p["holdout"] > 0:
        ctx.require_cluster()  # the kNN stage publishes its index on the cluster for the held-out queries
    with ctx.stage("knn") as rec:
        rec.info.update(le.knn_task(ctx.store, ctx.run, ctx.token, n_neighbors=p["n_neighbors"],
                                    knn_method=p["knn_method"], metric=p["metric"], holdout=p["holdout"],
                                    random_state=p["random_state"]))
    with ctx.stage("weights") as rec:
        rec.info.update(le.weights_task(ctx.store, ctx.run, ctx.token, weighting=p["weighting"],
                                        symmetrize=p["symmetrize"]))
    with ctx.stage("eigensolve") as rec:
        rec.info.update(le.eigensolve_task(
            ctx.store, ctx.run, ctx.token, n_components=p["n_components"], weighting=p["weighting"],
            symmetrize=p["symmetrize"], normalization=p["normalization"], eigen_solver=p["eigen_solver"],
            on_disconnected=p["on_disconnected"], random_state=p["random_state"]))
        ctx.manifest.results["eigenvalues"] = rec.info["eigenvalues"]


def _le_uses_nndescent_queries(p: dict, n_fit: int) -> bool:
    from spectral.knn import EXACT_MAX_SAMPLES

    return p["holdout"] > 0 and (p["knn_method"] == "nndescent"
                                 or (p["knn_method"] == "auto" and n_fit >= EXACT_MAX_SAMPLES))


register_method(Method(
    name=le.METHOD,
    fit=_le_fit,
    embed_points=lambda ctx: le.embed_points_task(ctx.store, ctx.run, ctx.token),
    extend_points=lambda ctx, store, run, token: le.extend_points_task(store, run, token, ctx.store, ctx.run,
                                                                       ctx.token),
    parameters=("n_components", "n_neighbors", "weighting", "symmetrize", "normalization", "eigen_solver",
                "knn_method", "metric", "on_disconnected", "holdout", "random_state"),
    validate=_le_validate,
    cleanup=lambda ctx: le.release_index(ctx.token, ctx.run),
    uses_nndescent_queries=_le_uses_nndescent_queries,
))
