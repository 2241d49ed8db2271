"""The per-point stages of every method: write the results of all points of a store, chunk by chunk on Dask.

:func:`embed_points_task` (``embed``): the fit rows get their fitted (transductive) results when the model
has them, every other row the model's out-of-sample map; :func:`extend_points_task` (``extend``): every
row of another store with a stored model. The outputs are the entry's (:mod:`tasks.registry`):
``embeddings/<run>`` (n, k) and, for classifiers, ``outputs/<run>/labels`` (n,) and ``outputs/<run>/scores``
(n, c). These tasks only orchestrate: the model is restored on a worker and every chunk is written by a Dask
task (:mod:`tasks.bodies.point_writeback`), so the flow process never holds the model or X.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from prefect import task

from eigenflow.storage.arrays import row_chunks
from eigenflow.storage.checksums import completed_row_chunks
from eigenflow.storage.embedding_io import read_output
from eigenflow.storage.store import Store

from eigenflow.tasks.dask_calls import ProgressFn, map_row_chunks, published_future, run_on_worker, submit_to_worker
from eigenflow.tasks.bodies.point_writeback import output_array, prepare_points, start_point_outputs, write_points_chunk
from eigenflow.tasks.registry import LABELS
from eigenflow.tasks.task_options import COMPUTE_TASK, IO_TASK


@task(name="embed-points", **IO_TASK)
def embed_points_task(store: Store, run: str, index_name: str, *, holdout: float, random_state: int | None,
                      on_progress: ProgressFn | None = None) -> dict[str, Any]:
    """Write the outputs of every row of X for the model of ``run`` (fit rows: fitted results; others: mapped).

    Also writes ``outputs/<run>/in_fit`` (n,) bool (the rows the model was fitted on) and
    ``outputs/<run>/held_out`` (n,) bool (the run's hold-out draw, :func:`tasks.bodies.fit_rows.held_out_rows`, made on
    the worker that writes them: the flow process holds no (n,) array).
    """
    index = published_future(index_name)  # the kNN stage's index, if it kept it (tasks.model_index)
    prepared = submit_to_worker(prepare_points, store, run, index=index, fitted_rows=True,
                                name=f"load-model-{run}")
    return write_point_outputs(store, run, prepared, {}, "embed-points", holdout_draw=(holdout, random_state),
                               on_progress=on_progress)


@task(name="extend-points", **IO_TASK)
def extend_points_task(model_store: Store, model_run: str, out_store: Store, out_run: str, *, index: Any = None,
                       stored_candidates: bool = False, rows: tuple[int, int] | None = None,
                       on_progress: ProgressFn | None = None) -> dict[str, Any]:
    """Write the outputs of every row of ``out_store`` with the model of ``model_run`` stored in ``model_store``;
    ``index``: the future of the model's kNN index kept on the cluster (:func:`tasks.model_index.model_index`), or
    None (rebuilt from the fit rows); ``stored_candidates``: from the candidate fit points the extend run stored
    (:mod:`tasks.bodies.sharded_extend`), not from an index of all fit rows. ``rows`` ``(start, stop)``: only the row
    chunks that hold these rows (an update of the model's own store maps its new rows)."""
    prepared = submit_to_worker(prepare_points, model_store, model_run, index=index, fitted_rows=False,
                                stored_candidates=stored_candidates, name=f"load-model-{model_run}")
    attrs = {"model_store": str(model_store), "model_run": model_run}
    return write_point_outputs(out_store, out_run, prepared, attrs, "extend-points", rows=rows, on_progress=on_progress)


@task(name="knn-candidates-sharded", **COMPUTE_TASK)
def extend_candidates_task(model_store: Store, model_run: str, out_store: Store, out_run: str) -> dict[str, Any]:
    """The candidate fit points of every row of ``out_store``, searched in per-shard indexes of the model's fit rows
    on the workers and written by them (:func:`tasks.bodies.sharded_extend.write_extend_candidates`)."""
    from distributed import get_client

    from eigenflow.tasks.bodies.sharded_extend import write_extend_candidates

    return write_extend_candidates(model_store, model_run, out_store, out_run, get_client())


def write_point_outputs(store: Store, run: str, prepared: Any, attrs: dict, name: str, *,
                        holdout_draw: tuple[float, int | None] | None = None, rows: tuple[int, int] | None = None,
                        on_progress: ProgressFn | None = None) -> dict[str, Any]:
    """Create the outputs of ``run`` and write every chunk not already written (a resumed run keeps the chunks
    with an intact checksum record), from ``prepared``: the future of a
    :class:`tasks.bodies.point_writeback.PreparedPoints`; ``on_progress(done, total)`` as chunks finish. ``rows``
    ``(start, stop)``: only the chunks that hold these rows (whole chunks: the rows before ``start`` in the first
    one are written as 0 / -1, not mapped; they are not the run's)."""
    start, stop = rows if rows is not None else (0, None)
    bounds = [b for b in row_chunks(store) if b[1] > start and (stop is None or b[0] < stop)]
    started = run_on_worker(start_point_outputs, store, run, prepared, attrs, holdout_draw=holdout_draw,
                            name=f"{name}-start")
    outputs = started["outputs"]
    done = completed_row_chunks(store, [output_array(run, o) for o in outputs], [b[0] for b in bounds])
    todo = [b for b in bounds if b[0] not in done]
    infos = map_row_chunks(write_points_chunk, todo, args=(store, run, prepared), per_chunk=[(start,)] * len(todo),
                           name=name, on_progress=on_progress)
    out: dict[str, Any] = {"n_chunks": len(bounds), "n_chunks_reused": len(done), "outputs": outputs}
    for key in ("n_fitted", "n_extended"):
        out[key] = int(sum(i[key] for i in infos))
    if LABELS in outputs:  # from the whole array: chunks reused from a previous attempt count too
        values, counts = np.unique(read_output(store, run, LABELS)[start:stop], return_counts=True)
        out["label_counts"] = {str(int(v)): int(c) for v, c in zip(values, counts)}
    return out
