"""How each method is fitted from a store: the fit strategies of the registry (:mod:`tasks.registry`).

A strategy turns a :class:`FitRequest` into the fit stages of a run (:class:`Stage`), each a Prefect task that
runs its body on a Dask worker (:func:`tasks.dask_calls.run_on_worker`: the flow process only orchestrates) and
returns small JSON metadata; the last one writes ``models/<run>``:

- ``in_memory``: the estimator's own ``fit`` on the fit rows read into memory (``y`` with -1 = unlabeled
  when the store has labels; must-link / cannot-link pairs of the store re-indexed to fit positions;
  :func:`tasks.bodies.estimator_fit.fit_estimator`);
- ``labeled_subset``: the same on a stratified subset of at most :data:`MAX_LABELED_SUBSET` labeled fit rows
  (NSSE / SUPLAP train in O(N^3); every other point is embedded by their RBF interpolator);
- ``discriminant``: DNE / MFA / LFDA linear or with Nystrom kernel features, d0 x d0 sums accumulated over
  the row blocks of the store's Dask array (:func:`tasks.bodies.estimator_fit.fit_discriminant`);
- ``laplacian_eigenmaps``: kNN graph -> weights -> sparse eigensolve (three stages, see
  :mod:`tasks.bodies.laplacian_eigenmaps`), for ``affinity="knn"``; otherwise ``in_memory``;
- ``spectral_clustering``: the same three stages for the eigenmap the clustering needs, then the cluster rule
  fitted by row chunks on the workers (:mod:`tasks.bodies.clustering`); ``affinity="landmarks"``: one stage, the
  landmark graph and the cluster rule by row chunks on the workers (every row is then labelled by the stored
  model's ``predict``, chunk by chunk).

Models are restored by :func:`tasks.bodies.stored_model.load_fitted`.
"""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefect import task

from eigenflow.storage.store import Store

from eigenflow.tasks.bodies import laplacian_eigenmaps as le
from eigenflow.tasks.dask_calls import publish_future, run_on_worker, submit_to_worker
from eigenflow.tasks.bodies.estimator_fit import fit_discriminant, fit_estimator
from eigenflow.tasks.registry import get_entry
from eigenflow.tasks.bodies.stage_handoff import handoff_workers
from eigenflow.tasks.task_options import COMPUTE_TASK

#: Largest labeled subset NSSE / SUPLAP train on (their fit is O(N^3) in it; benchmarks/results/nsse.md).
MAX_LABELED_SUBSET = 2000


@dataclass(frozen=True)
class Stage:
    """One fit stage: ``call()`` runs it (a Prefect task) and returns its metadata; ``outputs_intact()`` tells
    whether what it wrote for this run is still in the store (a resumed run skips a stage that completed
    and whose outputs are intact)."""

    name: str
    call: Callable[[], dict]
    outputs_intact: Callable[[], bool]


@dataclass(frozen=True)
class FitRequest:
    """What a fit needs: the store, the run, the method and its full parameters, the fit-set rule."""

    store: Store
    run: str
    token: str
    method: str
    params: dict
    holdout: float
    random_state: int | None
    sharded: bool = False
    warm_start: bool = False
    index_name: str = ""  # the name the fit's kNN index is published under (:func:`le.model_index_name`)
    keep_index: bool = False  # published for later runs too (:mod:`tasks.model_index`), not only for held-out rows


def fit_stages(req: FitRequest) -> list[Stage]:
    """The fit stages of ``req.method`` (see the module docstring)."""
    entry = get_entry(req.method)
    strategy = entry.fit
    if req.sharded:
        return _sharded_stages(req)
    if strategy == "laplacian_eigenmaps" and req.params.get("affinity", "knn") == "knn":
        return _laplacian_eigenmaps_stages(req)
    if strategy == "spectral_clustering":
        return _spectral_clustering_stages(req)
    if strategy == "discriminant" and _discriminant_at_scale(req.params):
        return [Stage("fit", lambda: discriminant_fit_task(req.store, req.run, req.token, method=req.method,
                                                           params=req.params, holdout=req.holdout,
                                                           random_state=req.random_state), lambda: _has_model(req))]
    subset = MAX_LABELED_SUBSET if strategy == "labeled_subset" else None
    return [Stage("fit", lambda: fit_task(req.store, req.run, req.token, method=req.method, params=req.params,
                                          holdout=req.holdout, random_state=req.random_state,
                                          labeled_subset=subset), lambda: _has_model(req))]


def _has_model(req: FitRequest) -> bool:
    """Whether the run's model is there and its write finished (an interrupted one is fitted again)."""
    from eigenflow.storage.models import model_complete

    return model_complete(req.store, req.run)


# ---- the estimator's own fit, DNE / MFA / LFDA at scale ----------------------------------------------------
@task(name="fit", **COMPUTE_TASK)
def fit_task(store: Store, run: str, store_token: str, *, method: str, params: dict, holdout: float,
             random_state: int | None, labeled_subset: int | None = None) -> dict[str, Any]:
    """Fit ``method`` on the fit rows of the store on a worker and write ``models/<run>``
    (:func:`tasks.bodies.estimator_fit.fit_estimator`)."""
    return run_on_worker(fit_estimator, store, run, method=method, params=params, holdout=holdout,
                         random_state=random_state, labeled_subset=labeled_subset, name=f"fit-{run}")


def _discriminant_at_scale(params: dict) -> bool:
    return params.get("mode") == "linear" or (params.get("mode") == "kernel"
                                              and params.get("n_landmarks") is not None)


@task(name="discriminant-fit", **COMPUTE_TASK)
def discriminant_fit_task(store: Store, run: str, store_token: str, *, method: str, params: dict,
                          holdout: float, random_state: int | None) -> dict[str, Any]:
    """Fit DNE / MFA / LFDA by chunked sums on a worker and write the model
    (:func:`tasks.bodies.estimator_fit.fit_discriminant`)."""
    return run_on_worker(fit_discriminant, store, run, method=method, params=params, holdout=holdout,
                         random_state=random_state, name=f"discriminant-fit-{run}")


# ---- Laplacian eigenmaps of a kNN graph at scale ---------------------------------------------------------------
def stage_arguments(params: dict, holdout: float, random_state: int | None) -> dict[str, dict[str, Any]]:
    """The keyword arguments of each stage body of a Laplacian eigenmaps fit with ``params`` (the method's full
    parameters): ``{stage: kwargs}``."""
    p = params
    weights = {"weighting": p["weighting"], "symmetrize": p["symmetrize"]}
    solve = {"n_components": p["n_components"], "normalization": p["normalization"],
             "eigen_solver": p["eigen_solver"], "on_disconnected": p["on_disconnected"], "tol": p.get("tol"),
             "random_state": random_state, **weights}
    knn = {"n_neighbors": p["n_neighbors"], "knn_method": p["knn_method"], "metric": p.get("metric", "euclidean"),
           "holdout": holdout, "random_state": random_state}
    return {"knn": knn, "weights": weights, "eigensolve": solve}


def _laplacian_eigenmaps_stages(req: FitRequest, params: dict | None = None) -> list[Stage]:
    """The kNN, weights and eigensolve stages; ``params``: the eigenmap's parameters when they are not the
    method's own (spectral clustering)."""
    args = (req.store, req.run, req.token)
    kw = stage_arguments(params or req.params, req.holdout, req.random_state)
    kw["knn"].update(index_name=req.index_name, keep_index=req.keep_index)
    handed: dict[str, dict | None] = {}  # each stage's "handoff" (:mod:`tasks.bodies.stage_handoff`), for the next one

    def handing(stage: str, info: dict) -> dict:
        handed[stage] = info.pop("handoff", None)  # a worker address and a token: not part of the stage's record
        return info

    return [
        Stage("knn", lambda: handing("knn", knn_task(*args, **kw["knn"])),
              lambda: le.graph_belongs_to(req.store, req.run, "knn")),
        Stage("weights", lambda: handing("weights", weights_task(*args, **kw["weights"], handoff=handed.get("knn"))),
              lambda: le.graph_belongs_to(req.store, req.run, "weights")),
        Stage("eigensolve", lambda: eigensolve_task(*args, **kw["eigensolve"], handoff=handed.get("weights"),
                                                    warm_start=req.warm_start),
              lambda: _has_model(req)),
    ]


@task(name="knn-graph", **COMPUTE_TASK)
def knn_task(store: Store, run: str, store_token: str, *, n_neighbors: int, knn_method: str, metric: str,
             holdout: float, random_state: int | None, index_name: str = "", keep_index: bool = False
             ) -> dict[str, Any]:
    """Build the kNN index of the fit set on a worker and write ``graph/knn`` from it
    (:func:`tasks.bodies.laplacian_eigenmaps.build_fit_index`,
    :func:`~tasks.bodies.laplacian_eigenmaps.write_knn_graph`).

    With held-out points, or with ``keep_index`` (for the later runs that map rows with the model:
    :mod:`tasks.model_index`), the index stays published on the cluster under ``index_name``
    (:func:`tasks.model_index.release_index` decides at the end of the flow). The result's ``"handoff"`` refers to
    the fit graph kept in the writing worker's memory for the weights stage (:mod:`tasks.bodies.stage_handoff`).
    """
    built = submit_to_worker(le.build_fit_index, store, name=f"knn-index-{run}", n_neighbors=n_neighbors,
                             knn_method=knn_method, metric=metric, holdout=holdout, random_state=random_state,
                             prepare=holdout > 0 or keep_index)
    info = run_on_worker(le.write_knn_graph, store, run, built, n_neighbors=n_neighbors, name=f"knn-graph-{run}")
    if info["n_heldout"] or keep_index:
        publish_future(built, index_name)
    return info


@task(name="weights", **COMPUTE_TASK)
def weights_task(store: Store, run: str, store_token: str, *, weighting: str, symmetrize: str,
                 handoff: dict | None = None) -> dict[str, Any]:
    """Weights of the fit graph (:func:`tasks.bodies.laplacian_eigenmaps.compute_weights`) on the worker that kept the
    graph (``handoff``, the kNN stage's), else on any worker (from the store)."""
    return run_on_worker(le.compute_weights, store, run, handoff, weighting=weighting, symmetrize=symmetrize,
                         name=f"weights-{run}", workers=handoff_workers(handoff))


@task(name="eigensolve", **COMPUTE_TASK)
def eigensolve_task(store: Store, run: str, store_token: str, *, n_components: int, normalization: str,
                    eigen_solver: str, on_disconnected: str, tol: float | None,
                    random_state: int | None, weighting: str, symmetrize: str,
                    handoff: dict | None = None, warm_start: bool = False) -> dict[str, Any]:
    """Laplacian eigenmap and its model (:func:`tasks.bodies.laplacian_eigenmaps.solve_eigenmaps`) on the worker that
    kept W (``handoff``, the weights stage's), else on any worker (from the store; W computed again with
    ``weighting`` / ``symmetrize`` if the store lacks it); ``warm_start``: from the store's current results."""
    return run_on_worker(le.solve_eigenmaps, store, run, handoff, n_components=n_components,
                         normalization=normalization, eigen_solver=eigen_solver, on_disconnected=on_disconnected,
                         tol=tol, random_state=random_state, weighting=weighting, symmetrize=symmetrize,
                         warm_start=warm_start, name=f"eigensolve-{run}", workers=handoff_workers(handoff))


# ---- spectral clustering: the eigenmap, then the cluster rule ---------------------------------------------------
def _spectral_clustering_stages(req: FitRequest) -> list[Stage]:
    from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps
    from eigenflow.tasks.bodies.clustering import clustered
    from eigenflow.tasks.registry import make_estimator

    if req.params.get("affinity") == "landmarks":
        return [Stage("fit", lambda: landmark_clustering_task(req.store, req.run, req.token, method=req.method,
                                                              params=req.params, holdout=req.holdout,
                                                              random_state=req.random_state),
                      lambda: _has_model(req))]

    eigenmap = LaplacianEigenmaps(**make_estimator(get_entry(req.method), req.params).eigenmap_params()).get_params()
    return [*_laplacian_eigenmaps_stages(req, eigenmap),
            Stage("clustering", lambda: cluster_task(req.store, req.run, req.token, params=req.params,
                                                  random_state=req.random_state),
                  lambda: clustered(req.store, req.run))]


@task(name="clustering", **COMPUTE_TASK)
def cluster_task(store: Store, run: str, store_token: str, *, params: dict, random_state: int | None
                 ) -> dict[str, Any]:
    """Fit the cluster rule of the run's eigenmap by row chunks on the workers and record it in the model
    (:func:`tasks.bodies.clustering.fit_clusters`)."""
    from eigenflow.tasks.bodies.clustering import fit_clusters

    return run_on_worker(fit_clusters, store, run, params=params, random_state=random_state, name=f"cluster-{run}")


@task(name="landmark-clustering", **COMPUTE_TASK)
def landmark_clustering_task(store: Store, run: str, store_token: str, *, method: str, params: dict, holdout: float,
                             random_state: int | None) -> dict[str, Any]:
    """The landmark graph and its cluster rule by row chunks on the workers; the model written
    (:func:`tasks.bodies.clustering.fit_landmark_clusters`)."""
    from eigenflow.tasks.bodies.clustering import fit_landmark_clusters

    return run_on_worker(fit_landmark_clusters, store, run, method=method, params=params, holdout=holdout,
                         random_state=random_state, name=f"landmark-clustering-{run}")


def _sharded_stages(req: FitRequest) -> list[Stage]:
    """The stages of the sharded path (:mod:`tasks.bodies.sharded_eigenmaps`): kNN, then eigensolve with the weights."""
    p = req.params
    args = (req.store, req.run, req.token)
    return [
        Stage("knn", lambda: sharded_knn_task(*args, n_neighbors=p["n_neighbors"], metric=p.get("metric", "euclidean"),
                                              holdout=req.holdout, random_state=req.random_state),
              lambda: le.graph_belongs_to(req.store, req.run, "knn") and _candidates_intact(req)),
        Stage("eigensolve", lambda: sharded_eigensolve_task(
            *args, n_components=p["n_components"], weighting=p["weighting"], symmetrize=p["symmetrize"],
            tol=p.get("tol"), random_state=req.random_state), lambda: _has_model(req)),
    ]


@task(name="knn-graph-sharded", **COMPUTE_TASK)
def sharded_knn_task(store: Store, run: str, store_token: str, *, n_neighbors: int, metric: str, holdout: float,
                     random_state: int | None) -> dict[str, Any]:
    """The sharded kNN graph of the fit rows and the held-out rows' candidates, built and written by the workers
    (:func:`tasks.bodies.sharded_eigenmaps.sharded_knn`)."""
    from distributed import get_client

    from eigenflow.tasks.bodies.sharded_eigenmaps import sharded_knn

    return sharded_knn(store, run, get_client(), n_neighbors=n_neighbors, metric=metric, n_shards=None,
                       holdout=holdout, random_state=random_state)


def _candidates_intact(req: FitRequest) -> bool:
    from eigenflow.tasks.bodies.sharded_eigenmaps import candidates_intact

    return candidates_intact(req.store, req.run)


@task(name="eigensolve-sharded", **COMPUTE_TASK)
def sharded_eigensolve_task(store: Store, run: str, store_token: str, *, n_components: int, weighting: str,
                            symmetrize: str, tol: float | None, random_state: int | None) -> dict[str, Any]:
    """Weights, Laplacian and eigensolve per shard on the workers, driven from this process (LOBPCG's blocks stay on
    the workers as row parts; :func:`tasks.bodies.sharded_eigenmaps.solve_sharded_eigenmaps`); the shards are those of
    the kNN stage."""
    from distributed import get_client

    from eigenflow.storage.graph_io import read_knn_attrs
    from eigenflow.tasks.bodies.sharded_eigenmaps import solve_sharded_eigenmaps

    n_shards = int(read_knn_attrs(store)["n_shards"])
    return solve_sharded_eigenmaps(store, run, get_client(), n_components=n_components, weighting=weighting,
                                   symmetrize=symmetrize, n_shards=n_shards, tol=tol, random_state=random_state)

