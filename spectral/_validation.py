"""Validation helpers shared by the public functions of :mod:`spectral`.

Public functions validate and normalize here, then call private ``_impl`` functions that only compute
(the scikit-learn ``spectral_embedding`` -> ``_spectral_embedding`` pattern).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .errors import InputDataError, ParameterError


def check_random_state(random_state: Any) -> np.random.Generator:
    """Turn ``random_state`` (None, int, Generator or SeedSequence) into a ``numpy.random.Generator``.

    This is the one seed entry point of eigenflow: every public function and estimator calls it once
    and passes the generator (or seeds spawned from it) down. ``None`` gives fresh OS entropy.
    """
    if random_state is None or isinstance(random_state, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(random_state, numbers.Integral) and int(random_state) < 0:
            raise ParameterError(f"random_state must be None or an integer >= 0; got {random_state!r}")
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        # legacy sklearn-style state: derive a Generator deterministically from it
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    raise ParameterError(
        "random_state must be None, an int >= 0, a numpy SeedSequence or Generator; "
        f"got {type(random_state).__name__}"
    )


def seed_int(rng: np.random.Generator) -> int:
    """Draw one 31-bit integer seed from ``rng`` (for libraries that want an int, e.g. pynndescent)."""
    return int(rng.integers(0, 2**31 - 1))


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int, raising :class:`ParameterError` naming the range if it is outside it.

    ``low`` and ``high`` are inclusive bounds; ``None`` means unbounded.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name} must be an integer in {_range(low, high)}; got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ParameterError(f"{name} must be an integer in {_range(low, high)}; got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Return ``value`` as a finite float inside the given bounds, else raise :class:`ParameterError`."""
    rng = _range(low, high, low_inclusive, high_inclusive)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be a real number in {rng}; got {value!r}")
    value = float(value)
    bad = not np.isfinite(value)
    if low is not None:
        bad |= value < low if low_inclusive else value <= low
    if high is not None:
        bad |= value > high if high_inclusive else value >= high
    if bad:
        raise ParameterError(f"{name} must be a real number in {rng}; got {value}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise :class:`ParameterError` listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(f"{name} must be one of {list(choices)}; got {value!r}")
    return value


def check_array_2d(X: Any, name: str = "X", *, min_rows: int = 1, dtype=np.float64) -> np.ndarray:
    """Validate a 2-D finite numeric array and return it as ``dtype`` (a copy only when needed).

    Raises :class:`InputDataError` for wrong dimensionality, too few rows, non-numeric / complex dtypes
    and NaN or inf values (reporting the first bad row).
    """
    arr = np.asarray(X)
    if arr.dtype == object or np.issubdtype(arr.dtype, np.complexfloating) or not (
        np.issubdtype(arr.dtype, np.number) or arr.dtype == bool
    ):
        raise InputDataError(f"{name} must have a real numeric dtype; got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InputDataError(f"{name} must be 2-D (n_samples, n_features); got {arr.ndim}-D shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise InputDataError(f"{name} must have at least {min_rows} rows; got {arr.shape[0]}")
    if arr.shape[1] < 1:
        raise InputDataError(f"{name} must have at least 1 column; got shape {arr.shape}")
    arr = arr.astype(dtype, copy=False)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        first = int(np.flatnonzero(~finite)[0])
        raise InputDataError(f"{name} contains NaN or inf values; first bad row index is {first}")
    return arr


def _range(low, high, low_inclusive: bool = True, high_inclusive: bool = True) -> str:
    lo = "(-inf" if low is None else ("[" if low_inclusive else "(") + f"{low}"
    hi = "inf)" if high is None or high == float("inf") else f"{high}" + ("]" if high_inclusive else ")")
    return f"{lo}, {hi}"
