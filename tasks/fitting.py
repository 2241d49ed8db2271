"""How each method is fitted from a store: the fit strategies of the registry (:mod:`tasks.registry`).

A strategy turns a :class:`FitRequest` into the fit stages of a run: ``[(stage name, call), ...]``, each call a
Prefect task that reads the store and returns small JSON metadata; the last one writes ``models/<run>``:

- ``in_memory``: the estimator's own ``fit`` on the fit rows read into memory (``y`` with -1 = unlabeled
  when the store has labels; must-link / cannot-link pairs of the store re-indexed to fit positions);
- ``labeled_subset``: the same on a stratified subset of at most :data:`MAX_LABELED_SUBSET` labeled fit rows
  (NSSE / SUPLAP train in O(N^3); every other point is embedded by their RBF interpolator);
- ``discriminant``: DNE / MFA / LFDA linear or with Nystrom kernel features, d0 x d0 sums accumulated over
  the row blocks of the store's Dask array (:func:`spectral.discriminant.scale.fit_at_scale`);
- ``laplacian_eigenmaps``: kNN graph -> weights -> sparse eigensolve (three stages, see
  :mod:`tasks.laplacian_eigenmaps`), for ``affinity="knn"``; otherwise ``in_memory``.

Every model is stored as ``(arrays, attrs)`` with the fit rows (``fit_rows``) and the attributes
``method`` (registry name) and ``state`` (how to restore it: :func:`tasks.points.load_fitted`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from prefect import task

from spectral._arrays import distinct_rows
from spectral.datasets import stratified_subset
from spectral.errors import InputDataError
from storage.arrays import X_as_dask, read_labels, read_X, x_shape
from storage.graph_io import read_constraints
from storage.models import write_model

from tasks import laplacian_eigenmaps as le
from tasks.common import COMPUTE_TASK, FIT_ROWS, fit_rows_for
from tasks.registry import get_entry, make_estimator

#: Largest labeled subset NSSE / SUPLAP train on (their fit is O(N^3) in it): 2,000 points fit in ~40 s here.
MAX_LABELED_SUBSET = 2000
#: ``attrs["state"]`` of a model written from the estimator's ``to_state``.
ESTIMATOR_STATE = "estimator"

@dataclass(frozen=True)
class Stage:
    """One fit stage: ``call()`` runs it (a Prefect task) and returns its metadata; ``outputs_intact()`` tells
    whether what it wrote for this run is still in the store (a resumed run skips a stage that completed
    and whose outputs are intact)."""

    name: str
    call: Callable[[], dict]
    outputs_intact: Callable[[], bool]


@dataclass(frozen=True)
class FitRequest:
    """What a fit needs: the store, the run, the method and its full parameters, the fit-set rule."""

    store: str
    run: str
    token: str
    method: str
    params: dict
    holdout: float
    random_state: int | None


def fit_stages(req: FitRequest) -> list[Stage]:
    """The fit stages of ``req.method`` (see the module docstring)."""
    entry = get_entry(req.method)
    strategy = entry.fit
    if strategy == "laplacian_eigenmaps" and req.params.get("affinity", "knn") == "knn":
        return _laplacian_eigenmaps_stages(req)
    if strategy == "discriminant" and _discriminant_at_scale(req.params):
        return [Stage("fit", lambda: discriminant_fit_task(req.store, req.run, req.token, method=req.method,
                                                           params=req.params, holdout=req.holdout,
                                                           random_state=req.random_state), lambda: _has_model(req))]
    subset = MAX_LABELED_SUBSET if strategy == "labeled_subset" else None
    return [Stage("fit", lambda: fit_task(req.store, req.run, req.token, method=req.method, params=req.params,
                                          holdout=req.holdout, random_state=req.random_state,
                                          labeled_subset=subset), lambda: _has_model(req))]


def _has_model(req: FitRequest) -> bool:
    from storage.models import list_models

    return req.run in list_models(req.store)


# ---- the estimator's own fit on the fit rows -------------------------------------------------------------------
@task(name="fit", **COMPUTE_TASK)
def fit_task(store_url: str, run: str, store_token: str, *, method: str, params: dict, holdout: float,
             random_state: int | None, labeled_subset: int | None = None) -> dict[str, Any]:
    """Fit ``method`` on the fit rows of the store (read into memory) and write ``models/<run>``."""
    entry = get_entry(method)
    n, _ = x_shape(store_url)
    fit_set = fit_rows_for(n, holdout, random_state)
    y_all = read_labels(store_url)
    y_all = None if y_all is None else np.asarray(y_all, dtype=np.int64)
    X_all = read_X(store_url)
    rows, n_duplicates = distinct_rows(X_all[fit_set], None if y_all is None else y_all[fit_set], fit_set)
    if labeled_subset is not None:
        if y_all is None:
            raise InputDataError(f"method {method!r} needs labels; store {store_url} has none")
        rows = stratified_subset(y_all[rows], labeled_subset, random_state, rows)
    X = np.asarray(X_all[rows], dtype=np.float64)
    y = None if y_all is None else y_all[rows]
    del X_all
    store_params = {}
    if "must_link" in entry.store_params:
        store_params = dict(zip(("must_link", "cannot_link"), _pairs_at_fit_positions(store_url, rows)))
    est = make_estimator(entry, params, **store_params)
    t0 = time.perf_counter()
    if y is None or (entry.needs_labels is False and not np.any(y >= 0)):
        est.fit(X)
    else:
        est.fit(X, y)
    fit_seconds = time.perf_counter() - t0
    _write_estimator(store_url, run, method, est, rows)
    return {"n_fit": int(rows.size), "n_labeled": 0 if y is None else int(np.sum(y >= 0)),
            "n_duplicates": n_duplicates, "fit_seconds": fit_seconds, **_fit_summary(est)}


def _pairs_at_fit_positions(store_url: str, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The store's must-link / cannot-link pairs re-indexed to fit positions (pairs with a held-out point dropped)."""
    n = x_shape(store_url)[0]
    position = np.full(n, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size)
    out = []
    for pairs in read_constraints(store_url):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        mapped = position[pairs] if pairs.size else pairs
        mapped = mapped[np.all(mapped >= 0, axis=1)] if mapped.size else mapped
        out.append(mapped if mapped.size else None)
    return out[0], out[1]


def _write_estimator(store_url: str, run: str, method: str, est: Any, rows: np.ndarray) -> None:
    arrays, attrs = est.to_state()
    if FIT_ROWS in arrays:
        raise InputDataError(f"model array name {FIT_ROWS!r} is reserved")
    write_model(store_url, run, {**arrays, FIT_ROWS: rows},
                {"method": method, "state": ESTIMATOR_STATE, "state_attrs": attrs})


def _fit_summary(est: Any) -> dict[str, Any]:
    """Small JSON figures of a fitted estimator for the manifest (eigenvalues, iterations, sigma, mu)."""
    out: dict[str, Any] = {}
    for name in ("eigenvalues_", "mu_", "theta_", "beta_"):
        value = getattr(est, name, None)
        if isinstance(value, np.ndarray) and value.ndim == 1 and value.size <= 100:
            out[name.rstrip("_")] = [float(v) for v in value]
    for name in ("sigma_", "n_iter_", "converged_", "lp_objective_"):
        value = getattr(est, name, None)
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            out[name.rstrip("_")] = value.item() if hasattr(value, "item") else value
    return out


# ---- DNE / MFA / LFDA at scale ---------------------------------------------------------------------------------
def _discriminant_at_scale(params: dict) -> bool:
    return params.get("mode") == "linear" or (params.get("mode") == "kernel"
                                              and params.get("n_landmarks") is not None)


@task(name="discriminant-fit", **COMPUTE_TASK)
def discriminant_fit_task(store_url: str, run: str, store_token: str, *, method: str, params: dict,
                          holdout: float, random_state: int | None) -> dict[str, Any]:
    """Fit DNE / MFA / LFDA on the fit rows by chunked sums over the store's Dask array; write the model."""
    import dask

    from spectral.discriminant.scale import fit_at_scale

    y_all = read_labels(store_url)
    if y_all is None:
        raise InputDataError(f"method {method!r} needs labels; store {store_url} has none")
    n, _ = x_shape(store_url)
    fit_set = fit_rows_for(n, holdout, random_state)
    y_fit = np.asarray(y_all, dtype=np.int64)[fit_set]
    kept, n_duplicates = distinct_rows(read_X(store_url)[fit_set], y_fit, np.arange(fit_set.size))
    rows = fit_set[kept]
    X = X_as_dask(store_url)
    if rows.size < n:
        X = X[rows]
    est = make_estimator(get_entry(method), params)
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):  # block reads in this process, not through the cluster
        fit_at_scale(est, X, np.asarray(y_all, dtype=np.int64)[rows], knn_method="auto",
                     random_state=random_state)
    fit_seconds = time.perf_counter() - t0
    _write_estimator(store_url, run, method, est, rows)
    return {"n_fit": int(rows.size), "n_labeled": int(np.sum(np.asarray(y_all)[rows] >= 0)),
            "n_duplicates": n_duplicates, "fit_seconds": fit_seconds, **_fit_summary(est)}


# ---- Laplacian eigenmaps of a kNN graph at scale ---------------------------------------------------------------
def _laplacian_eigenmaps_stages(req: FitRequest) -> list[Stage]:
    p = req.params
    args = (req.store, req.run, req.token)
    return [
        Stage("knn", lambda: le.knn_task(*args, n_neighbors=p["n_neighbors"], knn_method=p["knn_method"],
                                         metric=p.get("metric", "euclidean"), holdout=req.holdout,
                                         random_state=req.random_state),
              lambda: le.graph_belongs_to(req.store, req.run, "knn")),
        Stage("weights", lambda: le.weights_task(*args, weighting=p["weighting"], symmetrize=p["symmetrize"]),
              lambda: le.graph_belongs_to(req.store, req.run, "weights")),
        Stage("eigensolve", lambda: le.eigensolve_task(
            *args, n_components=p["n_components"], normalization=p["normalization"],
            eigen_solver=p["eigen_solver"], on_disconnected=p["on_disconnected"], tol=p.get("tol"),
            random_state=req.random_state), lambda: _has_model(req)),
    ]
