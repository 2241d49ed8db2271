"""Checks of an ``embed`` run's parameters against the source's shape and labels, made before the ingest.

The number of rows of a source is known from its header (``.npy`` / ``.npz`` / ``.parquet`` / zarr: see
:class:`storage.source.Source`; a CSV is only known once read, and is left to the fit), the labels from a
``.npy`` file read as a memory map or the labels of a store. The bounds are those the fit stages would
enforce later, behind a store already written: every refusal names the parameter, the allowed range and the
value received (``"n_neighbors must be in [1, 19] for 20 rows to fit; got 50"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.spectral.errors import ParameterError

#: The fit strategy whose kNN graph and eigensolve stages need ``n_neighbors <= n_fit - 1`` and
#: ``n_components <= n_fit - 2`` (the estimators of the other strategies clip them with a warning).
GRAPH_STRATEGY = "laplacian_eigenmaps"
#: Fewest rows any method fits (scikit-learn's minimum of two samples).
MIN_FIT_ROWS = 2


def source_rows(source: str) -> int | None:
    """Number of rows of ``source`` read from its header only (None for a CSV, whose rows are known only once
    read); a source that does not exist or cannot be opened is refused here, before any start-up
    (:class:`storage.errors.IngestError` naming it)."""
    from eigenflow.storage.readers import open_source

    return open_source(source).n_rows


def fit_rows(n: int, holdout: float) -> int:
    """Rows of a source of ``n`` rows left to the fit after the hold-out (as the flow draws it)."""
    return n - round(holdout * n)


def check_rows(method: str, fit: str, params: dict[str, Any], n: int, holdout: float) -> None:
    """Refuse parameters that the fit of ``n - round(holdout * n)`` rows cannot honour (see the module docstring).

    Raises
    ------
    ParameterError
        Too few rows to fit, or ``n_neighbors`` / ``n_components`` outside the range the rows allow.
    """
    n_fit = fit_rows(n, holdout)
    where = f"{n_fit} rows to fit (a source of {n} rows, holdout={holdout})" if n_fit != n else \
        f"a source of {n} rows"
    if n_fit < MIN_FIT_ROWS:
        after = f" ({where})" if n_fit != n else ""
        raise ParameterError(f"method {method!r} needs at least {MIN_FIT_ROWS} rows to fit; got {n_fit}{after}")
    if fit != GRAPH_STRATEGY:
        return
    _check_bounded("n_neighbors", params.get("n_neighbors"), n_fit - 1, where)
    _check_bounded("n_components", params.get("n_components"), n_fit - 2, where)


def _check_bounded(name: str, value: Any, high: int, where: str) -> None:
    """``value`` (an integer, or None: not set) must be in ``[1, high]``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and not 1 <= value <= high:
        raise ParameterError(f"{name} must be in [1, {high}] for {where}; got {value}")


def labels_of(source: str, store: Any, labels: str | None, overwrite: bool) -> tuple[np.ndarray, str] | None:
    """The run's labels and where they come from: the ``labels`` ``.npy`` file (memory-mapped), else those of
    ``source`` or of the existing ``store`` (a URL or an opened :class:`storage.store.Store`) when either is a store
    with labels; None when unknown here."""
    from eigenflow.tasks.ingest import existing_store_attrs, with_opened

    if labels is not None:
        if not str(labels).endswith(".npy"):
            return None  # the ingest refuses it, naming the file
        try:
            return np.load(labels, mmap_mode="r", allow_pickle=False), str(labels)
        except (OSError, ValueError):
            return None
    for candidate in with_opened((source,) if overwrite else (source, store)):
        try:
            if existing_store_attrs(candidate) is None:
                continue
        except Exception:  # noqa: BLE001 - not a store
            continue
        from eigenflow.storage.arrays import read_labels

        y = read_labels(candidate)
        return (None if y is None else (y, f"the labels of store {candidate}"))
    return None


def check_labeled(method: str, found: tuple[np.ndarray, str] | None) -> None:
    """A supervised method needs at least one labeled row (numeric label other than -1)."""
    if found is None:
        return
    y, origin = found
    if y.dtype.kind in "iuf" and y.size and not np.any(np.asarray(y) != -1):
        raise ParameterError(f"method {method!r} needs labeled rows; every one of the {y.size} labels in {origin} "
                             "is -1 (unlabeled)")
