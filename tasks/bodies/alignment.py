"""A refit's coordinates aligned to the store's previous results, on a Dask worker (Prefect-free).

A refit on rows that mostly did not change gives coordinates that differ from the previous model's by a sign or a
rotation within a group of close eigenvalues and by a scale (unit-norm eigenvectors shrink as 1/sqrt(n)). The
alignment (:func:`spectral.embedding.alignment.align_embedding`, within the groups of close eigenvalues when the
model has eigenvalues) is fitted on the rows both hold that the previous fit placed: the refit's fit rows in the
``embed`` segments of the store's table of results (:mod:`storage.results_table`), not the rows later updates mapped
(the mapped coordinates of a drifted batch are the ones the model does not describe, and would pull the alignment
away from the rows whose data did not change). It is kept in the refit's model (:func:`storage.models.record_alignment`)
and applied to every embedding the model writes (:meth:`tasks.bodies.point_writeback.PreparedPoints.aligned`): its
fitted rows, its held-out rows and the rows later updates map.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def align_to_previous(store: Any, run: str) -> dict[str, Any]:
    """Fit and record the alignment of ``run``'s model to the store's current table of results; returns the figures
    (``residual`` and ``unaligned_residual``: median row displacement over the spread, the ``scale``, the eigenvalue
    ``groups``, ``n_shared`` rows and the ``previous`` run)."""
    from eigenflow.spectral.embedding.alignment import align_embedding
    from eigenflow.storage.errors import StoreFormatError
    from eigenflow.storage.models import record_alignment
    from eigenflow.storage.results_table import read_table, table_segments
    from eigenflow.tasks.bodies.point_writeback import fitted_results
    from eigenflow.tasks.bodies.stored_model import load_fitted
    from eigenflow.tasks.registry import EMBEDDING

    entry, model, rows = load_fitted(store, run, with_index=False)  # the fitted rows only: no kNN index needed
    fitted = fitted_results(entry, model)
    if fitted is None or EMBEDDING not in fitted:
        return {"aligned": False, "reason": f"method {entry.name!r} keeps no fitted embedding to align"}
    try:
        segments = table_segments(store)
    except StoreFormatError as exc:  # a first fit, or a store whose last rows are not placed yet
        return {"aligned": False, "reason": str(exc)}
    placed_by_fit = np.zeros(segments[-1].stop, dtype=bool)
    for segment in segments:
        if segment.flow == "embed":
            placed_by_fit[segment.start:segment.stop] = True
    positions = np.flatnonzero(rows < segments[-1].stop)  # rows is sorted: the refit's rows the table holds
    positions = positions[placed_by_fit[rows[positions]]]
    shared = rows[positions]
    previous = read_table(store)[shared]
    Y = np.asarray(fitted[EMBEDDING], dtype=np.float64)[positions]
    if previous.shape[1] != Y.shape[1]:
        return {"aligned": False, "reason": f"the previous results have {previous.shape[1]} components, the refit "
                                            f"{Y.shape[1]}"}
    eigenvalues = _eigenvalues(model)
    aligned = align_embedding(Y, previous.astype(np.float64), eigenvalues=eigenvalues)
    record_alignment(store, run, aligned.scale, aligned.rotation)
    return {"aligned": True, "previous": segments[0].run, "n_shared": int(shared.size), "scale": aligned.scale,
            "residual": aligned.residual, "unaligned_residual": aligned.unaligned_residual,
            "groups": [list(g) for g in aligned.groups]}


def _eigenvalues(model: Any) -> np.ndarray | None:
    """The model's eigenvalues (k,), one per embedding column, when it has one set (a connected Laplacian
    eigenmap, an estimator's ``eigenvalues_``); None otherwise (one rotation over all columns)."""
    values = getattr(model, "component_eigenvalues", None)
    if values is not None:
        values = np.asarray(values)
        return values[0] if values.ndim == 2 and values.shape[0] == 1 else None
    values = getattr(model, "eigenvalues_", None)
    return None if values is None else np.asarray(values, dtype=np.float64).ravel()
