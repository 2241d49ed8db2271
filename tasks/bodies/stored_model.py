"""Restoring a stored model for out-of-sample use (Prefect-free: runs on Dask workers).

A model is ``models/<run>`` of a store: the arrays and attributes of its ``to_state`` plus ``fit_rows`` (the
rows of X it was fitted on), with the attributes ``method`` (registry name) and ``state``, which says how to
restore it: :data:`ESTIMATOR_STATE` (the estimator's ``from_state``) or the Laplacian eigenmaps model of the
at-scale stages (:data:`tasks.bodies.laplacian_eigenmaps.MODEL_STATE`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.storage.arrays import read_X, x_shape
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.models import ATTR_CLUSTERING, read_model
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.fit_rows import FIT_ROWS
from eigenflow.tasks.registry import MethodEntry, get_entry

#: ``attrs["state"]`` of a model written from the estimator's ``to_state``.
ESTIMATOR_STATE = "estimator"


def load_fitted(store: Store, run: str, *, index: Any = None, with_index: bool = True
                ) -> tuple[MethodEntry, Any, np.ndarray]:
    """``(entry, model, fit_rows)`` of the model of ``run`` in ``store``.

    With ``with_index``, a model that needs the kNN index of its training points gets it
    (:func:`attach_index`: ``index`` when given, else rebuilt from the store's X).
    """
    from eigenflow.tasks.bodies import laplacian_eigenmaps as le

    arrays, attrs = read_model(store, run)
    method = attrs.get("method")
    entry = get_entry(method) if isinstance(method, str) else None
    if entry is None or "state" not in attrs:
        raise StoreFormatError(f"model {run!r} of {store} was written by an older eigenflow (no method / state "
                               "attributes); run `eigenflow embed` again")
    rows = arrays.pop(FIT_ROWS)
    if rows.size and int(rows.max()) >= x_shape(store)[0]:
        raise StoreFormatError(f"model {run!r} was fitted on rows up to {int(rows.max())} but X of {store} has "
                               f"{x_shape(store)[0]} rows: the store was re-ingested; fit again")
    if attrs["state"] == le.MODEL_STATE:
        from eigenflow.spectral.embedding.out_of_sample import LaplacianEigenmapsModel

        model = LaplacianEigenmapsModel.from_state(arrays, attrs["state_attrs"])
        if ATTR_CLUSTERING in attrs:  # an eigenmap with its fitted cluster rule (tasks.bodies.clustering)
            model = clustered_model(entry, model, attrs[ATTR_CLUSTERING], x_shape(store)[1])
    elif attrs["state"] == ESTIMATOR_STATE:
        model = entry.estimator_class.from_state(arrays, attrs["state_attrs"])
    else:
        raise StoreFormatError(f"model {run!r} of {store} has an unknown state {attrs['state']!r}")
    if with_index:
        attach_index(model, store, rows, index)
    return entry, model, rows


def clustered_model(entry: MethodEntry, eigenmap: Any, clustering: dict, n_features: int) -> Any:
    """The fitted :class:`~spectral.clustering.SpectralClustering` of a stored eigenmap and its cluster rule."""
    from eigenflow.spectral.cluster_assignment import ClusterRule

    return entry.estimator_class.from_eigenmap(eigenmap, ClusterRule.from_attrs(clustering["rule"]),
                                               clustering["params"], n_features, clustering.get("eigengap"))


def attach_index(model: Any, store: Store, rows: np.ndarray, index: Any = None) -> None:
    """Give a restored model the kNN index of its training points (rows ``rows`` of the store's X).

    ``index``: a :class:`tasks.bodies.laplacian_eigenmaps.FitIndex` kept on the cluster (the run's kNN stage's, or a
    model's index published for later runs: :mod:`tasks.model_index`), or None: then the index is rebuilt from X
    with the stored parameters. Models without a kNN-based out-of-sample map are left as they are.
    """
    eigenmap = _knn_mapped(model)
    if eigenmap is not None:
        if index is not None:
            if not np.array_equal(index.rows, rows):
                raise StoreFormatError("the kNN index kept on the cluster was built on other rows than the model's "
                                       "fit rows; run the flow again with a new run name")
            eigenmap.attach_index(index.index)
        else:
            eigenmap.attach_index(_rebuilt_index(store, rows, eigenmap.knn_params))
    elif hasattr(model, "rebuild_index"):  # TSK / RSK
        model.rebuild_index(np.asarray(read_X(store)[rows], dtype=np.float64))


def model_fit_index(store: Store, run: str) -> Any:
    """The kNN index of the fit rows of the model of ``run`` (a :class:`tasks.bodies.laplacian_eigenmaps.FitIndex`,
    rebuilt from the store's X with the stored parameters), or None for a model whose out-of-sample map needs none
    of that kind (TSK / RSK rebuild their own; estimators without a kNN map)."""
    import time

    from eigenflow.tasks.bodies.laplacian_eigenmaps import FitIndex

    _, model, rows = load_fitted(store, run, with_index=False)
    eigenmap = _knn_mapped(model)
    if eigenmap is None:
        return None
    t0 = time.perf_counter()
    index = _rebuilt_index(store, rows, eigenmap.knn_params)
    return FitIndex(index, rows, 0, time.perf_counter() - t0)


def _knn_mapped(model: Any) -> Any:
    """The Laplacian eigenmaps model behind ``model`` whose out-of-sample map queries a kNN index of the fit rows
    (SpectralClustering: its eigenmap's), or None."""
    model = getattr(model, "eigenmap_model_", model)
    return model if hasattr(model, "attach_index") and hasattr(model, "knn_params") else None


def _rebuilt_index(store: Store, rows: np.ndarray, knn_params: dict) -> Any:
    """The kNN index of X[rows] rebuilt with the stored parameters, its query structures built (queried next)."""
    from eigenflow.spectral.neighbours.index import KNNIndex

    return KNNIndex.rebuild(read_X(store)[rows], knn_params).prepare()
