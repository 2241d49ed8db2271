"""Figures that say whether a fitted model still describes a batch of new rows, cheap enough for every batch.

- :func:`distance_drift` compares each new row's distance to its k-th nearest fitted row with the fitted rows'
  own k-th neighbour distances (from the fit's kNN graph). ``share_beyond`` is the fraction of new rows farther
  than the ``quantile`` quantile of the fitted distances, ``median_ratio`` the ratio of the two medians. A batch
  drawn from the fitted distribution gives ``share_beyond`` close to ``1 - quantile`` and ``median_ratio``
  close to 1, up to sampling noise. The two distances are comparable because neither counts the row measured:
  a new row is not part of the graph it is measured against, and a fitted row's k-th neighbour excludes the
  row itself (``fitted_kth`` taken with the row counted as its own first neighbour is the (k-1)-th distance,
  shorter, and makes ``median_ratio`` read somewhat above 1 for a batch that has not drifted). Rows from a
  region the fit did not cover give a ``share_beyond`` well above ``1 - quantile`` and a ``median_ratio``
  well above 1.
- :func:`knn_preservation` is the mean share of each new row's input-space neighbours among a reference
  sample of fitted rows that are also its neighbours in the embedding: how well the out-of-sample map keeps
  the new rows' neighbourhoods (1 for a map that keeps them all).

Neither function decides anything: thresholds on these figures are the caller's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.neighbors import NearestNeighbors

from eigenflow.spectral._validation import check_array_2d, check_float, check_int
from eigenflow.spectral.errors import InputDataError

__all__ = ["distance_drift", "knn_preservation"]


def distance_drift(new_kth: Any, fitted_kth: Any, *, quantile: float = 0.99) -> dict[str, Any]:
    """How far a batch of new rows lies from the fitted rows, against the fitted rows' own spacing.

    Parameters
    ----------
    new_kth : array-like, shape (m,)
        Distance of each new row to its k-th nearest fitted row.
    fitted_kth : array-like, shape (n,)
        Distance of each fitted row to its k-th nearest other fitted row (the fit's kNN graph), same k.
    quantile : float in (0, 1)
        The quantile of ``fitted_kth`` taken as the threshold.

    Returns
    -------
    dict
        JSON-able: ``threshold`` (the ``quantile`` quantile of ``fitted_kth``), ``share_beyond`` (fraction of
        new rows with ``new_kth > threshold``), ``expected_share`` (``1 - quantile``, what a batch from the
        fitted distribution gives up to sampling noise), ``median_ratio`` (``median(new_kth) /
        median(fitted_kth)``; None when ``median(fitted_kth)`` is 0, i.e. most fitted rows have k duplicates),
        ``n_new`` (m) and ``quantile``.
    """
    quantile = check_float("quantile", quantile, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    new = _distances("new_kth", new_kth)
    fitted = _distances("fitted_kth", fitted_kth)
    threshold = float(np.quantile(fitted, quantile))
    fitted_median = float(np.median(fitted))
    return {
        "threshold": threshold,
        "share_beyond": float(np.mean(new > threshold)),
        "expected_share": 1.0 - quantile,
        "median_ratio": float(np.median(new)) / fitted_median if fitted_median > 0.0 else None,
        "n_new": int(new.shape[0]),
        "quantile": quantile,
    }


def knn_preservation(X_new: Any, X_ref: Any, Z_new: Any, Z_ref: Any, *, n_neighbors: int = 10) -> float:
    """Mean over the new rows of ``|N_X(i) & N_Z(i)| / n_neighbors``, in [0, 1].

    ``N_X(i)``: indices of the ``n_neighbors`` rows of ``X_ref (m_ref, d)`` nearest to ``X_new[i]`` (input
    space); ``N_Z(i)``: those of the rows of ``Z_ref (m_ref, k)`` nearest to ``Z_new[i]`` (embedding).
    ``X_new (m, d)`` and ``Z_new (m, k)`` are the same new rows, ``X_ref`` and ``Z_ref`` the same reference
    rows. Exact euclidean search (scikit-learn's ``NearestNeighbors``); ties are broken as it breaks them.
    """
    X_new, X_ref = check_array_2d(X_new, "X_new"), check_array_2d(X_ref, "X_ref")
    Z_new, Z_ref = check_array_2d(Z_new, "Z_new"), check_array_2d(Z_ref, "Z_ref")
    if X_new.shape[1] != X_ref.shape[1] or Z_new.shape[1] != Z_ref.shape[1]:
        raise InputDataError(
            f"X_new and X_ref must have the same columns, and Z_new and Z_ref; got X_new {X_new.shape}, "
            f"X_ref {X_ref.shape}, Z_new {Z_new.shape}, Z_ref {Z_ref.shape}"
        )
    if X_new.shape[0] != Z_new.shape[0] or X_ref.shape[0] != Z_ref.shape[0]:
        raise InputDataError(
            f"X_new and Z_new must have the same rows, and X_ref and Z_ref; got X_new {X_new.shape}, "
            f"Z_new {Z_new.shape}, X_ref {X_ref.shape}, Z_ref {Z_ref.shape}"
        )
    k = check_int("n_neighbors", n_neighbors, low=1, high=X_ref.shape[0])
    near_x = NearestNeighbors(n_neighbors=k, metric="euclidean", algorithm="brute").fit(X_ref).kneighbors(
        X_new, return_distance=False)  # brute force (BLAS): trees do not prune in the input's dimensions
    near_z = NearestNeighbors(n_neighbors=k, metric="euclidean").fit(Z_ref).kneighbors(Z_new, return_distance=False)
    # each row's two index sets hold distinct indices: a shared index is an equal adjacent pair once sorted
    both = np.sort(np.hstack([near_x, near_z]), axis=1)
    shared = np.count_nonzero(both[:, 1:] == both[:, :-1], axis=1)
    return float(np.mean(shared) / k)


def _distances(name: str, values: Any) -> np.ndarray:
    """``values`` as a non-empty 1-D float64 array of finite distances >= 0, else :class:`InputDataError`."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"{name} must be a 1-D array of distances; got {values!r:.80}") from exc
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InputDataError(f"{name} must be a non-empty 1-D array of distances; got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputDataError(
            f"{name} must hold finite distances >= 0; got {arr[first]} at index {first} ({int(bad.sum())} bad values)"
        )
    return arr
