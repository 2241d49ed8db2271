"""The stages of growing data as Prefect tasks: append a growing source's new rows to the store, measure the drift
of the rows the model mapped, decide a refit, align a refit to the previous results. Their bodies run on the Dask
workers (:mod:`storage.append`, :mod:`tasks.bodies.drift`, :mod:`tasks.bodies.alignment`); the map itself is
:func:`tasks.points.extend_points_task` restricted to the new rows.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from eigenflow.storage.append import append_rows
from eigenflow.storage.partitions import NewRows
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.alignment import align_to_previous
from eigenflow.tasks.bodies.drift import drift_figures
from eigenflow.tasks.dask_calls import run_on_worker
from eigenflow.tasks.task_options import COMPUTE_TASK, IO_TASK


@task(name="append", **IO_TASK)
def append_task(store: Store, source: str, new: NewRows, **options: Any) -> dict[str, Any]:
    """Append the rows ``new`` of ``source`` to ``store`` (:func:`storage.append.append_rows`), on a worker."""
    return run_on_worker(append_rows, store, source, new, name="append", **options)


@task(name="drift", **COMPUTE_TASK)
def drift_task(store: Store, model_run: str, run: str, rows: tuple[int, int], **policy: Any) -> dict[str, Any]:
    """The drift figures of the rows ``rows`` mapped by ``run`` (:func:`tasks.bodies.drift.drift_figures`)."""
    return run_on_worker(drift_figures, store, model_run, run, *rows, name="drift", **policy)


@task(name="align", **COMPUTE_TASK)
def align_task(store: Store, run: str) -> dict[str, Any]:
    """Align the coordinates of ``run``'s model to the store's previous results
    (:func:`tasks.bodies.alignment.align_to_previous`), on a worker."""
    return run_on_worker(align_to_previous, store, run, name="align")


#: ``refit`` choices of an update: refit by the policy, never, or after every update.
REFIT_CHOICES = ("auto", "never", "always")
#: Default share of rows mapped since the last fit (of the rows it fitted) that calls for a refit.
DEFAULT_REFIT_SHARE = 0.25


def refit_reason(refit: str, *, share: float, n_fit: int, n_mapped: int, drifted: bool) -> str | None:
    """Why the model should be fitted again after this update, or None (``refit="auto"``: the rows mapped since the
    last fit, ``n_mapped``, reach ``share`` of the ``n_fit`` rows it fitted, or the batch drifted)."""
    if refit == "never":
        return None
    if refit == "always":
        return "refit=always"
    if drifted:
        return "the new rows drifted from the fitted rows"
    if n_mapped >= share * n_fit:
        return f"{n_mapped} rows mapped since the last fit reach {share:.0%} of its {n_fit} fitted rows"
    return None


#: Manifest parameters of an embed run that are not its method's parameters.
RUN_PARAMETERS = ("source", "chunk_rows", "n_workers", "scheduler", "method", "labels", "holdout", "sharded",
                  "use_rep", "labels_obs", "align", "random_state")


def refit_arguments(fitted: Any, method: str) -> dict[str, Any]:
    """The arguments of a refit of the store on itself with ``method`` and the parameters of the fit ``fitted`` (its
    manifest): the same method parameters, hold-out, sharding and seed (the store holds the labels)."""
    p = fitted.parameters
    return {"method": method, "holdout": p.get("holdout", 0.0), "sharded": p.get("sharded"),
            "random_state": fitted.seed, "params": {k: v for k, v in p.items() if k not in RUN_PARAMETERS}}
