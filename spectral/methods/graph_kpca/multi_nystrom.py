"""Implicit (Nystrom) eigen-step of MultiGraphKPCA at scale (STG18 eq. 15-20, "At scale" paragraph).

No n x n array is formed. Each kernel q gets Nystrom features Phi_q (n, r_q)
(:class:`spectral.operators.nystrom_features.NystromFeatures`), column-centered so that Phi_q Phi_q^T ~= H K^(q) H (the
centering of the dense path). Each graph l gives R_l = -L^l (sparse, eq. 18/21) or the low-rank graph
kernel r^dagger(L^l) ~= U_l diag(g_l) U_l^T from the low end of L^l's spectrum (eq. 19). The combined
matrix of eq. 16/19,

    M(theta, beta) = sum_q theta_q Phi_q Phi_q^T + gamma sum_l beta_l R_l            (n, n),

is a :class:`spectral.operators.linear.ScaledSum` of low-rank and sparse operators handed to
:func:`spectral.eigen.eigensolve` (which="largest"). The weight steps (eq. 17 and 20) need only

    tr(V^T Phi_q Phi_q^T V) = ||Phi_q^T V||_F^2,   tr(V^T U diag(g) U^T V) = ||diag(g)^1/2 U^T V||_F^2,
    tr(V^T (-L) V) = -sum(V * (L V)).
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral._validation import check_int, clip_int
from eigenflow.spectral.eigen import OPERATOR_SOLVERS, eigensolve
from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.methods.graph_kpca.graph_kernels import lowrank_graph_kernel
from eigenflow.spectral.operators.kernels import PSD_KERNELS, kernel_from_params
from eigenflow.spectral.operators.linear import LowRankOperator, ScaledSum, SparseOperator
from eigenflow.spectral.operators.nystrom_features import NystromFeatures

EIGEN_SOLVERS = OPERATOR_SOLVERS  # the operator is implicit: only products A @ V


def fit_kernel_features(X, kernel: str, params: dict | None, n_landmarks: int, rank: int | None,
                        seed: int, name: str = "kernels"):
    """Nystrom map of one kernel and its centered features.

    Parameters
    ----------
    X : ndarray (n, D)
    kernel, params : a (name, scikit-learn parameters) pair of ``MultiGraphKPCA.kernels``.
    n_landmarks : int >= 1 (capped at n); rank : None or int in [1, m], keep the r leading eigenpairs
        of K_ZZ. seed : landmark seed.

    Returns
    -------
    nys : fitted NystromFeatures; Phi_c : (n, r) centered features (Phi_c Phi_c^T ~= H K H);
    mean : (r,) the column means removed.
    """
    if not callable(kernel) and kernel not in PSD_KERNELS:
        raise ParameterError(f"{name}: kernel must be one of {list(PSD_KERNELS)} with n_landmarks set "
                             f"(a Nystrom map needs a PSD kernel); got {kernel!r}")
    kern = kernel_from_params(kernel, params, name=f"{name} params")
    nys = nystrom_map(X, kern, n_landmarks, rank, seed)
    Phi = nys.transform(X)
    mean = Phi.mean(axis=0)
    return nys, Phi - mean, mean


def nystrom_map(X, kernel, n_landmarks: int, rank: int | None, seed: int) -> NystromFeatures:
    """Fitted :class:`spectral.operators.nystrom_features.NystromFeatures` of a
    :class:`spectral.operators.kernels.Kernel` on X (n, D): ``min(n_landmarks, n)`` uniform landmarks, the ``rank`` (``nystrom_rank``) leading eigenpairs of K_ZZ."""
    m = clip_int("n_landmarks", n_landmarks, X.shape[0], bound="n_samples")
    r = None if rank is None else check_int("nystrom_rank", rank, low=1, high=m)
    return NystromFeatures.from_kernel(kernel, m, rank=r, random_state=seed).fit(X)


class GraphTerm:
    """One R_l of eq. 18-20 as an operator: ``-L`` (sparse) or ``U diag(g) U^T`` (low-rank graph kernel).

    Parameters
    ----------
    L : scipy.sparse (n, n) graph Laplacian.
    graph_kernel : None (R = -L) or a graph kernel name; gk_params : its validated parameters.
    n_graph_eigs : int, smallest eigenpairs of L kept for a graph kernel; seed : ARPACK start vector.
    """

    def __init__(self, L, graph_kernel, gk_params, n_graph_eigs, seed):
        self.L = L.tocsr()
        if graph_kernel is None:
            self.B = None
        else:
            U, g = lowrank_graph_kernel(self.L, graph_kernel, gk_params, n_graph_eigs, random_state=seed)
            self.B = U * np.sqrt(np.clip(g, 0.0, None))  # (n, k), g >= 0 for every graph kernel

    def operator(self):
        """R_l as a symmetric operator (n, n)."""
        return SparseOperator(-self.L) if self.B is None else LowRankOperator(self.B)

    def trace(self, V: np.ndarray) -> float:
        """tr(V^T R_l V) for V (n, d)."""
        if self.B is None:
            return -float(np.sum(V * (self.L @ V)))
        return float(np.sum(np.square(self.B.T @ V)))

    def times(self, V: np.ndarray) -> np.ndarray:
        """R_l V, (n, d)."""
        return -(self.L @ V) if self.B is None else self.B @ (self.B.T @ V)


def kernel_traces(Phis, V: np.ndarray) -> np.ndarray:
    """tr(V^T Phi_q Phi_q^T V) = ||Phi_q^T V||_F^2 for every kernel q, (Q,)."""
    return np.array([float(np.sum(np.square(P.T @ V))) for P in Phis])


def implicit_top_eigs(Phis, theta, terms, beta, gamma: float, d: int, *, solver: str, tol, seed: int):
    """d largest eigenpairs of sum_q theta_q Phi_q Phi_q^T + gamma sum_l beta_l R_l, implicitly.

    Returns ``(values (d,) descending, vectors (n, d) with deterministic signs, info dict)``.
    """
    ops, coefs = [], []
    for t, P in zip(theta, Phis):
        if t > 0:
            ops.append(LowRankOperator(P))
            coefs.append(float(t))
    for b, term in zip(beta, terms):
        if gamma * b != 0:
            ops.append(term.operator())
            coefs.append(float(gamma * b))
    if not ops:
        ops, coefs = [LowRankOperator(Phis[0])], [0.0]
    res = eigensolve(ScaledSum(ops, coefs), d, which="largest", solver=solver, tol=tol, random_state=seed)
    info = {"solver": res.solver, "n_iter": res.n_iter, "residuals": res.residuals}
    return np.asarray(res.values), sign_flip(np.asarray(res.vectors)), info
