"""The fit stages of a Laplacian eigenmaps run begun on the cluster before its flow, and taken by the flow's stages.

The CLI begins them as soon as its ingest ends (:func:`flows._run_prologue.begin_fit_early`), while Prefect's
server and the flow start: :func:`start_fit_early` submits the kNN index build and, chained to it on the same
worker, the bodies of the ``knn``, ``weights`` and ``eigensolve`` stages (:mod:`tasks.laplacian_eigenmaps`: the
same functions, arguments and writes as the flow's own stages), and publishes each future under a name made from
the run, the store and the stage arguments (:func:`early_name`). Each stage of the flow
(:mod:`tasks.fitting`) takes its future (:func:`take_early`) and waits for its result instead of running the body
again; a stage whose future is not there (other arguments, a resumed run, another cluster) runs its body itself.

Because the chain does not wait for the flow between stages, the CLI can start Prefect's server once the kNN
build has ended (:mod:`flows._prefect_start`): the server's start then runs on the core the single-threaded
eigensolve leaves free instead of taking CPU from the build. The stages write to the store under the run's
lock, which the CLI takes after its ingest (:func:`flows._run_prologue.ingest_early`); the flow's manifest records
``begun_before_flow`` for each stage taken. What no stage took (the run failed first) is released with the run
(:func:`release_early`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from eigenflow.tasks import laplacian_eigenmaps as le
from eigenflow.tasks.dask_calls import publish_future, published_future, submit_to_worker, unpublish
from eigenflow.tasks.registry import get_entry

#: Prefix of the names of the published futures: ``<prefix><run>-<stage>-<digest>``.
EARLY_PREFIX = "eigenflow-early-"
#: The chained stages, in order (``knn-index`` is the index build the ``knn`` stage writes the graph from).
EARLY_STAGES = ("knn-index", "knn", "weights", "eigensolve")


def builds_one_knn_index(method: str, params: dict, sharded: bool | None) -> bool:
    """Whether ``method`` with ``params`` is fitted from one kNN index built in one process (Laplacian eigenmaps
    of a kNN graph, not on the sharded path): the runs whose fit stages can begin before their flow."""
    return not sharded and get_entry(method).fit == "laplacian_eigenmaps" and params.get("affinity", "knn") == "knn"


def stage_arguments(params: dict, holdout: float, random_state: int | None) -> dict[str, dict[str, Any]]:
    """The keyword arguments of each chained stage body of a Laplacian eigenmaps fit with ``params`` (the
    method's full parameters): ``{stage: kwargs}`` for :data:`EARLY_STAGES`."""
    p = params
    index = {"n_neighbors": p["n_neighbors"], "knn_method": p["knn_method"], "metric": p.get("metric", "euclidean"),
             "holdout": holdout, "random_state": random_state}
    weights = {"weighting": p["weighting"], "symmetrize": p["symmetrize"]}
    solve = {"n_components": p["n_components"], "normalization": p["normalization"],
             "eigen_solver": p["eigen_solver"], "on_disconnected": p["on_disconnected"], "tol": p.get("tol"),
             "random_state": random_state, **weights}
    return {"knn-index": index, "knn": {"n_neighbors": p["n_neighbors"]}, "weights": weights, "eigensolve": solve}


def early_key(store: Any, arguments: dict[str, dict[str, Any]]) -> str:
    """Digest of the store and every stage's arguments (:func:`stage_arguments`): a stage takes a future begun
    before the flow only for the same store and the same whole chain."""
    text = json.dumps([str(store), {stage: sorted(kw.items()) for stage, kw in arguments.items()}], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def early_name(run: str, stage: str, key: str) -> str:
    """Name of the published future of ``stage`` of ``run`` (:data:`EARLY_PREFIX`)."""
    return f"{EARLY_PREFIX}{run}-{stage}-{key}"


def start_fit_early(store: Any, run: str, method: str, params: dict, holdout: float, random_state: int | None,
                    client: Any, workers: list[str] | None = None) -> dict[str, Any] | None:
    """Submit the fit stages of ``run`` (``method`` with its full ``params``) on ``store``, chained on ``workers``
    (a preference) of ``client``'s cluster, and publish their futures (:func:`early_name`); returns
    ``{stage: future}``, or None (nothing begun) for a method fitted otherwise (:func:`builds_one_knn_index`).

    For a store just ingested by the caller (nothing of ``run`` in it to resume), under the run's store lock.
    """
    from eigenflow.tasks.stage_handoff import PLUGIN_NAME, HandoffPlugin

    if not builds_one_knn_index(method, params, False):
        return None
    args = stage_arguments(params, holdout, random_state)
    client.register_plugin(HandoffPlugin(), name=PLUGIN_NAME)  # idempotent: the flow registers it again
    at = {"client": client, "workers": workers}
    built = submit_to_worker(le.build_fit_index, store, name=f"knn-index-{run}", **at, **args["knn-index"])
    graph = submit_to_worker(le.write_knn_graph, store, run, built, name=f"knn-graph-{run}", **at, **args["knn"])
    weights = submit_to_worker(le.compute_weights_after, store, run, graph, name=f"weights-{run}", **at,
                               **args["weights"])
    solved = submit_to_worker(le.solve_eigenmaps_after, store, run, weights, name=f"eigensolve-{run}", **at,
                              **args["eigensolve"])
    futures = dict(zip(EARLY_STAGES, (built, graph, weights, solved)))
    key = early_key(store, args)
    for stage, future in futures.items():
        publish_future(future, early_name(run, stage, key), client)
    return futures


def take_early(run: str, stage: str, key: str | None) -> Any:
    """The future of ``stage`` of ``run`` begun before the flow with chain ``key``, unpublished (the caller now
    holds it), or None."""
    from distributed import get_client

    if key is None:
        return None
    name = early_name(run, stage, key)
    future = published_future(name)
    if future is not None:
        unpublish(name, get_client())
    return future


def release_early(run: str, client: Any) -> None:
    """Unpublish what no stage of ``run`` took (the run failed before those stages): the scheduler then forgets the
    stages not yet begun; one already running ends on its worker, and its result is dropped."""
    for name in list(client.list_datasets()):
        if str(name).startswith(f"{EARLY_PREFIX}{run}-"):
            unpublish(name, client)
