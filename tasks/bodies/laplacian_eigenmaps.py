"""The at-scale fit stages of Laplacian eigenmaps (:mod:`tasks.fitting`): kNN graph, weights, eigensolve + model.

The bodies here run on a Dask worker (:func:`tasks.dask_calls.run_on_worker`; this module imports no Prefect):
each reads its inputs from the store and writes its outputs to it. Each mirrors one step of
:meth:`spectral.embedding.eigenmaps.LaplacianEigenmaps.fit` on stored arrays, with the same random sequence (one
generator from ``random_state``: the kNN build draws first, the eigensolver uses what follows), so the flow's
embedding equals the estimator's on the same data and parameters.

The kNN index of the fit set is the result of its own Dask task (:func:`build_fit_index`), kept on the
cluster for the out-of-sample queries of the held-out points, and on a cluster that outlives the run for the
``update`` and ``extend`` runs that map new rows with the model (published under :func:`model_index_name`:
:mod:`tasks.model_index`); if its worker dies, the scheduler builds it again. If it is gone (a resumed run on a
new cluster) it is rebuilt from the stored X with the stored index parameters
(:func:`tasks.bodies.stored_model.attach_index`).

The fit graph and the weight matrix also stay in their worker's memory for the next stage
(:mod:`tasks.bodies.stage_handoff`): :func:`write_knn_graph` and :func:`compute_weights` return a reference to them, and
the next stage, sent to that worker, takes them when the store holds what was written from them (else it reads
the store, e.g. in a resumed run).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from eigenflow.spectral._arrays import distinct_rows
from eigenflow.spectral._validation import check_random_state, seed_int
from eigenflow.storage import layout
from eigenflow.storage.arrays import read_X, x_shape
from eigenflow.storage.checksums import check_intact, record_checksums
from eigenflow.storage.embedding_io import read_output, write_point_array
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.graph_io import read_csr, read_csr_attrs, read_knn, read_knn_attrs, write_csr, write_knn
from eigenflow.storage.models import write_model
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies.fit_rows import FIT_ROWS, IN_FIT, fit_positions, fit_rows_for
from eigenflow.tasks.bodies.stage_handoff import TOKEN_ATTR, check_written, keep, new_token, take, take_pending

if TYPE_CHECKING:
    from eigenflow.spectral.neighbours.index import KNNIndex

# The numerical modules (numba kernels, scikit-learn, pyamg) are imported by the bodies that use them, on the
# workers: the flow process imports this module for its checks and names, not for its computations.

METHOD = "laplacian_eigenmaps"
#: The graph arrays, checksummed when written and checked before they are read (:mod:`storage.checksums`).
KNN_ARRAYS = (layout.KNN_INDICES, layout.KNN_DISTANCES)
WEIGHT_ARRAYS = tuple(f"{layout.WEIGHTS}/{part}" for part in (layout.CSR_INDPTR, layout.CSR_INDICES, layout.CSR_DATA))
#: ``attrs["state"]`` of the model written by :func:`solve_eigenmaps` (a :class:`LaplacianEigenmapsModel`).
MODEL_STATE = "laplacian_eigenmaps_model"


#: Start of the names under which models' kNN indexes are published on a Dask scheduler.
MODEL_INDEX_PREFIX = "eigenflow-model-index"


def model_index_name(store: Store, run: str, started: str) -> str:
    """Name under which the kNN index of the model of ``run`` of ``store`` is published on the Dask scheduler.

    ``started``: the run's start time (its manifest's), so that a later run of the same name, or a store ingested
    again under the same path, never finds the index of another model. The store's URL is hashed (names stay short);
    every name of one store starts with :func:`store_index_prefix`.
    """
    return f"{store_index_prefix(store)}{run}@{started}"


def store_index_prefix(store: Store) -> str:
    """The start of the published index names of ``store``'s models (:func:`model_index_name`)."""
    return f"{MODEL_INDEX_PREFIX}-{hashlib.blake2b(str(store).encode(), digest_size=8).hexdigest()}-"


# ---- kNN graph ----------------------------------------------------------------------------------------------
@dataclass
class FitIndex:
    """The kNN index of the fit set (a Dask task's result, kept on the cluster): ``index`` over X[rows]."""

    index: KNNIndex
    rows: np.ndarray  # (n_fit,) int64 sorted rows of X
    n_duplicates: int
    build_seconds: float

    def __sizeof__(self) -> int:
        """The index's and the rows' bytes (Dask then runs the tasks that use it on the worker that holds it)."""
        return object.__sizeof__(self) + self.index.__sizeof__() + int(self.rows.nbytes)


def build_fit_index(store: Store, *, n_neighbors: int, knn_method: str, metric: str, holdout: float,
                    random_state: int | None, prepare: bool = False) -> FitIndex:
    """Build the kNN index of the fit set of the store's X (exact copies of a fit point left out:
    :func:`spectral._arrays.distinct_rows`; they are mapped like held-out points). ``prepare``: it will be queried
    (held-out rows, or kept for later runs): its query structures are built here, before Dask holds it
    (:meth:`KNNIndex.prepare`), so that what the workers send each other is the compact queried form."""
    from eigenflow.spectral.neighbours.index import KNNIndex

    n, _ = x_shape(store)
    X = read_X(store)  # (n, d)
    fit_set = fit_rows_for(n, holdout, random_state)
    rows, n_duplicates = distinct_rows(_take_rows(X, fit_set), None, fit_set)
    if rows.size <= n_neighbors:
        from eigenflow.spectral.errors import InputDataError

        raise InputDataError(
            f"the fit set has {rows.size} distinct point(s): {n_duplicates} of its {fit_set.size} rows are exact "
            f"copies of other rows; a kNN graph with n_neighbors={n_neighbors} needs at least {n_neighbors + 1} "
            "distinct points")
    t0 = time.perf_counter()
    index = KNNIndex.build(_take_rows(X, rows), n_neighbors, method=knn_method, metric=metric,
                           random_state=check_random_state(random_state))
    if prepare:
        index.prepare()
    return FitIndex(index, rows, n_duplicates, time.perf_counter() - t0)


def _take_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``X[rows]`` for sorted distinct ``rows``; X itself when they are all its rows (no 1e6 x d copy)."""
    return X if rows.size == X.shape[0] else X[rows]


def write_knn_graph(store: Store, run: str, built: FitIndex, *, n_neighbors: int) -> dict[str, Any]:
    """Write ``graph/knn`` for every row of X from the fit index ``built``, and ``outputs/<run>/in_fit``.

    Rows of fit points hold their neighbours within the fit set; rows of other points (held out, or exact
    copies of a fit point: their first neighbour is their original, at distance 0) their nearest fit points.
    Returns the index parameters and sizes, and under ``"handoff"`` the reference of the fit graph kept in this
    worker's memory for the weights stage (None if nothing could be kept; :func:`compute_weights`). Kept on a
    worker, the graph is written in a thread of this worker (``"write": "background"``) while the weights stage
    computes W from memory: W's own write waits for it, and the eigensolve joins that (a failure of either is
    raised there). ``in_fit`` is written before this returns.
    """
    index, rows = built.index, built.rows
    n, _ = x_shape(store)
    idx_fit, dist_fit = index.neighbor_graph(copy=False)  # positions within the fit set (the index's own arrays)
    held = np.setdiff1d(np.arange(n), rows, assume_unique=True)
    if not held.size:  # every row is a fit point: positions are rows (no (n, k) scatter)
        indices, distances = idx_fit, dist_fit
    else:
        indices = np.empty((n, n_neighbors), dtype=np.int64)
        distances = np.empty((n, n_neighbors), dtype=np.float32)
        indices[rows], distances[rows] = rows[idx_fit], dist_fit
        idx_h, dist_h = index.query(read_X(store)[held], n_neighbors)
        indices[held], distances[held] = rows[idx_h], dist_h
    token = new_token()
    attrs = {"run": run, "metric": index.metric, "n_fit": int(rows.size), "index_params": index.params,
             TOKEN_ATTR: token}
    in_fit = np.zeros(n, dtype=bool)
    in_fit[rows] = True
    write_point_array(store, layout.output_path(run, IN_FIT), in_fit, overwrite=True)
    t0 = time.perf_counter()
    handoff = keep(run, token, {"rows": rows, "indices": idx_fit, "distances": dist_fit},
                   write=lambda: _write_graph(store, indices, distances, attrs))
    return {"k": n_neighbors, "method": index.method, "n_fit": int(rows.size), "n_heldout": int(held.size),
            "n_duplicates": built.n_duplicates, "build_seconds": built.build_seconds,
            **({"write": "written", "write_seconds": time.perf_counter() - t0} if handoff is None else
               {"write": "background"}), "handoff": handoff}


def _write_graph(store: Store, indices: np.ndarray, distances: np.ndarray, attrs: dict) -> None:
    """``graph/knn`` (with ``attrs``) and its checksums."""
    write_knn(store, indices, distances, attrs=attrs)
    record_checksums(store, KNN_ARRAYS)


def graph_belongs_to(store: Store, run: str, part: str) -> bool:
    """Whether ``graph/knn`` (``part="knn"``) or ``graph/weights`` (``"weights"``) of the store were written by
    ``run`` and still match their checksums."""
    try:
        attrs = read_knn_attrs(store) if part == "knn" else read_csr_attrs(store, layout.WEIGHTS)
        check_intact(store, KNN_ARRAYS if part == "knn" else WEIGHT_ARRAYS)
    except StoreFormatError:
        return False
    return attrs.get("run") == run


def fit_graph(store: Store, run: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fit_rows (n_fit,), indices (n_fit, k) as fit positions, distances (n_fit, k))`` of the stored graph."""
    attrs = read_knn_attrs(store)
    if attrs.get("run") != run:
        raise StoreFormatError(
            f"graph/knn of {store} belongs to run {attrs.get('run')!r}, not {run!r}: another run replaced it; "
            "run the flow again with a new run name"
        )
    in_fit = read_output(store, run, IN_FIT)
    rows = np.flatnonzero(in_fit).astype(np.int64)
    check_intact(store, KNN_ARRAYS)
    indices, distances = read_knn(store)
    if rows.size == in_fit.shape[0]:  # every row is a fit point: rows are positions
        return rows, indices, distances
    return rows, fit_positions(rows, indices[rows], n_rows=in_fit.shape[0], source=f"graph/knn of {store}"), \
        distances[rows]


# ---- weights ------------------------------------------------------------------------------------------------
#: ``outputs/<run>/<WEIGHT_SCALES>`` (n, 2) float64: per fit point its weight scale and k-th neighbour distance
#: (:func:`spectral.graph.weights.fit_weight_params`; 0 on held-out rows), so the eigensolve stage needs no kNN re-read
WEIGHT_SCALES = "weight_scales"


def compute_weights(store: Store, run: str, graph: dict | None = None, *, weighting: str,
                    symmetrize: str) -> dict[str, Any]:
    """Weight matrix W (n_fit, n_fit) of the fit graph, written to ``graph/weights`` (CSR), with the resolved
    weighting parameters (CSR attrs) and the per-point scales (``outputs/<run>/weight_scales``).

    The fit graph comes from this worker's memory when ``graph`` (the kNN stage's ``"handoff"``) refers to what
    the store holds or to the graph whose write the kNN stage left running here, else from the store
    (``graph_source`` in the result says which). W and the scales stay in this worker's memory for the
    eigensolve (``"handoff"`` in the result, :func:`solve_eigenmaps`), and their write runs in a thread of this
    worker that the eigensolve joins (``"write": "background"``; outside a worker they are written before this
    returns: ``"written"``); it first waits for the graph's write, whose error it raises. If this stage fails,
    the graph's write still completes."""
    pending = take_pending(graph)  # the graph of the kNN stage on this worker, its write still running
    graph_write = None if pending is None else pending[1]
    arrays = take(graph, read_knn_attrs(store)) if pending is None else pending[0]
    source = "store" if arrays is None else "memory"
    rows, idx, dist = fit_graph(store, run) if arrays is None else (arrays["rows"], arrays["indices"],
                                                                        arrays["distances"])
    del arrays, pending
    try:
        W, per_point, attrs = _weights_of_graph(store, run, rows, idx, dist, weighting=weighting,
                                                symmetrize=symmetrize)
    except BaseException:
        if graph_write is not None:  # the kNN stage completed: its graph lands even though this stage failed
            graph_write.join(raise_error=False)
        raise

    def write() -> None:
        if graph_write is not None:
            graph_write.join()
        _write_weights(store, run, W, per_point, attrs)

    # kept on a worker, W is written in a thread while the eigensolve (same worker) runs: it joins the write
    handoff = keep(run, attrs[TOKEN_ATTR], {"W": W, "per_point": per_point, "attrs": attrs}, write=write)
    return {"n": int(W.shape[0]), "nnz": int(W.nnz), "graph_source": source,
            "write": "written" if handoff is None else "background", "handoff": handoff}


def _weights_of_graph(store: Store, run: str, rows: np.ndarray, idx: np.ndarray, dist: np.ndarray, *,
                      weighting: str, symmetrize: str) -> tuple[Any, np.ndarray, dict]:
    """``(W (n_fit, n_fit) CSR, per-point scales and radii (n, 2), attrs of graph/weights)`` of the fit graph
    ``rows`` (n_fit,), ``idx`` / ``dist`` (n_fit, k) (fit positions). The caller's graph arrays are not kept."""
    from eigenflow.spectral.graph.weights import fit_directed_knn_weights, symmetrize_weights

    A, wparams, scales, radii = fit_directed_knn_weights(idx, dist, weighting=weighting, symmetrize=symmetrize)
    W = symmetrize_weights(A, symmetrize)
    del A
    per_point = np.zeros((x_shape(store)[0], 2))
    per_point[rows, 0], per_point[rows, 1] = scales, radii
    attrs = {"run": run, "weighting": weighting, "symmetrize": symmetrize, "weight_params": wparams.to_attrs(),
             TOKEN_ATTR: new_token()}
    return W, per_point, attrs


def _write_weights(store: Store, run: str, W: Any, per_point: np.ndarray, attrs: dict) -> None:
    """``outputs/<run>/weight_scales``, ``graph/weights`` (with ``attrs``) and their checksums."""
    write_point_array(store, layout.output_path(run, WEIGHT_SCALES), per_point, overwrite=True)
    write_csr(store, layout.WEIGHTS, W, attrs=attrs)
    record_checksums(store, WEIGHT_ARRAYS)


# ---- eigensolve + model -------------------------------------------------------------------------------------
def solve_eigenmaps(store: Store, run: str, weights: dict | None = None, *, n_components: int,
                    normalization: str, eigen_solver: str, on_disconnected: str, tol: float | None,
                    random_state: int | None, weighting: str, symmetrize: str,
                    warm_start: bool = False) -> dict[str, Any]:
    """Laplacian eigenmap of ``graph/weights`` and the out-of-sample model, written to ``models/<run>``.

    ``warm_start`` (a refit): the eigensolver starts from the store's current results of the fit rows (the previous
    fit's coordinates and those of the rows mapped since: :func:`storage.results_table.read_table`); the result
    records ``warm_start`` (whether the solver used it) and ``n_iter``.

    W and the weight scales come from this worker's memory when ``weights`` (the weights stage's ``"handoff"``)
    refers to what the store holds, else from the store (checked against its checksums). When the weights stage
    left their write running on this worker, it is joined after the solve (``weights_write_seconds``; its error is
    raised here) and before the model is written; if the solve fails, the write still completes. When the store
    does not hold this run's W (the weights stage's worker died during that write, and this body runs again on
    another worker), W is computed again from the stored kNN graph with ``weighting`` / ``symmetrize`` and
    written (``weights_source="recomputed"``: the same W, the weights are deterministic); if that worker died
    before the graph's own background write ended, the stored graph is refused as damaged (its checksums) and a
    resumed run builds it again."""
    from eigenflow.spectral.embedding.eigenmaps import laplacian_eigenmaps_from_graph
    from eigenflow.spectral.embedding.out_of_sample import LaplacianEigenmapsModel
    from eigenflow.spectral.graph.weights import WeightParams

    pending = take_pending(weights)  # W of the weights stage on this worker, its write still running
    if pending is not None:
        (arrays, writing), attrs, weights_source = pending, pending[0]["attrs"], "memory"
    elif graph_belongs_to(store, run, "weights"):
        attrs = read_csr_attrs(store, layout.WEIGHTS)
        arrays, writing = take(weights, attrs), None
        weights_source = "store" if arrays is None else "memory"
    else:  # the weights stage's worker died before its write ended: W again from the stored graph, and written
        W, per_point, attrs = _weights_of_graph(store, run, *fit_graph(store, run), weighting=weighting,
                                                symmetrize=symmetrize)
        _write_weights(store, run, W, per_point, attrs)
        arrays, writing, weights_source = {"W": W, "per_point": per_point}, None, "recomputed"
        del W
    rows = np.flatnonzero(read_output(store, run, IN_FIT)).astype(np.int64)
    per_point = (read_output(store, run, WEIGHT_SCALES) if arrays is None else arrays["per_point"])[rows]
    wparams = WeightParams.from_attrs(attrs["weight_params"])
    rng = check_random_state(random_state)
    seed_int(rng)  # the draw the kNN stage made (LaplacianEigenmaps.fit order)
    initial = _previous_results(store, rows, n_components) if warm_start else None
    t0 = time.perf_counter()
    # W is passed without a name here (and no longer held by the handoff), so that the solve frees it once its
    # Laplacian is built (a write still running holds it until it ends)
    try:
        Z, values, info = laplacian_eigenmaps_from_graph(
            read_csr(store, layout.WEIGHTS) if arrays is None else arrays.pop("W"), n_components,
            normalization=normalization, eigen_solver=eigen_solver, on_disconnected=on_disconnected, tol=tol,
            random_state=rng, initial=initial)
    except BaseException:
        if writing is not None:  # the weights stage completed: its outputs land even though the solve failed
            writing.join(raise_error=False)
        raise
    solve_seconds = time.perf_counter() - t0
    if writing is not None:
        write_seconds = writing.join()
        check_written(weights, read_csr_attrs(store, layout.WEIGHTS), f"graph/weights of {store}")
    knn_attrs = read_knn_attrs(store)
    if knn_attrs.get("run") != run:
        raise StoreFormatError(f"graph/knn of {store} belongs to run {knn_attrs.get('run')!r}, not {run!r}; "
                               "run the flow again with a new run name")
    model = LaplacianEigenmapsModel(Z, info["component_eigenvalues"], info["component_labels"], info["degrees"],
                                    per_point[:, 0], per_point[:, 1], wparams, normalization,
                                    knn_attrs["index_params"], component_offsets=info["component_offsets"])
    arrays, model_attrs = model.to_state()
    write_model(store, run, {**arrays, FIT_ROWS: rows},
                {"method": METHOD, "state": MODEL_STATE, "state_attrs": model_attrs})
    return {"eigen_solver": info["eigen_solver"], "eigenvalues": [float(v) for v in values],
            "converged": bool(info["converged"]), "n_iter": int(info["n_iter"]),
            "n_components_graph": int(info["component_eigenvalues"].shape[0]), "solve_seconds": solve_seconds,
            "weights_source": weights_source, **({} if writing is None else {"weights_write_seconds": write_seconds}),
            **({} if initial is None else {"warm_start": info.get("start_vectors", "unused")})}


def _previous_results(store: Store, rows: np.ndarray, n_components: int) -> np.ndarray | None:
    """The store's current coordinates of ``rows`` (the start of a warm-started refit), None when the store has no
    complete table of results of ``n_components`` columns yet."""
    from eigenflow.storage.results_table import read_table

    try:
        previous = read_table(store)
    except StoreFormatError:
        return None
    if previous.ndim != 2 or previous.shape[0] <= int(rows.max(initial=-1)) or previous.shape[1] > n_components:
        return None
    return previous[rows].astype(np.float64)
