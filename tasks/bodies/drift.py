"""The drift figures of an update, on a Dask worker (Prefect-free): does the model still describe the new rows?

Measured on samples, so that the cost does not grow with the store: a reference sample of the model's fit rows
(at most :data:`REFERENCE_ROWS`) and a sample of the new rows (at most :data:`NEW_ROWS`), both drawn from the
update's seed. Figures (:mod:`spectral.drift`): the new rows' distance to their k-th nearest reference row against
the reference rows' own k-th-neighbour distance (``share_beyond`` its 99th percentile; about 1 % for rows from the
fitted distribution), and the kNN preservation of the map on the new rows next to the same figure for fit rows
held out of the reference (``preservation`` vs ``preservation_fitted``: the map keeps neighbourhoods as well as
the fit did when the two are close). ``drifted`` is ``share_beyond > max_share``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Largest reference sample of fit rows.
REFERENCE_ROWS = 10_000
#: Largest sample of new rows.
NEW_ROWS = 2_000
#: Fit rows of the reference sample kept out of it to give the fitted baseline of kNN preservation.
BASELINE_ROWS = 1_000
#: Defaults of the drift policy: k of the k-th-neighbour distance, its quantile, and the share of new rows beyond
#: that quantile above which a batch is flagged (five times what a batch of the fitted distribution gives).
DEFAULT_NEIGHBORS = 10
DEFAULT_QUANTILE = 0.99
DEFAULT_MAX_SHARE = 0.05


def drift_figures(store: Any, model_run: str, run: str, start: int, stop: int, *, seed: int = 0,
                  n_neighbors: int = DEFAULT_NEIGHBORS, quantile: float = DEFAULT_QUANTILE,
                  max_share: float = DEFAULT_MAX_SHARE) -> dict[str, Any]:
    """The drift figures of rows ``start:stop`` of ``store``, mapped by ``run`` with the model of ``model_run``
    (module docstring); JSON-able."""
    from sklearn.neighbors import NearestNeighbors

    from eigenflow.spectral.drift import distance_drift, knn_preservation
    from eigenflow.storage import layout
    from eigenflow.storage.arrays import read_rows_at
    from eigenflow.storage.models import read_model
    from eigenflow.tasks.bodies.fit_rows import FIT_ROWS

    rng = np.random.default_rng(seed)
    arrays, _ = read_model(store, model_run)
    fit_rows = np.asarray(arrays[FIT_ROWS], dtype=np.int64)
    reference = np.sort(rng.choice(fit_rows, size=min(REFERENCE_ROWS + BASELINE_ROWS, fit_rows.size), replace=False))
    new = start + np.sort(rng.choice(stop - start, size=min(NEW_ROWS, stop - start), replace=False))
    X_ref = read_rows_at(store, layout.X, reference).astype(np.float64)
    Z_ref = read_rows_at(store, layout.embedding_path(model_run), reference).astype(np.float64)
    X_new = read_rows_at(store, layout.X, new).astype(np.float64)
    Z_new = read_rows_at(store, layout.embedding_path(run), new).astype(np.float64)
    probe = np.zeros(reference.size, dtype=bool)
    if reference.size > 2 * n_neighbors + BASELINE_ROWS:
        probe[rng.choice(reference.size, size=BASELINE_ROWS, replace=False)] = True
    X_base, Z_base = X_ref[~probe], Z_ref[~probe]
    k = min(n_neighbors, X_base.shape[0] - 1)
    index = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X_base)  # BLAS: no tree in high dimensions
    fitted_kth = index.kneighbors(X_base, k + 1)[0][:, k]  # the first neighbour is the row itself
    new_kth = index.kneighbors(X_new, k)[0][:, k - 1]
    figures = distance_drift(new_kth, fitted_kth, quantile=quantile)
    figures["preservation"] = knn_preservation(X_new, X_base, Z_new, Z_base, n_neighbors=k)
    figures["preservation_fitted"] = (knn_preservation(X_ref[probe], X_base, Z_ref[probe], Z_base, n_neighbors=k)
                                      if probe.any() else None)
    figures.update(n_neighbors=int(k), n_reference=int(X_base.shape[0]), max_share=float(max_share),
                   drifted=bool(figures["share_beyond"] > max_share))
    return figures
