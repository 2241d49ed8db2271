"""Tasks of the NSSE flow (paper 001): fit on a labeled subset, then embed every point with the interpolator.

NSSE's training is O(N^3) in the number of training points, so :func:`fit_nsse_task` fits on a stratified
random subset of ``n_train`` labeled rows (thousands); :func:`embed_points_task` then evaluates the RBF
interpolator f(x) = sum_i c_i exp(-||x - x_i||^2 / sigma^2) (paper 001 eq. 6) on every row chunk of X on
Dask and writes ``embeddings/<run>`` (fitted rows get their training coordinates Y).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prefect import task

from spectral._validation import check_random_state
from spectral.errors import InputDataError
from spectral.nsse import NSSE
from storage.arrays import read_labels, read_X, row_chunks, x_shape
from storage.embedding_io import create_embedding
from storage.errors import StoreFormatError
from storage.models import read_model, write_model

from tasks.common import COMPUTE_TASK, FIT_ROWS, IO_TASK, chunk_fit_slices, map_row_chunks, write_embedding_chunk

METHOD = "nsse"


def training_rows(y: np.ndarray, n_train: int, random_state: int | None) -> np.ndarray:
    """Sorted rows of a stratified random subset of ``n_train`` labeled points (``y >= 0``).

    Each class gets ``n_train`` times its share of the labeled points (at least 2, for the within-class
    graph); the draw uses the run's seed.
    """
    labeled = np.flatnonzero(y >= 0)
    if labeled.size < n_train:
        raise InputDataError(f"n_train must be <= the number of labeled points ({labeled.size}); got {n_train}")
    rng = check_random_state(random_state)
    classes, counts = np.unique(y[labeled], return_counts=True)
    quota = np.maximum(2, np.floor(n_train * counts / counts.sum()).astype(int))
    quota[np.argsort(-counts)[: max(0, n_train - quota.sum())]] += 1  # hand out the remainder
    rows = [rng.choice(labeled[y[labeled] == c], min(q, n), replace=False) for c, q, n in zip(classes, quota, counts)]
    return np.sort(np.concatenate(rows)).astype(np.int64)


@task(name="nsse-fit", **COMPUTE_TASK)
def fit_nsse_task(store_url: str, run: str, store_token: str, *, n_train: int, n_components: int, mu1: float,
                  mu2: float, mu3: float, n_neighbors: int, max_iter: int, random_state: int | None) -> dict[str, Any]:
    """Fit NSSE on ``n_train`` labeled rows of the store and write the model to ``models/<run>``."""
    y = read_labels(store_url)
    if y is None:
        raise StoreFormatError(f"store {store_url} has no labels y: NSSE is supervised (ingest with labels=...)")
    rows = training_rows(np.asarray(y), n_train, random_state)
    X = read_X(store_url)[rows].astype(np.float64)
    t0 = time.perf_counter()
    est = NSSE(n_components, mu1=mu1, mu2=mu2, mu3=mu3, n_neighbors=n_neighbors, max_iter=max_iter,
               random_state=random_state)
    est.fit(X, np.asarray(y)[rows])
    fit_seconds = time.perf_counter() - t0
    arrays, attrs = est.to_state()
    write_model(store_url, run, {**arrays, FIT_ROWS: rows}, {**attrs, "method": METHOD, "history": est.history_})
    return {"n_train": int(rows.size), "sigma": est.sigma_, "n_iter": est.n_iter_, "converged": est.converged_,
            "objective": [h["objective"] for h in est.history_], "fit_seconds": fit_seconds}


def load_model(store_url: str, run: str) -> tuple[NSSE, np.ndarray]:
    """The stored NSSE interpolator of ``run`` and its training rows."""
    arrays, attrs = read_model(store_url, run)
    if attrs.get("method") != METHOD:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {attrs.get('method')!r} model, not {METHOD!r}")
    rows = arrays.pop(FIT_ROWS)
    return NSSE.from_state(arrays, attrs), rows


def transform_rows(model: NSSE, X_rows: np.ndarray) -> tuple[np.ndarray, dict]:
    """Per-chunk out-of-sample map (runs on a Dask worker): the RBF interpolator of eq. 6."""
    return model.transform(X_rows), {}


def _write_all(store_url: str, run: str, model: NSSE, rows: np.ndarray, attrs: dict, name: str) -> dict[str, Any]:
    from distributed import get_client

    bounds = row_chunks(store_url)
    create_embedding(store_url, run, model.embedding_.shape[1], overwrite=True, attrs=attrs)
    [payload] = get_client().scatter([model], broadcast=True)
    Y = model.embedding_ if rows.size else np.zeros((0, model.embedding_.shape[1]))
    per_chunk = [(rows[lo:hi] - start, Y[lo:hi]) for (start, _), (lo, hi) in zip(bounds, chunk_fit_slices(rows, bounds))]
    infos = map_row_chunks(write_embedding_chunk, bounds, args=(store_url, run, transform_rows, payload),
                           per_chunk=per_chunk, name=name)
    return {"n_chunks": len(bounds), "n_fitted": sum(i["n_fitted"] for i in infos),
            "n_extended": sum(i["n_extended"] for i in infos)}


@task(name="nsse-embed-points", **IO_TASK)
def embed_points_task(store_url: str, run: str, store_token: str) -> dict[str, Any]:
    """Write ``embeddings/<run>`` chunk by chunk on Dask: training rows get Y, the others f(x)."""
    model, rows = load_model(store_url, run)
    return _write_all(store_url, run, model, rows, {"method": METHOD}, "nsse-embed-points")


@task(name="nsse-extend-points", **IO_TASK)
def extend_points_task(model_store: str, model_run: str, model_token: str, out_store: str, out_run: str,
                       out_token: str) -> dict[str, Any]:
    """Embed every row of ``out_store`` with the NSSE model of ``model_run`` stored in ``model_store``."""
    model, _ = load_model(model_store, model_run)
    if x_shape(out_store)[1] != model.n_features_in_:
        raise StoreFormatError(
            f"new points must have {model.n_features_in_} features like the model's training data; "
            f"got {x_shape(out_store)[1]}")
    attrs = {"method": METHOD, "model_store": str(model_store), "model_run": model_run}
    return _write_all(out_store, out_run, model, np.zeros(0, dtype=np.int64), attrs, "nsse-extend-points")
