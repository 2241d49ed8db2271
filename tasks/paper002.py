"""Tasks of the TSK flow (paper 002): graph -> m eigenpairs -> LP of eq. 14 -> eq. 5 scores of every point.

The kNN graph and its Hein-Maier weights are the Laplacian-eigenmaps flow's tasks (``knn_task``,
``weights_task`` of :mod:`tasks.laplacian_eigenmaps`, with ``weighting="hein_maier"``, ``symmetrize="or"``,
no hold-out). Then:

- :func:`tsk_fit_task` computes the m smallest eigenpairs (lambda != 1) of the normalized Laplacian with the
  scalable solvers, solves the LP (m + l variables, l = labeled points of the store's ``y``, -1 = unlabeled),
  writes the eigenvectors to ``outputs/<run>/eigenvectors`` (n, m) and the model (eigenvalues, mu, the (m, c)
  class matrix ``P = U V_l^T C``, classes) to ``models/<run>``;
- :func:`tsk_score_task` computes the transductive scores ``V P`` (eq. 5) chunk by chunk on Dask and writes
  ``outputs/<run>/scores`` (n, c) and ``outputs/<run>/labels`` (n,) (the class values, int64).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prefect import task

from spectral.paper002 import check_semi_supervised_labels, class_matrix, solve_spectrum_lp, spectral_basis
from spectral.paper002 import transductive_scores
from storage import layout
from storage.arrays import read_labels, row_chunks
from storage.embedding_io import create_output, read_output, write_output_block, write_point_array
from storage.errors import StoreFormatError
from storage.graph_io import read_csr, read_csr_attrs
from storage.models import read_model, write_model

from tasks.common import COMPUTE_TASK, IO_TASK, map_row_chunks

METHOD = "tsk"
EIGENVECTORS, SCORES, LABELS = "eigenvectors", "scores", "labels"


@task(name="tsk-fit", **COMPUTE_TASK)
def tsk_fit_task(store_url: str, run: str, store_token: str, *, n_eigenvectors: int, eta: float,
                 beta: float | str, constraint: str, include_trivial: bool, class_weight: str | None,
                 eigen_solver: str, random_state: int | None, eigen_tol: float | None = None) -> dict[str, Any]:
    """Eigenpairs of ``graph/weights`` + the LP of eq. 14; writes the eigenvectors and ``models/<run>``."""
    if read_csr_attrs(store_url, layout.WEIGHTS).get("run") != run:
        raise StoreFormatError(f"graph/weights of {store_url} does not belong to run {run!r}; run the flow again")
    y = read_labels(store_url)
    if y is None:
        raise StoreFormatError(f"store {store_url} has no labels y: TSK needs y with -1 for unlabeled points")
    W = read_csr(store_url, layout.WEIGHTS)
    classes, labeled, codes = check_semi_supervised_labels(np.asarray(y), W.shape[0])
    t0 = time.perf_counter()
    basis = spectral_basis(W, n_eigenvectors, include_trivial=include_trivial, eigen_solver=eigen_solver,
                           tol=eigen_tol, random_state=random_state)
    t_eigen = time.perf_counter() - t0
    beta_value = W.shape[0] / labeled.size if beta == "auto" else float(beta)
    lp = solve_spectrum_lp(basis.values, basis.vectors[labeled], codes, eta=eta, beta=beta_value,
                           constraint=constraint)
    t_lp = time.perf_counter() - t0 - t_eigen
    P = class_matrix(basis.vectors[labeled], codes, lp.mu, classes.size, class_weight)
    write_point_array(store_url, layout.output_path(run, EIGENVECTORS), basis.vectors, dtype="float64",
                      attrs={"method": METHOD, "eigenvalues": [float(v) for v in basis.values]}, overwrite=True)
    write_model(store_url, run, {"eigenvalues": basis.values, "mu": lp.mu, "class_matrix": P, "classes": classes,
                                 "degrees": basis.degrees, "labeled": labeled},
                {"method": METHOD, "eta": float(eta), "beta": beta_value, "constraint": constraint,
                 "include_trivial": bool(include_trivial), "class_weight": class_weight})
    return {"n": int(W.shape[0]), "n_labeled": int(labeled.size), "eigen_solver": basis.info["eigen_solver"],
            "eigenvalues": [float(v) for v in basis.values], "mu": [float(v) for v in lp.mu],
            "lp_objective": lp.objective, "n_active_slacks": int(np.sum(lp.xi > 0)), "beta": beta_value,
            "eigen_seconds": t_eigen, "lp_seconds": t_lp}


def score_chunk(store_url: str, run: str, P: np.ndarray, classes: np.ndarray, start: int, stop: int) -> dict:
    """Eq. 5 for rows ``start:stop`` (runs on a Dask worker): read V, write scores and labels."""
    scores = transductive_scores(read_output(store_url, run, EIGENVECTORS, start, stop), P)
    labels = classes[np.argmax(scores, axis=1)]
    write_output_block(store_url, run, SCORES, start, scores.astype(np.float32))
    write_output_block(store_url, run, LABELS, start, labels.astype(np.int64))
    return {"counts": np.bincount(np.searchsorted(classes, labels), minlength=classes.size).tolist()}


@task(name="tsk-score", **IO_TASK)
def tsk_score_task(store_url: str, run: str, store_token: str) -> dict[str, Any]:
    """Write ``outputs/<run>/scores`` (n, c) and ``outputs/<run>/labels`` (n,) of every point, chunk by chunk."""
    arrays, attrs = read_model(store_url, run)
    if attrs.get("method") != METHOD:
        raise StoreFormatError(f"model {run!r} of {store_url} is a {attrs.get('method')!r} model, not {METHOD!r}")
    P, classes = arrays["class_matrix"], arrays["classes"]
    create_output(store_url, run, SCORES, classes.size, dtype="float32", attrs={"method": METHOD}, overwrite=True)
    create_output(store_url, run, LABELS, None, dtype="int64", attrs={"method": METHOD,
                                                                      "classes": classes.tolist()}, overwrite=True)
    bounds = row_chunks(store_url)
    infos = map_row_chunks(score_chunk, bounds, args=(store_url, run, P, classes), name="tsk-score")
    counts = np.sum([i["counts"] for i in infos], axis=0)
    return {"n_chunks": len(bounds), "label_counts": {str(c): int(k) for c, k in zip(classes.tolist(), counts)}}
