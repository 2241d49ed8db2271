"""The fit stage of the methods fitted by their estimator's own ``fit`` (the ``in_memory`` / ``labeled_subset``
strategies) and of DNE / MFA / LFDA at scale (``discriminant``). See :mod:`tasks.fitting` for the strategies.

The bodies here run on a Dask worker (:func:`tasks.dask_calls.run_on_worker`; this module imports no Prefect): they
read the fit rows from the store, fit, and write ``models/<run>`` with the estimator's ``to_state`` plus the fit
rows (``fit_rows``), with the attributes ``method`` and ``state`` (restored by
:func:`tasks.bodies.stored_model.load_fitted`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from eigenflow.spectral._arrays import distinct_rows
from eigenflow.spectral.datasets import stratified_subset
from eigenflow.spectral.errors import InputDataError
from eigenflow.storage.arrays import X_as_dask, read_labels, read_X, x_shape
from eigenflow.storage.graph_io import read_constraints
from eigenflow.storage.models import write_model
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.fit_rows import FIT_ROWS, fit_rows_for
from eigenflow.tasks.bodies.stored_model import ESTIMATOR_STATE
from eigenflow.tasks.registry import get_entry, make_estimator


def fit_estimator(store: Store, run: str, *, method: str, params: dict, holdout: float,
                  random_state: int | None, labeled_subset: int | None = None) -> dict[str, Any]:
    """Fit ``method`` on the fit rows of the store (read into memory) and write ``models/<run>``.

    ``labeled_subset``: fit on a stratified subset of at most that many labeled fit rows (NSSE / SUPLAP).
    Labels are passed as ``y`` (-1 = unlabeled) when the store has them; must-link / cannot-link pairs of the
    store are re-indexed to fit positions.
    """
    entry = get_entry(method)
    n, _ = x_shape(store)
    fit_set = fit_rows_for(n, holdout, random_state)
    y_all = read_labels(store)
    y_all = None if y_all is None else np.asarray(y_all, dtype=np.int64)
    X_all = read_X(store)
    rows, n_duplicates = distinct_rows(X_all[fit_set], None if y_all is None else y_all[fit_set], fit_set)
    if labeled_subset is not None:
        if y_all is None:
            raise InputDataError(f"method {method!r} needs labels; store {store} has none")
        rows = stratified_subset(y_all[rows], labeled_subset, random_state, rows)
    X = np.asarray(X_all[rows], dtype=np.float64)
    y = None if y_all is None else y_all[rows]
    del X_all
    store_params = {}
    if "must_link" in entry.store_params:
        store_params = dict(zip(("must_link", "cannot_link"), _pairs_at_fit_positions(store, rows)))
    est = make_estimator(entry, params, **store_params)
    t0 = time.perf_counter()
    if y is None or (entry.needs_labels is False and not np.any(y >= 0)):
        est.fit(X)
    else:
        est.fit(X, y)
    fit_seconds = time.perf_counter() - t0
    write_estimator(store, run, method, est, rows)
    return {"n_fit": int(rows.size), "n_labeled": 0 if y is None else int(np.sum(y >= 0)),
            "n_duplicates": n_duplicates, "fit_seconds": fit_seconds, **fit_summary(est)}


def _pairs_at_fit_positions(store: Store, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The store's must-link / cannot-link pairs re-indexed to fit positions (pairs with a held-out point dropped)."""
    n = x_shape(store)[0]
    position = np.full(n, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size)
    out = []
    for pairs in read_constraints(store):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        mapped = position[pairs] if pairs.size else pairs
        mapped = mapped[np.all(mapped >= 0, axis=1)] if mapped.size else mapped
        out.append(mapped if mapped.size else None)
    return out[0], out[1]


def write_estimator(store: Store, run: str, method: str, est: Any, rows: np.ndarray) -> None:
    """Write the fitted ``est`` (its ``to_state``) and its fit rows to ``models/<run>``."""
    arrays, attrs = est.to_state()
    if FIT_ROWS in arrays:
        raise InputDataError(f"model array name {FIT_ROWS!r} is reserved")
    write_model(store, run, {**arrays, FIT_ROWS: rows},
                {"method": method, "state": ESTIMATOR_STATE, "state_attrs": attrs})


def fit_summary(est: Any) -> dict[str, Any]:
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


def fit_discriminant(store: Store, run: str, *, method: str, params: dict, holdout: float,
                     random_state: int | None) -> dict[str, Any]:
    """Fit DNE / MFA / LFDA on the fit rows by chunked sums over the store's Dask array; write the model."""
    import dask

    from eigenflow.spectral.methods.discriminant.scale import fit_at_scale

    y_all = read_labels(store)
    if y_all is None:
        raise InputDataError(f"method {method!r} needs labels; store {store} has none")
    n, _ = x_shape(store)
    fit_set = fit_rows_for(n, holdout, random_state)
    y_fit = np.asarray(y_all, dtype=np.int64)[fit_set]
    kept, n_duplicates = distinct_rows(read_X(store)[fit_set], y_fit, np.arange(fit_set.size))
    rows = fit_set[kept]
    X = X_as_dask(store)
    if rows.size < n:
        X = X[rows]
    est = make_estimator(get_entry(method), params)
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):  # block reads inside this worker, not through the cluster
        fit_at_scale(est, X, np.asarray(y_all, dtype=np.int64)[rows], knn_method="auto",
                     random_state=random_state)
    fit_seconds = time.perf_counter() - t0
    write_estimator(store, run, method, est, rows)
    return {"n_fit": int(rows.size), "n_labeled": int(np.sum(np.asarray(y_all)[rows] >= 0)),
            "n_duplicates": n_duplicates, "fit_seconds": fit_seconds, **fit_summary(est)}
