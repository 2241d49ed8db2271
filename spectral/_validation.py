"""Validation helpers shared by the public functions and estimators of :mod:`spectral`.

Public functions validate and normalize here, then call private ``_impl`` functions that only compute
(the scikit-learn ``spectral_embedding`` -> ``_spectral_embedding`` pattern).

Data (``X``, ``y``) are validated by scikit-learn's own tools (``validate_data`` / ``check_array``,
``column_or_1d``, ``check_classification_targets``, ``check_is_fitted``), so rules and messages are the ones
scikit-learn users know; the errors they raise are re-raised as eigenflow's :class:`InputDataError` (a
``ValueError``) or :class:`InputTypeError` (also a ``TypeError``, e.g. sparse input), message unchanged.
Parameters are checked here too (``check_int`` ...: the message names the parameter, its range and the
value); a parameter bounded by the data size is clipped with a :class:`ParameterAdjustedWarning`
(:func:`clip_int`) rather than refused.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings
from typing import Any

import numpy as np

from eigenflow.spectral.errors import EigenflowError, InputDataError, InputTypeError, ParameterAdjustedWarning, ParameterError


@contextlib.contextmanager
def sklearn_errors():
    """Re-raise scikit-learn's validation errors as :class:`InputDataError` / :class:`InputTypeError`.

    The message is scikit-learn's, unchanged; the original exception is chained (``__cause__``).
    """
    try:
        yield
    except EigenflowError:
        raise
    except (TypeError, ValueError) as exc:
        from sklearn.exceptions import NotFittedError

        if isinstance(exc, NotFittedError):
            raise
        raise (InputTypeError if isinstance(exc, TypeError) else InputDataError)(str(exc)) from exc


def validate_X(estimator, X, *, reset: bool = True, min_samples: int = 1, dtype=np.float64, **check_params):
    """``sklearn.utils.validation.validate_data(estimator, X)``: a finite, dense, 2-D ``dtype`` array.

    ``reset=True`` (fit) sets ``n_features_in_`` (and ``feature_names_in_``); ``reset=False`` (transform,
    predict) checks them. ``min_samples`` is ``ensure_min_samples``. Complex, object, empty, 1-D, sparse and
    NaN/inf input are refused with scikit-learn's messages (as :class:`InputDataError` / :class:`InputTypeError`).
    """
    from sklearn.utils.validation import validate_data  # here: the parameter checks stay free of scikit-learn

    with sklearn_errors():
        return validate_data(estimator, X, reset=reset, dtype=dtype, ensure_min_samples=min_samples,
                             **check_params)


def check_fitted_X(estimator, X, attributes=None):
    """``check_is_fitted`` (raising scikit-learn's ``NotFittedError``) then :func:`validate_X` with ``reset=False``."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator, attributes)
    return validate_X(estimator, X, reset=False)


def check_labels(y, n_samples: int, *, estimator: str = "this estimator", semi_supervised: bool = False,
                 min_classes: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate class labels ``y`` for ``n_samples`` rows; return ``(y (n,), classes (c,), codes (n,))``.

    scikit-learn's rules: ``y`` is required, 1-D (a column vector is raveled with a
    ``DataConversionWarning``), one label per row, and a classification target (``"Unknown label type"``
    for continuous values, NaN refused). Labels may be of any sortable kind (ints, strings, ...).
    ``semi_supervised=True``: numeric label -1 marks an unlabeled point (as scikit-learn's
    ``LabelSpreading``). ``classes`` are the sorted labels of the labeled points; ``codes`` their index in
    ``classes``, -1 for unlabeled points. Fewer than ``min_classes`` classes raise :class:`InputDataError`.
    """
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import column_or_1d

    if y is None:
        raise InputDataError(f"{estimator} requires y to be passed, but the target y is None")
    with sklearn_errors():
        y = column_or_1d(y, warn=True)
        if y.shape[0] != n_samples:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n_samples}, {y.shape[0]}]"
            )
        check_classification_targets(y)
    numeric = y.dtype.kind in "iuf"
    unlabeled = (y == -1) if (semi_supervised and numeric) else np.zeros(y.shape[0], bool)
    classes = np.unique(y[~unlabeled])
    codes = np.full(y.shape[0], -1, dtype=np.int64)
    codes[~unlabeled] = np.searchsorted(classes, y[~unlabeled])
    if classes.size < min_classes:
        raise InputDataError(
            f"y must contain at least {min_classes} classes{' among the labeled points' if semi_supervised else ''}; "
            f"got {classes.size}"
        )
    return y, classes, codes


def clip_int(name: str, value: Any, high: int, *, low: int = 1, bound: str = "n_samples - 1") -> int:
    """An integer parameter bounded by the data size: checked as ``check_int(name, value, low=low)``, then
    clipped to ``high`` with a :class:`ParameterAdjustedWarning` naming the parameter, the value given and the
    value used. ``bound`` describes ``high`` in the message (e.g. ``"n_samples - 1"``). Raises
    :class:`ParameterError` when even ``high`` is below ``low`` (too few samples for the method).
    """
    if high < low:
        check_int(name, value, low=low)
        raise ParameterError(f"{name} must be an integer in [{low}, {bound}] but {bound} = {high} here: too few samples")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > high:
        warnings.warn(
            ParameterAdjustedWarning(f"{name}={value} is larger than {bound} = {high}; using {name}={high}"),
            stacklevel=3,
        )
        return high
    return check_int(name, value, low=low, high=high)


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
    """scikit-learn's ``check_array`` for the functional API (no estimator): a dense, finite, 2-D ``dtype``
    array (a copy only when needed), at least ``min_rows`` rows and 1 column. ``dtype`` may be a tuple of
    accepted dtypes: an array of one of them is kept as it is, anything else is converted to the first.

    Raises :class:`InputDataError` / :class:`InputTypeError` with scikit-learn's message (``input_name=name``),
    prefixed with ``name`` and the shape received when it does not name them (a 1-D or empty input); for NaN / inf
    the message adds the index of the first bad row.
    """
    from sklearn.utils.validation import check_array

    try:
        with sklearn_errors():
            return check_array(X, dtype=list(dtype) if isinstance(dtype, tuple) else dtype, ensure_min_samples=min_rows, input_name=name)
    except InputDataError as exc:
        if name not in str(exc):
            try:
                shape = f"shape {np.shape(X)}"
            except ValueError:
                shape = "a ragged sequence"
            raise InputDataError(f"{name} must be a 2-D array with at least {min_rows} row(s); got {shape}: {exc}"
                                 ) from exc
        if "NaN" not in str(exc) and "infinity" not in str(exc):
            raise
        arr = np.asarray(X, dtype=dtype[0] if isinstance(dtype, tuple) else dtype)
        first = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise InputDataError(f"{exc} (first bad row index is {first})") from exc.__cause__


def check_workers(workers: list[str]) -> list[str]:
    """``workers``, the addresses of a ``distributed.Client``'s workers; ParameterError when there are none."""
    if not workers:
        raise ParameterError("the distributed.Client has no workers")
    return workers


def _range(low, high, low_inclusive: bool = True, high_inclusive: bool = True) -> str:
    lo = "(-inf" if low is None else ("[" if low_inclusive else "(") + f"{low}"
    hi = "inf)" if high is None or high == float("inf") else f"{high}" + ("]" if high_inclusive else ")")
    return f"{lo}, {hi}"


def check_state_kind(attrs: dict, kind: str, version: int, what: str = "model state") -> None:
    """Refuse a stored state (``to_state`` attrs) of another kind or version, naming both."""
    if attrs.get("kind") != kind or attrs.get("version") != version:
        raise InputDataError(
            f"{what} must have kind={kind!r} version={version}; "
            f"got kind={attrs.get('kind')!r} version={attrs.get('version')!r}"
        )
