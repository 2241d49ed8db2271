"""Tasks of the TSK flow (paper 002): graph -> m eigenpairs -> LP of eq. 14 -> eq. 5 / eq. 19 labels of points.

The kNN graph and its Hein-Maier weights are the Laplacian-eigenmaps flow's tasks (``knn_task``,
``weights_task`` of :mod:`tasks.laplacian_eigenmaps`, with ``weighting="hein_maier"``, ``symmetrize="or"``,
no hold-out). Then:

- :func:`tsk_fit_task` computes the m smallest eigenpairs (lambda != 1) of the normalized Laplacian with the
  scalable solvers, fits :class:`spectral.spectral_kernels.TSK` on that basis (LP of m + l variables, l = labeled
  points of the store's ``y``, -1 = unlabeled), writes the eigenvectors to ``outputs/<run>/eigenvectors``
  (n, m) and the rest of the model state (``TSK.to_state``: eigenvalues, mu, the (m, c) class matrix
  ``P = U V_l^T C``, classes, degrees, the eq. 2 scales / radii and kNN parameters) to ``models/<run>``;
- :func:`tsk_score_task` computes the transductive scores ``V P`` (eq. 5) chunk by chunk on Dask and writes
  ``outputs/<run>/scores`` (n, c) and ``outputs/<run>/labels`` (n,) (the class values, int64), and with
  ``write_embedding`` the kernel features ``V U^1/2`` (eq. 9-10) to ``embeddings/<run>`` (n, m);
- :func:`tsk_extend_task` labels the points of another store with a stored model (eq. 17-19): the kNN index
  is rebuilt from the model store's X, the model is scattered once and every row chunk of the new store is
  queried and written (scores, labels, kernel features) on Dask.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prefect import task

from spectral.spectral_kernels import TSK, GraphParams, spectral_basis, transductive_scores
from spectral.weights import fit_weight_params
from storage import layout
from storage.arrays import read_labels, read_X, row_chunks, x_shape
from storage.embedding_io import (create_embedding, create_output, read_output, write_embedding_block,
                                  write_output_block, write_point_array)
from storage.errors import StoreFormatError
from storage.graph_io import read_csr, read_csr_attrs, read_knn_attrs
from storage.models import read_model, write_model

from tasks.common import COMPUTE_TASK, IO_TASK, map_row_chunks
from tasks.laplacian_eigenmaps import fit_graph

METHOD = "tsk"
EIGENVECTORS, SCORES, LABELS = "eigenvectors", "scores", "labels"
WEIGHTING, SYMMETRIZE = "hein_maier", "or"  # paper 002 eq. 2


@task(name="tsk-fit", **COMPUTE_TASK)
def tsk_fit_task(store_url: str, run: str, store_token: str, *, n_components: int, eta: float,
                 beta: float | str, constraint: str, include_trivial: bool, class_weight: str | None,
                 eigen_solver: str, random_state: int | None, eigen_tol: float | None = None) -> dict[str, Any]:
    """Eigenpairs of ``graph/weights`` + the LP of eq. 14; writes the eigenvectors and ``models/<run>``."""
    if read_csr_attrs(store_url, layout.WEIGHTS).get("run") != run:
        raise StoreFormatError(f"graph/weights of {store_url} does not belong to run {run!r}; run the flow again")
    y = read_labels(store_url)
    if y is None:
        raise StoreFormatError(f"store {store_url} has no labels y: TSK needs y with -1 for unlabeled points")
    W = read_csr(store_url, layout.WEIGHTS)
    graph = _graph_params(store_url, run, W.shape[0])
    t0 = time.perf_counter()
    basis = spectral_basis(W, n_components, include_trivial=include_trivial, eigen_solver=eigen_solver,
                           tol=eigen_tol, random_state=random_state)
    t_eigen = time.perf_counter() - t0
    est = TSK(n_components, eta=eta, beta=beta, n_neighbors=graph.weight_params.n_neighbors,
              constraint=constraint, include_trivial=include_trivial, class_weight=class_weight,
              eigen_solver=eigen_solver, knn_method=graph.knn_params["method"], random_state=random_state)
    est.fit_basis(basis, np.asarray(y), graph=graph, n_features_in=x_shape(store_url)[1])
    t_lp = time.perf_counter() - t0 - t_eigen
    arrays, attrs = est.to_state()
    V = arrays.pop("eigenvectors")  # (n, m): a per-point output, read back chunk by chunk
    write_point_array(store_url, layout.output_path(run, EIGENVECTORS), V, dtype="float64",
                      attrs={"method": METHOD, "eigenvalues": [float(v) for v in basis.values]}, overwrite=True)
    write_model(store_url, run, arrays, {**attrs, "method": METHOD,
                                         "eigenvectors": layout.output_path(run, EIGENVECTORS)})
    return {"n": int(W.shape[0]), "n_labeled": int(est.labeled_indices_.size),
            "eigen_solver": basis.info["eigen_solver"], "eigenvalues": [float(v) for v in basis.values],
            "mu": [float(v) for v in est.mu_], "lp_objective": est.lp_objective_,
            "n_active_slacks": int(np.sum(est.xi_ > 0)), "beta": est.beta_, "eigen_seconds": t_eigen,
            "lp_seconds": t_lp}


def _graph_params(store_url: str, run: str, n: int) -> GraphParams:
    """Eq. 2 weighting of the run's kNN graph (what eq. 17-18 needs), from ``graph/knn``."""
    rows, _, dist = fit_graph(store_url, run)
    if rows.size != n or rows.size != x_shape(store_url)[0]:
        raise StoreFormatError(f"TSK fits every point of the store; the kNN graph of run {run!r} has "
                               f"{rows.size} fit points of {x_shape(store_url)[0]} (no hold-out allowed)")
    wparams, scales, radii = fit_weight_params(dist, weighting=WEIGHTING, symmetrize=SYMMETRIZE)
    return GraphParams(wparams, scales, radii, read_knn_attrs(store_url)["index_params"])


def load_model(store_url: str, run: str) -> TSK:
    """The stored TSK of ``run`` (``models/<run>`` + ``outputs/<run>/eigenvectors``), without kNN index."""
    arrays, attrs = read_model(store_url, run)
    if attrs.get("method") != METHOD:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {attrs.get('method')!r} model, not {METHOD!r}")
    arrays["eigenvectors"] = read_output(store_url, run, EIGENVECTORS)
    return TSK.from_state(arrays, attrs)


def _create_outputs(store_url: str, run: str, classes: np.ndarray, n_components: int | None, attrs: dict) -> None:
    """``outputs/<run>/scores`` (n, c) float32, ``outputs/<run>/labels`` (n,) int64 [, ``embeddings/<run>``]."""
    create_output(store_url, run, SCORES, classes.size, dtype="float32", attrs=attrs, overwrite=True)
    create_output(store_url, run, LABELS, None, dtype="int64", attrs={**attrs, "classes": classes.tolist()},
                  overwrite=True)
    if n_components is not None:
        create_embedding(store_url, run, n_components, overwrite=True,
                         attrs={**attrs, "content": "TSK kernel features V U^1/2 (paper 002 eq. 9-10)"})


def _write_rows(store_url: str, run: str, start: int, scores: np.ndarray, classes: np.ndarray,
                features: np.ndarray | None) -> dict:
    labels = classes[np.argmax(scores, axis=1)]
    write_output_block(store_url, run, SCORES, start, scores.astype(np.float32))
    write_output_block(store_url, run, LABELS, start, labels.astype(np.int64))
    if features is not None:
        write_embedding_block(store_url, run, start, features)
    return {"counts": np.bincount(np.searchsorted(classes, labels), minlength=classes.size).tolist()}


def score_chunk(store_url: str, run: str, P: np.ndarray, classes: np.ndarray, sqrt_mu: np.ndarray | None,
                start: int, stop: int) -> dict:
    """Eq. 5 for rows ``start:stop`` (runs on a Dask worker): read V, write scores, labels [, features]."""
    V = read_output(store_url, run, EIGENVECTORS, start, stop)
    features = None if sqrt_mu is None else V * sqrt_mu[None, :]
    return _write_rows(store_url, run, start, transductive_scores(V, P), classes, features)


def extend_chunk(store_url: str, run: str, model: TSK, start: int, stop: int) -> dict:
    """Eq. 17-19 for rows ``start:stop`` of ``store_url``'s X (runs on a Dask worker, model with its index).

    Writes the scores ``V_x P`` (as :meth:`TSK.decision_function`), labels (as :meth:`TSK.predict`) and
    kernel features ``V_x U^1/2`` (as :meth:`TSK.kernel_features`).
    """
    V = model.spectral_rows(read_X(store_url, start, stop))  # (rows, m), eq. 18
    info = _write_rows(store_url, run, start, V @ model.class_matrix_, model.classes_,
                       V * np.sqrt(model.mu_)[None, :])
    return info


def _label_counts(infos: list[dict], classes: np.ndarray) -> dict[str, int]:
    counts = np.sum([i["counts"] for i in infos], axis=0)
    return {str(c): int(k) for c, k in zip(classes.tolist(), counts)}


@task(name="tsk-score", **IO_TASK)
def tsk_score_task(store_url: str, run: str, store_token: str, *, write_embedding: bool = False) -> dict[str, Any]:
    """Write ``outputs/<run>/scores`` (n, c) and ``outputs/<run>/labels`` (n,) of every point, chunk by chunk.

    ``write_embedding`` also writes the kernel features ``V U^1/2`` to ``embeddings/<run>`` (n, m).
    """
    arrays, attrs = read_model(store_url, run)
    if attrs.get("method") != METHOD:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {attrs.get('method')!r} model, not {METHOD!r}")
    P, classes, mu = arrays["class_matrix"], arrays["classes"], arrays["mu"]
    _create_outputs(store_url, run, classes, mu.size if write_embedding else None, {"method": METHOD})
    bounds = row_chunks(store_url)
    sqrt_mu = np.sqrt(mu) if write_embedding else None
    infos = map_row_chunks(score_chunk, bounds, args=(store_url, run, P, classes, sqrt_mu), name="tsk-score")
    return {"n_chunks": len(bounds), "label_counts": _label_counts(infos, classes)}


@task(name="tsk-extend", **IO_TASK)
def tsk_extend_task(model_store: str, model_run: str, model_token: str, out_store: str, out_run: str,
                    out_token: str) -> dict[str, Any]:
    """Label every row of ``out_store`` with the TSK of ``model_run`` in ``model_store`` (eq. 17-19).

    The kNN index is rebuilt from the model store's X (the fit points, with the stored index parameters);
    the model is scattered to the workers once and each row chunk of ``out_store`` is queried there. Writes
    ``outputs/<out_run>/scores`` (n_new, c), ``outputs/<out_run>/labels`` (n_new,) and the kernel features
    ``embeddings/<out_run>`` (n_new, m) of ``out_store``.
    """
    from distributed import get_client

    model = load_model(model_store, model_run)
    n_fit, d = x_shape(model_store)
    if n_fit != model.eigenvectors_.shape[0]:
        raise StoreFormatError(f"model {model_run!r} was fitted on {model.eigenvectors_.shape[0]} points but X of "
                               f"{model_store} has {n_fit} rows: the store was re-ingested; fit again")
    if x_shape(out_store)[1] != d:
        raise StoreFormatError(f"new points must have {d} features like the model's training data; "
                               f"got {x_shape(out_store)[1]}")
    t0 = time.perf_counter()
    model.rebuild_index(read_X(model_store))
    index_seconds = time.perf_counter() - t0
    _create_outputs(out_store, out_run, model.classes_, model.mu_.size,
                    {"method": METHOD, "model_store": str(model_store), "model_run": model_run})
    [payload] = get_client().scatter([model], broadcast=True)
    bounds = row_chunks(out_store)
    infos = map_row_chunks(extend_chunk, bounds, args=(out_store, out_run, payload), name="tsk-extend")
    return {"n_chunks": len(bounds), "index_seconds": index_seconds,
            "label_counts": _label_counts(infos, model.classes_)}
