"""When a flow warms its workers' NN-descent kernels up, and the calls that do it (:mod:`tasks._warm_up`).

A run that builds or queries an NN-descent index (``knn_method="nndescent"``, or ``"auto"`` with at least
:data:`spectral.neighbours.method_choice.EXACT_MAX_SAMPLES` fit rows, or the sharded path) warms every worker up:
the kernels are loaded from the compiled-code cache (compiled on a machine's first use) before the first stage needs them.

- :func:`planned_dtypes` decides it before the ingest when the source's header gives its row count (``.npy``,
  ``.npz``, parquet, zarr; not CSV): then :func:`start_when_ready` begins the warm-up on every worker as soon as
  the cluster is up, in a thread of each worker, while the ingest's chunks run on the workers' task threads.
- after the ingest, the flow decides again on the stored sizes (:func:`uses_nndescent`) and submits
  :func:`finish_on_workers` before the fit stages: each task waits for its worker's warm-up (or warms up, when
  none was begun) and returns the warm-up's seconds, the run's ``compile`` time (:mod:`flows._fixed_time`).
- when the CLI begins the fit stages before the flow (:func:`flows._run_prologue.begin_fit_early`), only the
  :func:`builder_worker` is warmed up before them, and the flow submits :func:`finish_on_workers` after its weights
  stage: on the other workers too when the run has points outside the fit set (held out, or copies of a fit
  point), whose out-of-sample map queries the index there, so that they warm up beside the one-core eigensolve
  instead of taking CPU from the build; on the builder alone otherwise (no other worker needs the kernels).
"""

from __future__ import annotations

from typing import Any

from eigenflow.spectral.placement import worker_list
from eigenflow.storage import layout
from eigenflow.storage.store import Store
from eigenflow.tasks._warm_up import finish_warm_up, start_warm_up


def uses_nndescent(params: dict, n_fit: int, n_features: int) -> bool:
    """Whether a run with method parameters ``params``, ``n_fit`` fit rows and ``n_features`` columns builds or
    queries an NN-descent index on the workers (``knn_method="auto"`` resolved by
    :func:`spectral.neighbours.method_choice.auto_method`; then every worker is warmed up at once, before the fit
    stages: a long-lived cluster pays it once)."""
    from eigenflow.spectral.neighbours.method_choice import auto_method

    knn_method = params.get("knn_method", "auto" if "n_neighbors" in params else None)
    return knn_method == "nndescent" or (knn_method == "auto" and auto_method(n_fit, n_features) == "nndescent")


def planned_dtypes(source: str, store: str | Store, params: dict, holdout: float, sharded: bool | None,
                   overwrite: bool) -> tuple[str, ...]:
    """The X dtypes to warm up before the ingest: the store's X dtype when the run will surely need NN-descent
    (``sharded=True``, or :func:`uses_nndescent` with the row count read from the source's header), else ``()``
    (decided after the ingest)."""
    from eigenflow.storage.readers import open_source
    from eigenflow.tasks.ingest import first_store_attrs

    attrs = first_store_attrs((source,) if overwrite else (store, source))
    dtype = str(attrs.get(layout.ATTR_DTYPE)) if attrs else layout.DEFAULT_X_DTYPE
    if sharded:
        return (dtype,)
    n, d = (attrs.get(layout.ATTR_N), attrs.get(layout.ATTR_D)) if attrs else (None, None)
    if n is None or d is None:
        try:
            opened = open_source(source)
            n, d = opened.n_rows, opened.n_columns
        except Exception:  # noqa: BLE001 - unreadable here: the ingest reports it
            return ()
    if n is None or d is None:
        return ()
    return (dtype,) if uses_nndescent(params, int(n) - round(holdout * int(n)), int(d)) else ()


def model_dtypes(store: Store, model: Any, use_shards: bool) -> tuple[str, ...]:
    """The X dtypes to warm up for extending ``model`` (the :class:`storage.manifest.RunManifest` of an embed run
    of ``store``): the model store's X dtype when the extend builds or queries NN-descent indexes (the model's kNN
    index was one, or the sharded path), else ``()``."""
    from eigenflow.storage.store import read_attrs

    attrs = read_attrs(store)
    n_fit, d = model.results.get("n_fit"), attrs.get(layout.ATTR_D)
    if not use_shards and (n_fit is None or d is None or not uses_nndescent(model.parameters, int(n_fit), int(d))):
        return ()
    return (str(attrs.get(layout.ATTR_DTYPE, layout.DEFAULT_X_DTYPE)),)


def builder_worker(client: Any) -> str | None:
    """The worker that a kNN index build begun before the flow is sent to, and the only one warmed up before it
    (:func:`start_when_ready` with ``builder_only``): the local worker named :data:`flows.cluster.BUILDER_NAME`
    (which began its warm-up as it started), else the first of :func:`spectral.placement.worker_list`."""
    from eigenflow.flows.cluster import BUILDER_NAME

    workers = worker_list(client)
    info = client.scheduler_info()["workers"]
    named = [w for w in workers if str(info.get(w, {}).get("name")) == str(BUILDER_NAME)]
    return (named or workers or [None])[0]


def start_when_ready(pending: Any, dtypes: tuple[str, ...], *, builder_only: bool = False) -> None:
    """Begin the warm-up for ``dtypes`` on every worker (on the :func:`builder_worker` alone with
    ``builder_only``: the others would take CPU from its build) once the :class:`flows.cluster.PendingClient` is
    ready (:func:`tasks._warm_up.start_warm_up`, a thread per worker; returns at once). A failure to begin it is
    logged: the fit stages' :func:`finish_on_workers` then warms up in its tasks."""
    if not dtypes:
        return

    def begin(client: Any) -> None:
        try:
            builder = builder_worker(client) if builder_only else None
            client.run(start_warm_up, tuple(dtypes), workers=None if builder is None else [builder])
        except Exception as exc:  # noqa: BLE001 - the warm-up is then done by finish_on_workers
            import logging

            logging.getLogger("eigenflow").warning("the workers' NN-descent warm-up did not start early: %s", exc)

    pending.when_ready(begin)


def finish_on_workers(client: Any, finish: Any = finish_warm_up, dtype: str = "float32",
                      workers: list[str] | None = None) -> list:
    """One ``finish(dtypes)`` task per worker (of ``workers``, default all), placed on it (the fit stages queue
    behind it): the warm-up's seconds on that worker. A worker that dies loses its task's result: the scheduler
    computes it again, on another worker (``allow_other_workers``); pinned to the dead worker's address it would
    wait forever."""
    workers = worker_list(client) if workers is None else workers
    return [client.submit(finish, (dtype,), workers=[w], allow_other_workers=True, pure=False) for w in workers]
