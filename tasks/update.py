"""The stages of an ``update`` run as Prefect tasks: append a growing source's new rows to the store, then measure
the drift of the rows the model mapped. Their bodies run on the Dask workers (:mod:`storage.append`,
:mod:`tasks.bodies.drift`); the map itself is :func:`tasks.points.extend_points_task` restricted to the new rows.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from eigenflow.storage.append import append_rows
from eigenflow.storage.partitions import NewRows
from eigenflow.storage.store import Store

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
