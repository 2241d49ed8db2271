"""The spectral basis of LQCL09: graph, normalized Laplacian, its smallest eigenpairs, out-of-sample rows.

LQCL09 (Liu, Qian, Cui & Liu, IJCAI 2009), Sect. 3 and Table 1:

- a kNN graph (k = 6) with the weights of Hein & Maier, ``W_ij = exp(-||x_i - x_j||^2 / max(h_i, h_j)^2)``,
  ``h_i`` the distance of ``x_i`` to its k-th neighbour (eq. 2), an edge when either point is among the
  other's k nearest neighbours ("or"; the mutual-kNN reading isolates 143 of the 351 Ionosphere points);
- the normalized Laplacian ``L = I - D^-1/2 W D^-1/2 = V Lambda V^T`` (Sect. 3);
- the ``m`` smallest eigenpairs with ``lambda != 1`` (Table 1, step 2);
- the out-of-sample rows of eq. 17-18 (Bengio et al. 2004):
  ``V_x = w_x^T V (I - Lambda)^-1``, ``(w_x)_i = W(x, x_i) / sqrt(D_xx D_ii)``, ``D_xx = sum_i W(x, x_i)``.

A training point given again gets exactly its training row (Theorem 2: ``S V = V (I - Lambda)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._validation import check_choice, check_int
from eigenflow.spectral.eigen import MATRIX_SOLVERS, eigensolve
from eigenflow.spectral.eigen.dispatch import AUTO_DENSE_MAX_N
from eigenflow.spectral.errors import DisconnectedGraphError, InputDataError
from eigenflow.spectral.graph.laplacian import check_affinity, connected_components, laplacian

EIGEN_SOLVERS = MATRIX_SOLVERS  # the graph is given: every solver of a matrix
#: An eigenvalue closer than this to 1 counts as "lambda = 1" and is skipped (Table 1, step 2): eq. 18
#: divides by 1 - lambda, so a pair this close to 1 would amplify round-off by more than 1e8.
ONE_TOL = 1e-8
#: Eigenvalues below this count as 0 (the trivial pair of a connected graph, lambda_1 = 0).
ZERO_TOL = 1e-8


@dataclass
class SpectralBasis:
    """The m retained eigenpairs of the normalized Laplacian and what eq. 18 needs.

    Attributes
    ----------
    values : ndarray (m,)
        ``lambda_1 <= ... <= lambda_m``, none equal to 1.
    vectors : ndarray (n, m)
        Orthonormal eigenvectors (columns), deterministic signs.
    degrees : ndarray (n,)
        ``D_ii = sum_j W_ij``.
    info : dict
        ``eigen_solver``, ``n_skipped_one`` (pairs with lambda = 1 skipped), ``trivial_included``,
        ``residuals``.
    """

    values: np.ndarray
    vectors: np.ndarray
    degrees: np.ndarray
    info: dict


def spectral_basis(W, n_components: int, *, include_trivial: bool = True, skip_one: bool = True,
                   eigen_solver: str = "auto", tol: float | None = None, random_state=None) -> SpectralBasis:
    """Smallest eigenpairs of ``L = I - D^-1/2 W D^-1/2`` with ``lambda != 1`` (LQCL09, Table 1 step 2).

    Parameters
    ----------
    W : sparse matrix or array (n, n)
        Symmetric non-negative affinity of a connected graph.
    n_components : int in [1, n - 2], or n
        Number m of retained pairs; m = n asks for the full spectrum (dense ``eigh``).
    include_trivial : bool
        Keep ``lambda_1 = 0`` (eigenvector ``D^1/2 1 / ||D^1/2 1||``) as the paper does; False drops it.
    skip_one : bool
        Skip pairs with ``lambda = 1`` (Table 1 step 2; eq. 18 divides by ``1 - lambda``). False keeps them
        (RSK's full spectrum, whose transductive part does not divide).
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "randomized"}
        Passed to :func:`spectral.eigen.eigensolve`.
    tol, random_state
        Eigensolver tolerance and seed.

    Returns
    -------
    SpectralBasis

    Raises
    ------
    DisconnectedGraphError
        If the graph has more than one connected component: lambda = 0 is then multiple and the component
        indicators mix in the basis (connect the graph with more ``n_neighbors``).
    """
    W = check_affinity(W)
    n = W.shape[0]
    m = check_int("n_components", n_components, low=1, high=n)
    if n - 2 < m < n:
        raise InputDataError(f"n_components must be in [1, {max(1, n - 2)}] or n={n} (full spectrum); got {m}")
    eigen_solver = check_choice("eigen_solver", eigen_solver, EIGEN_SOLVERS)
    if m == n:
        eigen_solver = "dense"
    n_comp, labels = connected_components(W)
    if n_comp > 1:
        sizes = np.sort(np.bincount(labels))[::-1]
        shown = ", ".join(str(s) for s in sizes[:10]) + (", ..." if n_comp > 10 else "")
        raise DisconnectedGraphError(
            f"the kNN graph has {n_comp} connected components (sizes {shown}); TSK needs a connected graph "
            "(lambda = 0 would be multiple). Increase n_neighbors"
        )
    L, degrees = laplacian(W, "symmetric")
    skip = 0 if include_trivial else 1
    dense = eigen_solver == "dense" or (eigen_solver == "auto" and n <= AUTO_DENSE_MAX_N)
    top = n if dense else n - 1
    k = min(m + skip, top)
    while True:  # ask for more pairs until m of them differ from 1 (rarely more than one round)
        res = eigensolve(L, k, which="smallest", solver=eigen_solver, tol=tol, random_state=random_state)
        ok = np.abs(res.values - 1.0) > ONE_TOL if skip_one else np.ones(k, dtype=bool)
        keep = np.flatnonzero(ok & (np.arange(k) >= skip))
        if keep.size >= m or k >= top:
            break
        k = min(k + (m - keep.size) + 2, top)
    if keep.size < m:
        raise InputDataError(
            f"only {keep.size} eigenpairs with lambda != 1 exist among the {k} smallest; n_components must "
            f"be <= {keep.size}; got {m}"
        )
    keep = keep[:m]
    values = np.clip(res.values[keep], 0.0, None)
    info = {"eigen_solver": res.solver, "n_skipped_one": int(np.sum(np.abs(res.values[: keep[-1] + 1] - 1.0)
                                                                    <= ONE_TOL)),
            "trivial_included": bool(include_trivial), "residuals": res.residuals[keep],
            "converged": bool(res.converged)}
    return SpectralBasis(values, np.ascontiguousarray(res.vectors[:, keep]), np.asarray(degrees, float), info)


def extend_vectors(W_new, degrees: np.ndarray, values: np.ndarray, vectors: np.ndarray,
                   log_scale: np.ndarray | None = None) -> np.ndarray:
    """Out-of-sample rows of the eigenvector matrix (LQCL09 eq. 17-18).

    Parameters
    ----------
    W_new : sparse matrix or array (s, n)
        Weights ``W(x, x_i)`` of s new points to the n training points (eq. 2), e.g. from
        :func:`spectral.graph.weights.query_weights`; a row may be scaled by ``exp(-log_scale)``.
    degrees : ndarray (n,)
        Training degrees ``D_ii``.
    values : ndarray (m,)
        Eigenvalues (none equal to 1).
    vectors : ndarray (n, m)
        Training eigenvectors.
    log_scale : ndarray (s,), optional
        Row shifts returned by ``query_weights(..., return_log_scale=True)``: the true row is
        ``W_new[r] * exp(log_scale[r])``.

    Returns
    -------
    V_new : ndarray (s, m)
        ``w_x^T V (I - Lambda)^-1``; zero for a point with no edge to the training graph.
    """
    Wn = sp.csr_matrix(W_new, dtype=np.float64)
    if Wn.shape[1] != vectors.shape[0]:
        raise InputDataError(f"W_new must have {vectors.shape[0]} columns (training points); got {Wn.shape[1]}")
    if np.any(np.abs(1.0 - values) <= ONE_TOL):
        raise InputDataError("eq. 18 divides by 1 - lambda: an eigenvalue equal to 1 is among the values")
    d_x = np.asarray(Wn.sum(axis=1)).ravel()  # (s,) D_xx in the shifted scale
    inv_sqrt_d = 1.0 / np.sqrt(np.asarray(degrees, float))
    numer = np.asarray(Wn @ (vectors * inv_sqrt_d[:, None]))  # (s, m)
    scale = np.zeros_like(d_x)
    ok = d_x > 0
    scale[ok] = 1.0 / np.sqrt(d_x[ok])
    if log_scale is not None:
        scale[ok] *= np.exp(0.5 * np.asarray(log_scale, float)[ok])  # w_x scales like sqrt(row scale)
    return numer * scale[:, None] / (1.0 - values)[None, :]
