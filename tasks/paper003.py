"""Tasks of the GraphKPCA flow (paper 003): fit at scale on the stored kNN graph, then write every point back.

The kNN graph comes from :func:`tasks.laplacian_eigenmaps.knn_task` (``graph/knn``, NN-descent at scale,
``outputs/<run>/in_fit``). :func:`fit_graph_kpca_task` fits :class:`spectral.graph_kpca.GraphKPCA` with
``solver="nystrom"`` on the fit rows (K_y = Phi Phi^T from Nystrom features, the sparse Laplacian of the
kNN graph, constraints from stored labels / pairs, the eigen-step on the implicit operator) and stores the
model (no n x n array, no X copy; the kNN index parameters go in its attrs). :func:`embed_points_task` writes
``embeddings/<run>`` chunk by chunk on Dask: fitted rows get their eigenvector rows, held-out rows the
out-of-sample map of :meth:`GraphKPCA.transform_with_neighbors` with their stored neighbours.
:func:`extend_points_task` embeds the points of another store with a stored model: the kNN index over the
fit points (read from the model store's X) is taken from the cluster or rebuilt, and each chunk of new
points is queried and mapped by :class:`spectral.graph_kpca.extension.IndexedGraphKPCA` on Dask.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prefect import task

from spectral.graph_kpca import GraphKPCA
from spectral.graph_kpca.extension import IndexedGraphKPCA
from spectral.knn import KNNIndex
from storage.arrays import read_labels, read_X, row_chunks, x_shape
from storage.embedding_io import create_embedding
from storage.errors import StoreFormatError
from storage.graph_io import read_constraints, read_knn_attrs
from storage.models import read_model, write_model

from tasks._chunks import transform_with_index, write_embedding_chunk
from tasks.common import COMPUTE_TASK, FIT_ROWS, IO_TASK, chunk_fit_slices, map_row_chunks
from tasks.laplacian_eigenmaps import fit_graph, index_dataset_name

METHOD = "graph_kpca"
#: Model attr holding the :attr:`spectral.knn.KNNIndex.params` of the fit graph (to rebuild it for ``extend``).
KNN_INDEX_ATTR = "knn_index"


def _fit_labels_and_pairs(store_url: str, rows: np.ndarray):
    """Labels (n_fit,) or None, and must/cannot-link pairs re-indexed to fit positions (held-out pairs dropped)."""
    y = read_labels(store_url)
    y_fit = None if y is None else np.asarray(y, dtype=np.int64)[rows]
    if y_fit is not None and not np.any(y_fit >= 0):
        y_fit = None
    position = np.full(int(rows.max()) + 1 if rows.size else 0, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size)
    out = []
    for pairs in read_constraints(store_url):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        inside = np.all(pairs < position.size, axis=1)
        mapped = position[pairs[inside]]
        out.append(mapped[np.all(mapped >= 0, axis=1)] if mapped.size else None)
    return y_fit, out[0] if out[0] is not None and len(out[0]) else None, \
        out[1] if out[1] is not None and len(out[1]) else None


@task(name="graph-kpca-fit", **COMPUTE_TASK)
def fit_graph_kpca_task(store_url: str, run: str, store_token: str, *, n_components: int, kernel: str,
                        kernel_gamma: float | None, gamma: float, graph_weight: str, laplacian: str,
                        n_landmarks: int, nystrom_rank: int | None, eigen_solver: str, gamma_must: float,
                        gamma_cannot: float, random_state: int | None) -> dict[str, Any]:
    """Fit GraphKPCA (Nystrom + implicit operator) on the fit rows and write ``models/<run>``."""
    rows, idx, dist = fit_graph(store_url, run)
    X = np.asarray(read_X(store_url)[rows], dtype=np.float64)
    y_fit, must, cannot = _fit_labels_and_pairs(store_url, rows)
    est = GraphKPCA(n_components, kernel=kernel, kernel_params=None if kernel_gamma is None else {"gamma": kernel_gamma},
                    gamma=gamma, graph="knn", precomputed_knn=(idx, dist), graph_weight=graph_weight,
                    laplacian=laplacian, must_link=must, cannot_link=cannot, gamma_must=gamma_must,
                    gamma_cannot=gamma_cannot, solver="nystrom", n_landmarks=n_landmarks, nystrom_rank=nystrom_rank,
                    eigen_solver=eigen_solver, random_state=random_state)
    t0 = time.perf_counter()
    est.fit(X, y_fit)
    fit_seconds = time.perf_counter() - t0
    arrays, attrs = est.to_state()
    index_params = read_knn_attrs(store_url)["index_params"]  # fit_graph checked graph/knn belongs to run
    write_model(store_url, run, {**arrays, FIT_ROWS: rows}, {**attrs, "method": METHOD, KNN_INDEX_ATTR: index_params})
    return {"n_fit": int(rows.size), "eigenvalues": [float(v) for v in est.eigenvalues_],
            "eigen_solver": est.eigen_info_["solver"], "n_iter": int(est.eigen_info_["n_iter"]),
            "max_residual": float(np.max(est.eigen_info_["residuals"])),
            "nystrom_rank": int(est.nystrom_.n_components_), "fit_seconds": fit_seconds,
            "n_labeled": 0 if y_fit is None else int(np.sum(y_fit >= 0))}


def _read_model(store_url: str, run: str) -> tuple[dict, dict]:
    arrays, attrs = read_model(store_url, run)
    if attrs.get("method") != METHOD:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {attrs.get('method')!r} model, not {METHOD!r}")
    return arrays, attrs


def load_model(store_url: str, run: str) -> tuple[GraphKPCA, np.ndarray]:
    """The stored GraphKPCA of ``run`` and its (sorted) fit rows."""
    arrays, attrs = _read_model(store_url, run)
    rows = arrays.pop(FIT_ROWS)
    return GraphKPCA.from_state(arrays, attrs), rows


def write_chunk(store_url: str, run: str, model: GraphKPCA, n_total: int, start: int, stop: int,
                local_fit: np.ndarray, Z_fit: np.ndarray, position_chunk: np.ndarray) -> dict:
    """Rows ``start:stop`` of ``embeddings/<run>`` (runs on a Dask worker).

    Fitted rows get ``Z_fit``; held-out rows the out-of-sample map with their stored kNN rows
    (``position_chunk`` maps the chunk's stored neighbour ids to fit positions, -1 for none).
    """
    from storage.embedding_io import write_embedding_block
    from storage.graph_io import read_knn

    out = np.empty((stop - start, Z_fit.shape[1]))
    in_fit = np.zeros(stop - start, dtype=bool)
    in_fit[local_fit] = True
    out[in_fit] = Z_fit
    if not in_fit.all():
        X_rows = np.asarray(read_X(store_url, start, stop)[~in_fit], dtype=np.float64)
        ind = dist = None
        if model._kind == "knn" and model.gamma > 0:
            ind_all, dist_all = read_knn(store_url, start, stop)
            ind, dist = position_chunk[np.asarray(ind_all)[~in_fit]], np.asarray(dist_all)[~in_fit]
            if np.any(ind < 0):
                raise StoreFormatError(f"rows {start}:{stop}: stored neighbours of held-out points are not fit points")
        out[~in_fit] = model.transform_with_neighbors(X_rows, ind, dist)
    write_embedding_block(store_url, run, start, out)
    return {"n_fitted": int(in_fit.sum()), "n_extended": int((~in_fit).sum())}


@task(name="graph-kpca-embed-points", **IO_TASK)
def embed_points_task(store_url: str, run: str, store_token: str) -> dict[str, Any]:
    """Write ``embeddings/<run>`` for every row of X, chunk by chunk on the flow's Dask cluster."""
    from distributed import get_client

    model, rows = load_model(store_url, run)
    bounds = row_chunks(store_url)
    n = bounds[-1][1] if bounds else 0
    create_embedding(store_url, run, model.embedding_.shape[1], overwrite=True, attrs={"method": METHOD})
    position = np.full(n, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size)
    [payload] = get_client().scatter([model], broadcast=True)
    [pos] = get_client().scatter([position], broadcast=True)
    per_chunk = [(rows[lo:hi] - start, model.embedding_[lo:hi], pos)
                 for (start, _), (lo, hi) in zip(bounds, chunk_fit_slices(rows, bounds))]
    infos = map_row_chunks(write_chunk, bounds, args=(store_url, run, payload, n), per_chunk=per_chunk,
                           name="graph-kpca-embed-points")
    return {"n_chunks": len(bounds), "n_fitted": sum(i["n_fitted"] for i in infos),
            "n_extended": sum(i["n_extended"] for i in infos)}


# ---- extend: embed the points of another store with a stored model ------------------------------------------
def _index_params(store_url: str, run: str, attrs: dict) -> dict:
    """KNNIndex parameters of the model's fit graph: the model's attrs, else ``graph/knn`` if it is that run's."""
    if KNN_INDEX_ATTR in attrs:
        return attrs[KNN_INDEX_ATTR]
    graph = read_knn_attrs(store_url)
    if graph.get("run") != run:
        raise StoreFormatError(f"model {run!r} of {store_url} records no kNN index parameters and graph/knn belongs "
                               f"to run {graph.get('run')!r}: fit the graph_kpca model again to extend it")
    return graph["index_params"]


def fit_index(store_url: str, run: str, store_token: str, rows: np.ndarray, attrs: dict) -> KNNIndex:
    """The kNN index over the fit points of ``run``: the one the fit published on the cluster, else rebuilt
    from the store's X (fit rows, model order) with the recorded parameters (as the holdout path built it)."""
    from distributed import get_client

    client = get_client()
    name = index_dataset_name(store_token, run)
    if name in client.list_datasets():
        return client.get_dataset(name).result()
    return KNNIndex.rebuild(read_X(store_url)[rows], _index_params(store_url, run, attrs))


@task(name="graph-kpca-extend-points", **IO_TASK)
def extend_points_task(model_store: str, model_run: str, model_token: str, out_store: str, out_run: str,
                       out_token: str) -> dict[str, Any]:
    """Embed every row of ``out_store`` with the GraphKPCA of ``model_run`` in ``model_store``, per chunk on Dask.

    New points get their kNN rows among the model's fit points from the index of :func:`fit_index`, then the
    out-of-sample map :meth:`GraphKPCA.transform_with_neighbors`; written to ``embeddings/<out_run>``.
    """
    from distributed import get_client

    arrays, attrs = _read_model(model_store, model_run)
    rows = arrays.pop(FIT_ROWS)
    extension = IndexedGraphKPCA(GraphKPCA.from_state(arrays, attrs))
    if x_shape(out_store)[1] != extension.model.n_features_in_:
        raise StoreFormatError(f"new points must have {extension.model.n_features_in_} features like the model's "
                               f"training data; got {x_shape(out_store)[1]}")
    index = fit_index(model_store, model_run, model_token, rows, attrs) if extension.needs_neighbors else None
    extension.index = index
    extension.check_index()
    extension.index = None  # the index travels separately, once (tasks._chunks.transform_with_index)
    [payload] = get_client().scatter([(extension, index)], broadcast=True)
    bounds = row_chunks(out_store)
    d = extension.model.eigenvectors_.shape[1]
    create_embedding(out_store, out_run, d, overwrite=True,
                     attrs={"method": METHOD, "model_store": str(model_store), "model_run": model_run})
    empty = (np.zeros(0, dtype=np.int64), np.zeros((0, d)))
    infos = map_row_chunks(write_embedding_chunk, bounds, args=(out_store, out_run, transform_with_index, payload),
                           per_chunk=[empty] * len(bounds), name="graph-kpca-extend-points")
    return {"n_chunks": len(bounds), "n_extended": sum(i["n_extended"] for i in infos),
            "n_queried": sum(i.get("n_queried", 0) for i in infos),
            "knn_method": None if index is None else index.method}
