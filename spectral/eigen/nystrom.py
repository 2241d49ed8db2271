"""The ``"nystrom"`` solver: one-shot Nystrom eigendecomposition of a kernel matrix (CK08 Sect. 4).

Unlike the other solvers its input is the data, not a matrix: ``eigensolve(X, k, solver="nystrom",
which="largest", kernel="rbf", n_landmarks=2000, ...)`` with X (n, d) numpy or dask. It returns the top-k
eigenpairs of the Nystrom approximation ``C A^+ C^T`` of ``K(X, X)`` (or, with ``normalized=True``, of the
normalized affinity ``D^{-1/2} K D^{-1/2}`` with Nystrom degrees, the spectral-embedding variant of
Fowlkes et al.) for every row of X, never forming K. Only ``which="largest"`` exists: the smallest
eigenpairs of a normalized Laplacian ``I - D^{-1/2} K D^{-1/2}`` are the largest of the normalized kernel.

Solver options: ``kernel``, ``gamma``, ``degree``, ``coef0``, ``kernel_params`` (see
:mod:`spectral.operators.kernels`), ``n_landmarks`` (default ``min(n, 1000)``), ``landmarks`` (selection method,
see :func:`spectral.operators.nystrom_features.select_landmarks`), ``features`` (a fitted
:class:`spectral.operators.nystrom_features.NystromFeatures`, overrides the previous ones), ``normalized`` (bool),
``dtype`` (float64 or float32 for the kernel blocks), ``chunk_rows``, ``residual_rows`` (default 200).

Residuals: K is never formed, so ``residuals`` are ESTIMATES of ``||K v - lambda v||`` against the true
kernel (normalized: ``D^{-1/2} K D^{-1/2}`` with the Nystrom degrees) from ``residual_rows`` sampled rows,
scaled by ``sqrt(n / rows)``; they measure the Nystrom approximation error, not an iteration. ``converged``
is True unless ``tol`` is given and an estimate exceeds it. ``n_iter`` is 0 (one shot).
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral._arrays import is_dask, take_rows
from eigenflow.spectral._validation import check_array_2d, check_choice, check_float, check_int, check_random_state
from eigenflow.spectral.eigen._result import EigenResult
from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.errors import ConvergenceError, ParameterError
from eigenflow.spectral.operators.nystrom_features import DEFAULT_CHUNK_ROWS, DEFAULT_LANDMARKS, NystromFeatures, nystrom_eigh

DEFAULT_RESIDUAL_ROWS = 200


def eigensolve_nystrom(X, n_components, *, which="largest", tol=None, random_state=None, raise_on_failure=True,
                       kernel="rbf", gamma=None, degree=3, coef0=1.0, kernel_params=None, n_landmarks=None,
                       landmarks="uniform", features=None, normalized=False, dtype=np.float64,
                       chunk_rows=DEFAULT_CHUNK_ROWS, residual_rows=DEFAULT_RESIDUAL_ROWS) -> EigenResult:
    """Top-k eigenpairs of the Nystrom-approximated kernel matrix of X (module docstring)."""
    if which != "largest":
        raise ParameterError(
            "solver='nystrom' computes the largest eigenpairs of a kernel (which='largest'); for the smallest "
            f"of a normalized Laplacian use the largest of the normalized kernel (normalized=True); got which={which!r}"
        )
    if not is_dask(X):
        X = check_array_2d(X, "X")
    n = X.shape[0]
    rng = check_random_state(random_state)
    tol = None if tol is None else check_float("tol", tol, low=0.0, low_inclusive=False)
    dtype = np.dtype(check_choice("dtype", np.dtype(dtype).name, ("float64", "float32")))
    if features is None:
        m = min(n, DEFAULT_LANDMARKS) if n_landmarks is None else check_int("n_landmarks", n_landmarks, low=1, high=n)
        features = NystromFeatures(kernel, m, method=landmarks, gamma=gamma, degree=degree, coef0=coef0,
                                   kernel_params=kernel_params, chunk_rows=chunk_rows, random_state=rng).fit(X)
    k = check_int("n_components", n_components, low=1, high=features.n_components_)
    values, vectors, degrees = nystrom_eigh(X, k, features, normalized=normalized, dtype=dtype, chunk_rows=chunk_rows)
    vectors = sign_flip(vectors)
    rows = np.sort(rng.choice(n, size=min(n, check_int("residual_rows", residual_rows, low=1)), replace=False))
    residuals = _sampled_residuals(X, features, values, vectors, degrees, rows, chunk_rows)
    converged = tol is None or bool(np.all(residuals <= tol))
    info = {"n_landmarks": int(features.landmarks_.shape[0]), "rank": int(features.n_components_),
            "normalized": bool(normalized), "landmarks": features.method, "residual_rows": int(len(rows)),
            "residual_kind": "sampled estimate of ||K v - lambda v|| (true kernel, Nystrom degrees)",
            "tol": tol, "degrees": degrees}
    result = EigenResult(values, vectors, residuals, converged, "nystrom", 0, info)
    if not converged and raise_on_failure:
        worst = int(np.argmax(residuals))
        raise ConvergenceError(
            f"eigensolver 'nystrom' (one shot, {info['n_landmarks']} landmarks) has estimated residual "
            f"{residuals[worst]:.3g} for pair {worst} above tol={tol:.3g} after 0 iterations: use more landmarks"
        )
    return result


def _sampled_residuals(X, features, values, vectors, degrees, rows, chunk_rows) -> np.ndarray:
    """``sqrt(n / |S|) ||(K_op V)_S - V_S diag(lambda)||`` per column over sampled rows S."""
    import dask
    import dask.array as da

    n = X.shape[0]
    XS = take_rows(X, rows)
    kern = features.kernel_
    scale = np.ones(n) if degrees is None else 1.0 / np.sqrt(degrees)
    Xd = X if is_dask(X) else da.from_array(X, chunks=(chunk_rows, X.shape[1]))
    Xd = Xd.rechunk({1: -1})
    starts = np.concatenate([[0], np.cumsum(Xd.chunks[0])])
    blocks = Xd.to_delayed().ravel()
    total = np.zeros((len(rows), vectors.shape[1]))
    for i in range(0, len(blocks), 8):
        parts = dask.compute(*[
            dask.delayed(_partial_product)(kern, XS, b, vectors[starts[j]:starts[j + 1]] * scale[starts[j]:starts[j + 1], None])
            for j, b in enumerate(blocks[i:i + 8], start=i)
        ])
        total += sum(parts)
    KV = total * scale[rows][:, None]
    R = KV - vectors[rows] * values
    return np.sqrt(n / len(rows)) * np.linalg.norm(R, axis=0)


def _partial_product(kern, XS, block, V_block):
    return kern(XS, np.asarray(block, dtype=np.float64)) @ V_block
