"""The fit set of a run: which rows of X a model is fitted on (Prefect-free: also used on Dask workers)."""

from __future__ import annotations

import numpy as np

#: Name of the per-point output ``outputs/<run>/in_fit`` (bool): True for the points the model was fitted on.
IN_FIT = "in_fit"
#: Name of the per-point output ``outputs/<run>/held_out`` (bool): True for the points of the run's hold-out draw.
HELD_OUT = "held_out"
#: Name of the model array holding the sorted rows of X the model was fitted on.
FIT_ROWS = "fit_rows"
#: Stream id of the hold-out draw: spawned from the run's seed so that the stages that mirror an estimator's
#: ``fit`` (kNN, eigensolver) see the same random sequence with or without a hold-out.
HOLDOUT_STREAM = 1


def fit_rows_for(n: int, holdout: float, random_state: int | None) -> np.ndarray:
    """Sorted rows (int64) of the fit set: all ``n`` rows, minus ``round(holdout * n)`` drawn at random."""
    from spectral.datasets import holdout_mask

    if holdout == 0:
        return np.arange(n, dtype=np.int64)
    seq = np.random.SeedSequence(random_state).spawn(HOLDOUT_STREAM + 1)[HOLDOUT_STREAM]
    return np.flatnonzero(~holdout_mask(n, holdout, random_state=seq)).astype(np.int64)


def fit_positions(fit_rows: np.ndarray, rows: np.ndarray, *, n_rows: int | None = None, source: str = "graph/knn"
                  ) -> np.ndarray:
    """Positions in the sorted ``fit_rows`` (n_fit,) of ``rows`` (any shape, rows of X that must all be fit rows),
    int64, same shape.

    With ``n_rows`` (the number of rows of X) a position table of that length is indexed (fast; what one
    process holding the whole graph uses); without it each row is binary-searched in ``fit_rows`` (no (n,)
    table: what a worker holding one shard of a graph too large for one process uses). Raises
    :class:`storage.errors.StoreFormatError` naming ``source`` when a row is not a fit row.
    """
    from storage.errors import StoreFormatError

    if n_rows is not None:
        inside = rows.size == 0 or (int(rows.min()) >= 0 and int(rows.max()) < n_rows)
        table = np.full(n_rows, -1, dtype=np.int64)
        table[fit_rows] = np.arange(fit_rows.size)
        positions = table[rows] if inside else rows
        valid = inside and bool(positions.size == 0 or positions.min() >= 0)
    else:
        positions = np.minimum(np.searchsorted(fit_rows, rows), max(fit_rows.size - 1, 0))
        valid = bool(np.array_equal(fit_rows[positions], rows)) if fit_rows.size else rows.size == 0
    if not valid:
        raise StoreFormatError(f"{source} lists neighbours of fit rows that are not fit rows; rerun the knn stage")
    return positions
