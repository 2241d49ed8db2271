"""The write-back of a method's per-point outputs, on Dask workers (kept free of Prefect imports).

A worker imports the module of every function it runs; importing Prefect costs seconds of CPU per worker
process, so what runs on workers lives in Prefect-free modules (numpy, storage, and spectral only when a
model needs it). Method authors: put your per-chunk transform in a module that does not import Prefect either.

The write-back of a run is three kinds of Dask task (:func:`tasks.points.write_point_outputs` submits them):

1. :func:`prepare_points` (one task): restore the model, attach its kNN index if some rows are mapped
   out-of-sample (not for a sharded run's held-out rows: their candidate fit points are in the store,
   :mod:`tasks.bodies.sharded_eigenmaps`); its result (:class:`PreparedPoints`) stays on the cluster and is sent to the
   workers that need it (and computed again by the scheduler if the worker holding it dies);
2. :func:`start_point_outputs` (one task): create the output arrays (and the fit masks of an ``embed`` run);
3. :func:`write_points_chunk` (one task per row chunk): write every output of that chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from eigenflow.storage.store import Store


@dataclass
class PreparedPoints:
    """A restored model ready to produce the per-point outputs of a store's rows.

    ``rows`` (f,) sorted: the rows of the store that have fitted results ``fitted`` (``{"embedding": (f, k),
    ...}``), or an empty array and None when every row is mapped by ``model`` (``extend``, or a model without
    fitted results). ``fit_rows``: the rows of the model's store it was fitted on. ``stored_candidates``: the
    other rows are mapped from their candidate fit points stored by the run's kNN stage (a sharded run,
    :func:`tasks.bodies.sharded_eigenmaps.read_candidates`), not by ``model.transform`` (the model has no index).
    """

    method: str
    model: Any
    rows: np.ndarray
    fitted: dict[str, np.ndarray] | None
    fit_rows: np.ndarray
    stored_candidates: bool = False
    alignment: tuple[float, np.ndarray] | None = None

    def aligned(self, embedding: np.ndarray) -> np.ndarray:
        """The model's coordinates ``embedding`` (m, k) in the aligned frame of an aligned refit (``s * Y @ R``:
        :func:`storage.models.model_alignment`), else as they are."""
        if self.alignment is None:
            return embedding
        scale, rotation = self.alignment
        return (scale * (np.asarray(embedding, dtype=np.float64) @ rotation)).astype(embedding.dtype, copy=False)


def prepare_points(store: Store, run: str, *, index: Any = None, fitted_rows: bool,
                   stored_candidates: bool = False) -> PreparedPoints:
    """Restore the model of ``run`` of ``store`` for the write-back.

    ``fitted_rows`` (``embed``): the fit rows get the model's fitted (transductive) results when it has them,
    and the index is attached only if some rows are mapped; otherwise (``extend``) every row is mapped.
    ``index``: the run's :class:`tasks.bodies.laplacian_eigenmaps.FitIndex` left on the cluster, or None (rebuilt). A
    sharded run's held-out rows are mapped from their stored candidates instead (no index is built), and so are
    all rows of an ``extend`` with ``stored_candidates`` (the extend run's own candidate arrays,
    :mod:`tasks.bodies.sharded_extend`).
    """
    from eigenflow.storage.arrays import x_shape
    from eigenflow.storage.errors import StoreFormatError
    from eigenflow.tasks.bodies.stored_model import attach_index, load_fitted
    from eigenflow.tasks.bodies.sharded_eigenmaps import has_candidates

    entry, model, rows = load_fitted(store, run, with_index=False)
    fitted = fitted_results(entry, model) if fitted_rows else None
    stored = stored_candidates or (fitted is not None and has_candidates(store, run))
    if (fitted is None or rows.size < x_shape(store)[0]) and not stored:  # some rows are mapped out-of-sample
        attach_index(model, store, rows, index)
        if fitted is None and not any(hasattr(model, name) for name in ("transform", "kernel_features")):
            raise StoreFormatError(f"method {entry.name!r} with these parameters has no out-of-sample map")
    with_fitted = rows if fitted is not None else np.zeros(0, dtype=np.int64)
    from eigenflow.storage.models import model_alignment, read_model_attrs

    return PreparedPoints(entry.name, model, with_fitted, fitted, rows, stored,
                          model_alignment(read_model_attrs(store, run)))


def fitted_results(entry: Any, model: Any) -> dict[str, np.ndarray] | None:
    """The fitted (transductive) results of a restored model's fit rows (``{"embedding": (f, k), ...}``), or None
    when the model keeps none (every row is then mapped out-of-sample)."""
    from eigenflow.tasks.registry import EMBEDDING, fitted_outputs

    if hasattr(model, "embedding") and not hasattr(model, "embedding_"):  # LaplacianEigenmapsModel
        return {EMBEDDING: np.asarray(model.embedding, dtype=np.float64)}
    return fitted_outputs(entry, model)


def start_point_outputs(store: Store, run: str, prepared: PreparedPoints, attrs: dict, *,
                        holdout_draw: tuple[float, int | None] | None = None) -> dict[str, Any]:
    """Create the per-point arrays of ``run`` (shaped from one probe row of each output); with ``holdout_draw``
    ``(holdout, random_state)`` (an ``embed`` run) also write ``outputs/<run>/in_fit`` and ``outputs/<run>/held_out``
    (n,) bool, the draw made here (:func:`tasks.bodies.fit_rows.held_out_rows`, on the worker). Returns the method and
    its outputs."""
    from eigenflow.storage import layout
    from eigenflow.storage.arrays import read_X, x_shape
    from eigenflow.storage.embedding_io import create_embedding, create_output, write_point_array
    from eigenflow.tasks.bodies.fit_rows import HELD_OUT, IN_FIT, held_out_rows
    from eigenflow.tasks.registry import EMBEDDING, LABELS, SCORES, get_entry, point_outputs

    entry = get_entry(prepared.method)
    attrs = {"method": entry.name, **attrs}
    fitted = prepared.fitted
    if fitted is not None and all(name in fitted for name in entry.outputs):
        probe = {name: values[:1] for name, values in fitted.items()}
    elif prepared.stored_candidates:  # an extend from stored candidates: the model has no index
        from eigenflow.tasks.bodies.sharded_eigenmaps import read_candidates

        probe = {EMBEDDING: prepared.model.transform_candidates(*read_candidates(store, run, 0, 1))}
    else:
        probe = point_outputs(entry, prepared.model, read_X(store, 0, 1))
    for name, values in probe.items():
        if name == EMBEDDING:
            create_embedding(store, run, values.shape[1], overwrite=True, attrs=attrs)
        elif name == SCORES:
            create_output(store, run, SCORES, values.shape[1], dtype="float32", attrs=attrs, overwrite=True)
        elif name == LABELS:  # a classifier's codes of the store's categories, or a clusterer's cluster ids
            kind = {layout.ATTR_LABELS_ARE: "classes" if SCORES in entry.outputs else "clusters"}
            create_output(store, run, LABELS, None, dtype="int64", attrs={**attrs, **kind}, overwrite=True)
    if holdout_draw is not None:
        n = x_shape(store)[0]
        for name, members in ((IN_FIT, prepared.fit_rows), (HELD_OUT, held_out_rows(n, *holdout_draw))):
            mask = np.zeros(n, dtype=bool)
            mask[members] = True
            write_point_array(store, layout.output_path(run, name), mask, overwrite=True)
    return {"method": entry.name, "outputs": list(entry.outputs)}


def write_points_chunk(store: Store, run: str, prepared: PreparedPoints, start: int, stop: int, first: int = 0
                       ) -> dict:
    """Write rows ``start:stop`` of every output of ``run``: rows with fitted results as given, the others mapped
    by the model (:func:`tasks.registry.point_outputs` on the chunk's rows of X, or, for a sharded run's held-out
    rows, the model's map of their stored candidates: :meth:`LaplacianEigenmapsModel.transform_candidates`).
    Rows before ``first`` (an update's first chunk: rows other runs placed) are not the run's: they are written
    as 0 (-1 for integer outputs) and not mapped; no reader takes them from this run (:mod:`storage.results_table`).

    Returns ``n_fitted`` and ``n_extended``. Each output chunk's digest is recorded once it is written
    (:func:`storage.checksums.record_chunk`): a resumed run rewrites only the chunks without an intact record.
    """
    from eigenflow.storage.arrays import read_X
    from eigenflow.storage.checksums import record_chunk
    from eigenflow.storage.embedding_io import write_embedding_block, write_output_block
    from eigenflow.tasks.registry import EMBEDDING, get_entry, point_outputs

    entry = get_entry(prepared.method)
    n_rows = stop - start
    lo, hi = np.searchsorted(prepared.rows, [start, stop])
    in_fit = np.zeros(n_rows, dtype=bool)
    in_fit[prepared.rows[lo:hi] - start] = True
    own = np.arange(start, stop) >= first
    to_map = own & ~in_fit
    fitted = {k: v[lo:hi] for k, v in prepared.fitted.items()} if hi > lo else {}
    if not to_map.any():
        mapped = {}
    elif prepared.stored_candidates:
        from eigenflow.tasks.bodies.sharded_eigenmaps import read_candidates

        indices, distances = read_candidates(store, run, start, stop)
        mapped = {EMBEDDING: prepared.model.transform_candidates(indices[to_map], distances[to_map])}
    else:
        mapped = point_outputs(entry, prepared.model, read_X(store, start, stop)[to_map])
    for name in entry.outputs:
        parts = [v for v in (fitted.get(name), mapped.get(name)) if v is not None]
        dtype = parts[0].dtype
        block = np.full((n_rows, *parts[0].shape[1:]), 0 if dtype.kind == "f" else -1, dtype=dtype)
        if in_fit.any():
            block[in_fit] = fitted[name]
        if to_map.any():
            block[to_map] = mapped[name]
        if name == EMBEDDING:
            write_embedding_block(store, run, start, prepared.aligned(block))
        else:
            write_output_block(store, run, name, start, block.astype(np.float32) if block.dtype.kind == "f"
                               else block)
        record_chunk(store, output_array(run, name), start)  # this chunk is done (resume skips it)
    return {"n_fitted": int(in_fit.sum()), "n_extended": int(to_map.sum())}


def output_array(run: str, name: str) -> str:
    """Store path of the per-point output ``name`` of ``run`` (``embeddings/<run>`` or ``outputs/<run>/<name>``)."""
    from eigenflow.storage import layout
    from eigenflow.tasks.registry import EMBEDDING

    return layout.embedding_path(run) if name == EMBEDDING else layout.output_path(run, name)
