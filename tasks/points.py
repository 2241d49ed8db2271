"""The per-point stages of every method: write the results of all points of a store, chunk by chunk on Dask.

:func:`embed_points_task` (``embed``): the fit rows get their fitted (transductive) results when the model
has them, every other row the model's out-of-sample map; :func:`extend_points_task` (``extend``): every
row of another store with a stored model. The outputs are the entry's (:mod:`tasks.registry`):
``embeddings/<run>`` (n, k) and, for classifiers, ``outputs/<run>/labels`` (n,) and ``outputs/<run>/scores``
(n, c). One Dask task per row chunk, each writing whole aligned chunks (:func:`tasks._chunks.write_points_chunk`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from prefect import task

from storage.arrays import read_X, row_chunks, x_shape
from storage.checksums import completed_row_chunks
from storage import layout
from storage.embedding_io import create_embedding, create_output, read_output, write_point_array
from storage.errors import StoreFormatError
from storage.models import read_model

from tasks import laplacian_eigenmaps as le
from tasks._chunks import output_array, write_points_chunk
from tasks.common import FIT_ROWS, HELD_OUT, IN_FIT, IO_TASK, chunk_fit_slices, fit_rows_for, map_row_chunks
from tasks.fitting import ESTIMATOR_STATE
from tasks.registry import EMBEDDING, LABELS, SCORES, MethodEntry, fitted_outputs, get_entry, point_outputs


def load_fitted(store_url: str, run: str, store_token: str = "", *, with_index: bool = True
                ) -> tuple[MethodEntry, Any, np.ndarray]:
    """``(entry, model, fit_rows)`` of the model of ``run`` in ``store_url``, ready for out-of-sample use.

    A model that needs the kNN index of its training points gets it once here: the index the fit left on
    the cluster (Laplacian eigenmaps with a hold-out), else rebuilt from the store's X at the fit rows with
    the stored index parameters (the model store must still hold the X it was fitted on).
    """
    arrays, attrs = read_model(store_url, run)
    method = attrs.get("method")
    entry = get_entry(method) if isinstance(method, str) else None
    if entry is None or "state" not in attrs:
        raise StoreFormatError(f"model {run!r} of {store_url} was written by an older eigenflow (no method / state "
                               "attributes); run `eigenflow embed` again")
    rows = arrays.pop(FIT_ROWS)
    if rows.size and int(rows.max()) >= x_shape(store_url)[0]:
        raise StoreFormatError(f"model {run!r} was fitted on rows up to {int(rows.max())} but X of {store_url} has "
                               f"{x_shape(store_url)[0]} rows: the store was re-ingested; fit again")
    if attrs["state"] == le.MODEL_STATE:
        from spectral.embedding import LaplacianEigenmapsModel

        model = LaplacianEigenmapsModel.from_state(arrays, attrs["state_attrs"])
    elif attrs["state"] == ESTIMATOR_STATE:
        model = entry.estimator_class.from_state(arrays, attrs["state_attrs"])
    else:
        raise StoreFormatError(f"model {run!r} of {store_url} has an unknown state {attrs['state']!r}")
    if with_index:
        attach_index(model, store_url, run, store_token, rows)
    return entry, model, rows


def attach_index(model: Any, store_url: str, run: str, store_token: str, rows: np.ndarray) -> None:
    """Give a restored model the kNN index of its training points (rows ``rows`` of the store's X), once: the
    index the fit left on the cluster (Laplacian eigenmaps with a hold-out), else rebuilt with the stored
    parameters. Models without a kNN-based out-of-sample map are left as they are."""
    if hasattr(model, "attach_index") and hasattr(model, "knn_params"):  # LaplacianEigenmapsModel
        model.attach_index(_published_or_rebuilt_index(store_url, run, store_token, rows, model.knn_params))
    elif hasattr(model, "rebuild_index"):  # TSK / RSK
        model.rebuild_index(np.asarray(read_X(store_url)[rows], dtype=np.float64))


def _published_or_rebuilt_index(store_url: str, run: str, store_token: str, rows: np.ndarray, params: dict):
    from distributed import get_client

    from spectral.knn import KNNIndex

    client = get_client()
    name = le.index_dataset_name(store_token, run)
    if name in client.list_datasets():
        return client.get_dataset(name).result()
    return KNNIndex.rebuild(read_X(store_url)[rows], params)


def _fitted_results(entry: MethodEntry, model: Any) -> dict[str, np.ndarray] | None:
    if hasattr(model, "embedding") and not hasattr(model, "embedding_"):  # LaplacianEigenmapsModel
        return {EMBEDDING: np.asarray(model.embedding, dtype=np.float64)}
    return fitted_outputs(entry, model)


def _create_outputs(store_url: str, run: str, entry: MethodEntry, probe: dict[str, np.ndarray], attrs: dict) -> None:
    """The per-point arrays of ``run``, shaped from one probe row of each output."""
    for name, values in probe.items():
        if name == EMBEDDING:
            create_embedding(store_url, run, values.shape[1], overwrite=True, attrs=attrs)
        elif name == SCORES:
            create_output(store_url, run, SCORES, values.shape[1], dtype="float32", attrs=attrs, overwrite=True)
        elif name == LABELS:
            create_output(store_url, run, LABELS, None, dtype="int64", attrs=attrs, overwrite=True)


def _probe(entry: MethodEntry, model: Any, fitted: dict | None, store_url: str) -> dict[str, np.ndarray]:
    if fitted is not None and all(name in fitted for name in entry.outputs):
        return {name: values[:1] for name, values in fitted.items()}
    return point_outputs(entry, model, read_X(store_url, 0, 1))


def _write_all(store_url: str, run: str, entry: MethodEntry, model: Any, rows: np.ndarray,
               fitted: dict | None, attrs: dict, name: str) -> dict[str, Any]:
    from distributed import get_client

    bounds = row_chunks(store_url)
    _create_outputs(store_url, run, entry, _probe(entry, model, fitted, store_url), attrs)
    [payload] = get_client().scatter([model], broadcast=True)
    if fitted is None or rows.size == 0:
        per_chunk = [(np.zeros(0, dtype=np.int64), None)] * len(bounds)
    else:
        per_chunk = [(rows[lo:hi] - start, {k: v[lo:hi] for k, v in fitted.items()})
                     for (start, _), (lo, hi) in zip(bounds, chunk_fit_slices(rows, bounds))]
    done = completed_row_chunks(store_url, [output_array(run, o) for o in entry.outputs], [b[0] for b in bounds])
    todo = [i for i, (start, _) in enumerate(bounds) if start not in done]
    infos = map_row_chunks(write_points_chunk, [bounds[i] for i in todo], args=(store_url, run, entry.name, payload),
                           per_chunk=[per_chunk[i] for i in todo], name=name)
    out: dict[str, Any] = {"n_chunks": len(bounds), "n_chunks_reused": len(done), "outputs": list(entry.outputs)}
    for key in ("n_fitted", "n_extended"):
        out[key] = int(sum(i[key] for i in infos))
    if LABELS in entry.outputs:  # from the whole array: chunks reused from a previous attempt count too
        values, counts = np.unique(read_output(store_url, run, LABELS), return_counts=True)
        out["label_counts"] = {str(int(v)): int(c) for v, c in zip(values, counts)}
    return out


@task(name="embed-points", **IO_TASK)
def embed_points_task(store_url: str, run: str, store_token: str, *, holdout: float,
                      random_state: int | None) -> dict[str, Any]:
    """Write the outputs of every row of X for the model of ``run`` (fit rows: fitted results; others: mapped).

    Also writes ``outputs/<run>/in_fit`` (n,) bool (the rows the model was fitted on) and
    ``outputs/<run>/held_out`` (n,) bool (the run's hold-out draw, :func:`tasks.common.fit_rows_for`).
    """
    n = x_shape(store_url)[0]
    entry, model, rows = load_fitted(store_url, run, store_token, with_index=False)
    _write_fit_masks(store_url, run, n, rows, fit_rows_for(n, holdout, random_state))
    fitted = _fitted_results(entry, model)
    if fitted is None or rows.size < n:  # some rows are mapped out-of-sample: they need the index
        attach_index(model, store_url, run, store_token, rows)
    if fitted is None and not _can_map(model):
        raise StoreFormatError(f"method {entry.name!r} with these parameters has no out-of-sample map")
    return _write_all(store_url, run, entry, model, rows, fitted, {"method": entry.name}, "embed-points")


def _write_fit_masks(store_url: str, run: str, n: int, rows: np.ndarray, fit_set: np.ndarray) -> None:
    for name, members in ((IN_FIT, rows), (HELD_OUT, fit_set)):
        mask = np.zeros(n, dtype=bool)
        mask[members] = True
        write_point_array(store_url, layout.output_path(run, name), mask if name == IN_FIT else ~mask,
                          overwrite=True)


def _can_map(model: Any) -> bool:
    return any(hasattr(model, name) for name in ("transform", "kernel_features"))


@task(name="extend-points", **IO_TASK)
def extend_points_task(model_store: str, model_run: str, model_token: str, out_store: str,
                       out_run: str) -> dict[str, Any]:
    """Write the outputs of every row of ``out_store`` with the model of ``model_run`` stored in ``model_store``."""
    entry, model, _ = load_fitted(model_store, model_run, model_token)
    attrs = {"method": entry.name, "model_store": str(model_store), "model_run": model_run}
    return _write_all(out_store, out_run, entry, model, np.zeros(0, dtype=np.int64), None, attrs,
                      "extend-points")


def model_n_features(store_url: str, run: str) -> int:
    """Number of features of the points the model of ``run`` was fitted on (X of its store)."""
    return x_shape(store_url)[1]
