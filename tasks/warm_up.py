"""Whether a run builds or queries NN-descent indexes, and the workers' load of its compiled kernels.

A worker loads the kNN search's numba kernels from eigenflow's compiled-code cache (:func:`tasks.bodies.worker.
warm_nndescent`; compiled on a machine's first use) the first time it needs them. A flow that will need them submits
:func:`warm_workers` as soon as its cluster is up: one task per worker, queued before the run's first stage on
the workers, so that the kNN build does not pay the load and a run's ``compile`` seconds are known.
"""

from __future__ import annotations

from typing import Any

from eigenflow.spectral.placement import worker_list
from eigenflow.storage import layout
from eigenflow.storage.store import Store
from eigenflow.tasks.bodies.worker import warm_nndescent


def uses_nndescent(params: dict, n_fit: int, n_features: int) -> bool:
    """Whether a run with method parameters ``params``, ``n_fit`` fit rows and ``n_features`` columns builds or
    queries an NN-descent index (``knn_method="auto"`` resolved by
    :func:`spectral.neighbours.method_choice.auto_method`)."""
    from eigenflow.spectral.neighbours.method_choice import auto_method

    knn_method = params.get("knn_method", "auto" if "n_neighbors" in params else None)
    return knn_method == "nndescent" or (knn_method == "auto" and auto_method(n_fit, n_features) == "nndescent")


def planned_dtype(source: str, store: str | Store, params: dict, holdout: float, sharded: bool | None,
                  overwrite: bool) -> str | None:
    """The X dtype whose kernels the run's workers will need, known before the ingest from the source's header
    (or the existing store), or None: no NN-descent, or not known before the ingest (a CSV)."""
    from eigenflow.storage.readers import open_source
    from eigenflow.tasks.ingest import first_store_attrs

    attrs = first_store_attrs((source,) if overwrite else (store, source))
    dtype = str(attrs.get(layout.ATTR_DTYPE)) if attrs else layout.DEFAULT_X_DTYPE
    if sharded:
        return dtype
    n, d = (attrs.get(layout.ATTR_N), attrs.get(layout.ATTR_D)) if attrs else (None, None)
    if n is None or d is None:
        try:
            opened = open_source(source)
            n, d = opened.n_rows, opened.n_columns
        except Exception:  # noqa: BLE001 - unreadable here: the ingest reports it
            return None
    if n is None or d is None:
        return None
    return dtype if uses_nndescent(params, int(n) - round(holdout * int(n)), int(d)) else None


def model_dtype(store: Store, model: Any, use_shards: bool) -> str | None:
    """The X dtype whose kernels extending ``model`` (the :class:`storage.manifest.RunManifest` of an embed run of
    ``store``) needs: its store's X dtype when the model's kNN index was an NN-descent one or the path is sharded."""
    from eigenflow.storage.store import read_attrs

    attrs = read_attrs(store)
    n_fit, d = model.results.get("n_fit"), attrs.get(layout.ATTR_D)
    if not use_shards and (n_fit is None or d is None or not uses_nndescent(model.parameters, int(n_fit), int(d))):
        return None
    return str(attrs.get(layout.ATTR_DTYPE, layout.DEFAULT_X_DTYPE))


def warm_workers(client: Any, dtype: str | None) -> list:
    """One :func:`tasks.bodies.worker.warm_nndescent` task per worker of ``client`` for X of ``dtype`` (none for None);
    each future's result is that worker's seconds. A worker that dies loses its task: the scheduler runs it again
    on another worker (``allow_other_workers``) rather than wait for the dead one."""
    if dtype is None:
        return []
    return [client.submit(warm_nndescent, (dtype,), workers=[w], allow_other_workers=True, pure=False)
            for w in worker_list(client)]
