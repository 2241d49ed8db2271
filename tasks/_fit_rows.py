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
