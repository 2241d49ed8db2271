"""A streaming source of rows (:class:`Source`, what every reader of :mod:`storage.readers` and
:mod:`storage.anndata_io` returns) and the shape checks the readers share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from .errors import IngestError

Block = tuple[np.ndarray, "np.ndarray | None"]


@dataclass
class Source:
    """A streaming source of rows.

    Attributes
    ----------
    kind : str
        ``"npy"``, ``"npz"``, ``"csv"``, ``"parquet"``, ``"zarr"``, ``"anndata"``, ``"hdf5"`` or ``"array"``.
    description : str
        Human-readable origin (file path or array type), stored as the ``source`` root attribute.
    n_rows : int or None
        Number of rows if known before reading (``None`` for CSV).
    n_columns : int or None
        Number of columns if known before reading (``None`` for CSV).
    has_labels : bool
        Whether the blocks carry labels.
    blocks : callable
        ``blocks(rows) -> iterator of (X block, labels block or None)``, each block at most ``rows`` rows.
    spec : tuple or None
        For file-backed random-access sources (npy, zarr path), a small picklable description that
        :func:`read_rows_from_spec` re-opens in another process (parallel ingest); None otherwise.
    cells : storage.anndata_io.Cells or None
        For an AnnData source: the obs names and label categories the ingest keeps in the store.
    partitions : object or None
        For a folder or glob of partitions (:mod:`storage.partitions`): ``partitions.records()`` gives the records
        the ingest keeps in the store, once the rows were read.
    """

    kind: str
    description: str
    n_rows: int | None
    n_columns: int | None
    has_labels: bool
    blocks: Callable[[int], Iterator[Block]] = field(repr=False)
    spec: tuple | None = None
    cells: Any = None
    partitions: Any = None


def check_shape_2d(shape: tuple, what: str) -> None:
    """Raise :class:`IngestError` unless ``shape`` is ``(n, d)`` with ``d >= 1``."""
    if len(shape) != 2:
        raise IngestError(f"{what} must be a 2-D array (n_samples, n_features); got {len(shape)}-D shape {tuple(shape)}")
    if shape[1] < 1:
        raise IngestError(f"{what} must have at least 1 feature column; got shape {tuple(shape)}")


def check_label_count(n_labels: int, n_rows: int) -> None:
    """Raise :class:`IngestError` if the number of labels differs from the number of rows of X."""
    if n_labels != n_rows:
        raise IngestError(f"labels must have one entry per row of X: got {n_labels} labels for {n_rows} rows")
