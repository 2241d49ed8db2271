"""Tasks of the paper 000 flow: (SS-)(K)DNE / MFA / LFDA fitted at scale on a labeled store, then every point
embedded chunk by chunk.

:func:`fit_task` reads the labels (-1 = unlabeled) and X as a Dask array, fits with
:func:`spectral.discriminant.scale.fit_at_scale` (p x p matrices accumulated over row blocks, sparse W^(2); Nyström
features for the kernel variants) and writes the model (projection, offset, landmarks) to ``models/<run>``.
:func:`embed_points_task` writes ``embeddings/<run>`` for every row with ``A x`` (eq. 8) or ``U k(x)`` (eq. 11)
on the Dask cluster (for these parametric methods the training rows use the same map: fit_transform ==
transform).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prefect import task

from spectral._validation import check_choice
from spectral.discriminant import DNE, LFDA, MFA
from spectral.discriminant.scale import fit_at_scale
from storage.arrays import X_as_dask, read_labels, row_chunks, x_shape
from storage.embedding_io import create_embedding
from storage.errors import StoreFormatError
from storage.models import read_model, write_model

from tasks.common import COMPUTE_TASK, IO_TASK, map_row_chunks, write_embedding_chunk

#: registered method names (flows.methods) -> estimator class
ESTIMATORS = {"dne": DNE, "mfa": MFA, "lfda": LFDA}
#: estimator parameters a run may set (see :class:`spectral.discriminant.estimators._Paper000Estimator`)
ESTIMATOR_PARAMS = ("n_components", "n_neighbors", "gamma", "mode", "kernel", "kernel_params", "manifold_neighbors",
                    "manifold_weighting", "regularization", "reg_eps", "scaling", "n_landmarks", "random_state")


def make_estimator(algorithm: str, params: dict):
    """The estimator of ``algorithm`` ("dne", "mfa", "lfda") with the given parameters."""
    check_choice("algorithm", algorithm, sorted(ESTIMATORS))
    return ESTIMATORS[algorithm](**{k: v for k, v in params.items() if k in ESTIMATOR_PARAMS})


@task(name="paper000-fit", **COMPUTE_TASK)
def fit_task(store_url: str, run: str, store_token: str, *, algorithm: str, params: dict,
             knn_method: str = "auto") -> dict[str, Any]:
    """Fit ``algorithm`` on the whole labeled store at scale and write the model to ``models/<run>``."""
    y = read_labels(store_url)
    if y is None:
        raise StoreFormatError(f"store {store_url} has no labels y: {algorithm.upper()} needs labels "
                               "(-1 = unlabeled; ingest with labels=...)")
    import dask

    est = make_estimator(algorithm, params)
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):  # block reads in this process, not through the cluster
        fit_at_scale(est, X_as_dask(store_url), np.asarray(y, dtype=np.int64), knn_method=knn_method,
                     random_state=params.get("random_state"))
    fit_seconds = time.perf_counter() - t0
    arrays, attrs = est.to_state()
    write_model(store_url, run, arrays, {**attrs, "algorithm": attrs["method"], "method": algorithm})
    return {"algorithm": algorithm, "n_components": int(est.n_components_),
            "eigenvalues": [float(v) for v in est.eigenvalues_], "n_labeled": int(np.sum(np.asarray(y) >= 0)),
            "fit_seconds": fit_seconds}


def load_model(store_url: str, run: str):
    """The stored estimator of ``run``."""
    arrays, attrs = read_model(store_url, run)
    algorithm = attrs.get("method")
    if algorithm not in ESTIMATORS:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {algorithm!r} model, not one of {sorted(ESTIMATORS)}")
    return ESTIMATORS[algorithm].from_state(arrays, {**attrs, "method": attrs["algorithm"]})


def transform_rows(model, X_rows: np.ndarray) -> tuple[np.ndarray, dict]:
    """Per-chunk map (runs on a Dask worker): ``A x`` or ``U k(x)``."""
    return model.transform(np.asarray(X_rows, dtype=np.float64)), {}


def _write_all(store_url: str, run: str, model, attrs: dict, name: str) -> dict[str, Any]:
    from distributed import get_client

    bounds = row_chunks(store_url)
    d = int(model.n_components_)
    create_embedding(store_url, run, d, overwrite=True, attrs=attrs)
    [payload] = get_client().scatter([model], broadcast=True)
    empty = (np.zeros(0, dtype=np.int64), np.zeros((0, d)))
    infos = map_row_chunks(write_embedding_chunk, bounds, args=(store_url, run, transform_rows, payload),
                           per_chunk=[empty] * len(bounds), name=name)
    return {"n_chunks": len(bounds), "n_embedded": sum(i["n_extended"] for i in infos), "n_components": d}


@task(name="paper000-embed-points", **IO_TASK)
def embed_points_task(store_url: str, run: str, store_token: str) -> dict[str, Any]:
    """Write ``embeddings/<run>`` for every row of X, chunk by chunk on Dask."""
    model = load_model(store_url, run)
    return _write_all(store_url, run, model, {"method": "paper000"}, "paper000-embed-points")


@task(name="paper000-extend-points", **IO_TASK)
def extend_points_task(model_store: str, model_run: str, model_token: str, out_store: str, out_run: str,
                       out_token: str) -> dict[str, Any]:
    """Embed every row of ``out_store`` with the model of ``model_run`` stored in ``model_store``."""
    model = load_model(model_store, model_run)
    if x_shape(out_store)[1] != model.n_features_in_:
        raise StoreFormatError(f"new points must have {model.n_features_in_} features like the model's training "
                               f"data; got {x_shape(out_store)[1]}")
    attrs = {"method": "paper000", "model_store": str(model_store), "model_run": model_run}
    return _write_all(out_store, out_run, model, attrs, "paper000-extend-points")
