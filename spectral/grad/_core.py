"""Shared linear algebra of the GRAD estimators (paper 003): kernels, centering, eigen-steps, signs.

Small n: dense matrices and ``scipy.linalg.eigh``. Large n: the implicit operator
``Phi Phi^T + sparse/low-rank graph terms`` (never an n x n array) solved by ARPACK on a LinearOperator.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.metrics.pairwise import pairwise_kernels

from .._validation import check_choice
from ..errors import ConvergenceError, ParameterError

KERNELS = ("linear", "rbf", "poly", "cosine", "laplacian", "sigmoid")


def kernel_matrix(X, Y, kernel: str, params: dict | None) -> np.ndarray:
    """Gram matrix k(X_i, Y_j), (n_x, n_y). ``params`` are scikit-learn's (e.g. {"gamma": 0.5} for rbf)."""
    check_choice("kernel", kernel, KERNELS)
    try:
        return pairwise_kernels(X, Y, metric=kernel, **dict(params or {}))
    except TypeError as exc:
        raise ParameterError(f"kernel_params {params!r} are not valid for kernel={kernel!r}: {exc}") from None


def center_gram(K: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Double centering H K H (kernel PCA); returns (K_c, column means (n,), grand mean)."""
    col = K.mean(axis=0)
    tot = float(col.mean())
    return K - col[None, :] - col[:, None] + tot, col, tot


def center_rows(K_new: np.ndarray, col: np.ndarray, tot: float) -> np.ndarray:
    """Center a kernel block k(X_new, X_train) (m, n) with the training statistics (sklearn KernelCenterer)."""
    return K_new - col[None, :] - K_new.mean(axis=1, keepdims=True) + tot


def sign_flip(V: np.ndarray) -> np.ndarray:
    """Deterministic signs: the largest-|.| entry of each column made positive (ARCHITECTURE.md)."""
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    return V * signs


def top_eigs_dense(M: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """d largest eigenpairs of a symmetric dense (n, n) matrix, descending: ``(values (d,), vectors (n, d))``."""
    n = M.shape[0]
    lam, V = la.eigh(M, subset_by_index=[n - d, n - 1])
    return lam[::-1], sign_flip(V[:, ::-1])


def bottom_eigs_dense(M: np.ndarray, d: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """d smallest eigenpairs after skipping ``skip`` (LLE drops the constant one), ascending."""
    lam, V = la.eigh(M, subset_by_index=[skip, skip + d - 1])
    return lam, sign_flip(V)


def top_eigs_operator(matvec, n: int, d: int, *, shift: float, tol: float, random_state) -> tuple:
    """d largest eigenpairs of a symmetric implicit operator given by ``matvec`` ((n, b) -> (n, b)).

    ``shift`` >= -lambda_min(A) makes A + shift I positive semidefinite, so the largest-magnitude
    eigenpairs that Lanczos converges to first are the algebraically largest of A.
    """
    op = spla.LinearOperator((n, n), matvec=lambda v: matvec(v.reshape(n, -1)).ravel() + shift * v.ravel(),
                             matmat=lambda V: matvec(V) + shift * V, dtype=np.float64)
    v0 = np.random.default_rng(random_state).standard_normal(n)
    try:
        lam, V = spla.eigsh(op, k=d, which="LA", tol=tol, v0=v0, ncv=min(n, max(2 * d + 1, 20)))
    except spla.ArpackNoConvergence as exc:
        raise ConvergenceError(f"ARPACK did not converge for the {d} largest eigenpairs (n={n})") from exc
    order = np.argsort(lam)[::-1]
    return lam[order] - shift, sign_flip(V[:, order])


def sparse_norm_bound(S) -> float:
    """Gershgorin bound on the spectral radius of a sparse symmetric matrix (max absolute row sum)."""
    if S is None or S.nnz == 0:
        return 0.0
    return float(np.abs(S).sum(axis=1).max())


def as_csr(M):
    return sp.csr_matrix(M)


def training_matches(X_fit: np.ndarray, X: np.ndarray) -> np.ndarray:
    """For each row of X (m, D), the index of an identical row of X_fit (n, D), or -1 (exact equality)."""
    from sklearn.neighbors import NearestNeighbors

    _, ind = NearestNeighbors(n_neighbors=1).fit(X_fit).kneighbors(X)
    ind = ind[:, 0]
    same = np.all(X_fit[ind] == X, axis=1)
    return np.where(same, ind, -1)
