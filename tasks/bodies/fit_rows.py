"""The fit set of a run: which rows of X a model is fitted on (Prefect-free: also used on Dask workers).

The single-process stages hold it as the sorted row array (:func:`fit_rows_for`); the sharded stages as the rows
left out of it (:class:`FitRows`: nothing without a hold-out or copies), with the fit rows of X as a Dask array cut
on the workers (:func:`fit_X`) and ``outputs/<run>/in_fit`` written and read there (:func:`write_in_fit`,
:func:`read_fit_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from eigenflow.storage.store import Store

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
    return FitRows(n, held_out_rows(n, holdout, random_state)).to_array()


def held_out_rows(n: int, holdout: float, random_state: int | None) -> np.ndarray:
    """Sorted rows (int64) of the hold-out draw of a run: ``round(holdout * n)`` of the ``n`` rows, the True
    entries of :func:`spectral.datasets.holdout_mask` drawn from the run seed's hold-out stream."""
    from eigenflow.spectral.datasets import holdout_mask

    if holdout == 0:
        return np.zeros(0, dtype=np.int64)
    seq = np.random.SeedSequence(random_state).spawn(HOLDOUT_STREAM + 1)[HOLDOUT_STREAM]
    return np.flatnonzero(holdout_mask(n, holdout, random_state=seq)).astype(np.int64)


@dataclass(frozen=True)
class FitRows:
    """The fit rows of a store's X (``n`` rows) given by the rows left out of the fit, ``left_out`` (sorted
    distinct int64: the hold-out draw and exact copies): what the sharded stages pass around instead of the
    ``(n_fit,)`` row array (8 bytes per row, 0.8 GB at 1e8; ``left_out`` is empty without a hold-out).

    Fit position ``p`` (the ``p``-th fit row in row order) is row ``p + #{i : left_out[i] - i <= p}``.
    """

    n: int
    left_out: np.ndarray

    @classmethod
    def from_rows(cls, n: int, rows: np.ndarray) -> FitRows:
        """The fit rows ``rows`` (sorted distinct) of ``n`` rows."""
        left = np.ones(n, dtype=bool)
        left[rows] = False
        return cls(n, np.flatnonzero(left).astype(np.int64))

    @staticmethod
    def _inside(rows: np.ndarray, n: int) -> bool:
        return rows.size == 0 or (int(rows.min()) >= 0 and int(rows.max()) < n)

    @property
    def size(self) -> int:
        """Number of fit rows."""
        return self.n - int(self.left_out.size)

    @property
    def complete(self) -> bool:
        """Whether every row of X is a fit row."""
        return self.left_out.size == 0

    def without(self, positions: np.ndarray) -> FitRows:
        """These fit rows minus those at the fit ``positions`` (e.g. exact copies of an earlier fit row)."""
        if not positions.size:
            return self
        return FitRows(self.n, np.union1d(self.left_out, self.rows_at(positions)).astype(np.int64))

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """Rows of X (int64, the shape of ``positions``) at fit ``positions``."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.complete:
            return positions
        gaps = self.left_out - np.arange(self.left_out.size, dtype=np.int64)
        return positions + np.searchsorted(gaps, positions, side="right")

    def positions_of(self, rows: np.ndarray, source: str = "graph/knn") -> np.ndarray:
        """Fit positions (int64, the shape of ``rows``) of ``rows``, which must all be fit rows (else
        :class:`storage.errors.StoreFormatError` naming ``source``)."""
        from eigenflow.storage.errors import StoreFormatError

        rows = np.asarray(rows, dtype=np.int64)
        before = np.searchsorted(self.left_out, rows)
        hit = np.minimum(before, max(self.left_out.size - 1, 0))
        if not self._inside(rows, self.n) or (self.left_out.size and np.any(self.left_out[hit] == rows)):
            raise StoreFormatError(f"{source} lists neighbours of fit rows that are not fit rows; rerun the knn stage")
        return rows - before

    def in_chunk(self, start: int, stop: int) -> np.ndarray:
        """``(stop - start,)`` bool: which rows ``start:stop`` are fit rows."""
        mask = np.ones(stop - start, dtype=bool)
        lo, hi = np.searchsorted(self.left_out, [start, stop])
        mask[self.left_out[lo:hi] - start] = False
        return mask

    def to_array(self) -> np.ndarray:
        """The sorted fit rows ``(n_fit,)`` int64 (for a process that holds per-row arrays anyway)."""
        return np.flatnonzero(self.in_chunk(0, self.n)).astype(np.int64)


def fit_positions(fit_rows: np.ndarray, rows: np.ndarray, *, n_rows: int | None = None, source: str = "graph/knn"
                  ) -> np.ndarray:
    """Positions in the sorted ``fit_rows`` (n_fit,) of ``rows`` (any shape, rows of X that must all be fit rows),
    int64, same shape.

    With ``n_rows`` (the number of rows of X) a position table of that length is indexed (fast; what one
    process holding the whole graph uses); without it each row is binary-searched among the rows left out
    (:meth:`FitRows.positions_of`, what the sharded stages use). Raises
    :class:`storage.errors.StoreFormatError` naming ``source`` when a row is not a fit row.
    """
    from eigenflow.storage.errors import StoreFormatError

    if n_rows is None:
        n = int(fit_rows[-1]) + 1 if fit_rows.size else 0
        return FitRows.from_rows(n, fit_rows).positions_of(rows, source)
    inside = FitRows._inside(rows, n_rows)
    table = np.full(n_rows, -1, dtype=np.int64)
    table[fit_rows] = np.arange(fit_rows.size)
    positions = table[rows] if inside else rows
    if not (inside and bool(positions.size == 0 or positions.min() >= 0)):
        raise StoreFormatError(f"{source} lists neighbours of fit rows that are not fit rows; rerun the knn stage")
    return positions


def fit_X(store: Store, fit: FitRows) -> Any:
    """The fit rows ``fit`` of the store's X as a Dask array, one chunk per row chunk of X, read and cut on the
    workers (each chunk's task carries only its own left-out rows): the same array for the kNN stage and the
    eigensolve stage, so that both compute the same row partition."""
    from eigenflow.storage.arrays import X_as_dask

    X = X_as_dask(store)
    if fit.complete:
        return X
    import dask.array as da

    pieces, start = [], 0
    for j, m in enumerate(X.chunks[0]):
        lo, hi = np.searchsorted(fit.left_out, [start, start + m])
        dropped = fit.left_out[lo:hi] - start
        pieces.append(X.blocks[j].map_blocks(_without_rows, dropped, dtype=X.dtype,
                                             chunks=((m - dropped.size,), X.chunks[1])))
        start += m
    return da.concatenate(pieces)


def _without_rows(block: np.ndarray, dropped: np.ndarray) -> np.ndarray:
    """A row chunk of X without its rows at ``dropped`` (positions in the chunk)."""
    return np.delete(block, dropped, axis=0)


def write_in_fit(store: Store, run: str, fit: FitRows) -> int:
    """Task: write ``outputs/<run>/in_fit`` (n,) bool, True on the fit rows ``fit``, chunk by chunk (on a worker:
    the flow process holds no (n,) array). Returns the number of fit rows."""
    from eigenflow.storage.arrays import row_chunks
    from eigenflow.storage.embedding_io import create_output, write_output_block

    chunks = row_chunks(store)
    create_output(store, run, IN_FIT, None, dtype="bool", fill_value=False, overwrite=True)
    for start, stop in chunks:
        write_output_block(store, run, IN_FIT, start, fit.in_chunk(start, stop))
    return fit.size


def read_fit_rows(store: Store, run: str) -> FitRows:
    """Task: the fit rows of ``run`` from ``outputs/<run>/in_fit``, read chunk by chunk (on a worker)."""
    from eigenflow.storage.arrays import row_chunks, x_shape
    from eigenflow.storage.embedding_io import read_output

    left_out = [start + np.flatnonzero(~read_output(store, run, IN_FIT, start, stop))
                for start, stop in row_chunks(store)]
    return FitRows(x_shape(store)[0], np.concatenate(left_out).astype(np.int64))
