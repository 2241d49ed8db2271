"""The linear program of LQCL09 (eq. 11-14): learning the spectrum ``mu`` of the TSK.

With the retained eigenpairs ``(lambda_t, v_t)``, t = 1..m, and l labeled points:

    minimize    lambda^T mu + beta 1^T xi                                   (eq. 14)
    subject to  G mu >= 1 - xi,  xi >= 0,  mu >= 0,  Gamma mu >= 0 ("decay")

``G_it = v_it * sum_j e_ij v_jt`` over labeled i, j (eq. 13), ``e_ij = +1`` for the same label (i != j), ``-1``
for different labels: row i of ``G mu`` is the gap between the total learned similarity of ``x_i`` to its own
class and to the other classes, which the hinge asks to be >= 1 (eq. 11). ``Gamma`` ((m-1) x m, ``Gamma_tt = 1``,
``Gamma_t,t+1 = -eta``) is the decay constraint ``mu_t >= eta mu_{t+1}`` of eq. 8 (Hoi et al. 2006).
``constraint="none"`` drops eq. 8 (only ``mu >= 0``): see benchmarks/results/tsk.md for why.
The LP has m + l variables and l + m - 1 inequality rows; it is solved with scipy's HiGHS.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from eigenflow.spectral.errors import ConvergenceError, InputDataError, ParameterError

CONSTRAINTS = ("decay", "none")


@dataclass
class LPResult:
    """Solution of eq. 14: ``mu`` (m,), slacks ``xi`` (l,), ``objective``, ``G`` (l, m), HiGHS ``status``."""

    mu: np.ndarray
    xi: np.ndarray
    objective: float
    G: np.ndarray
    status: str


def gap_matrix(V_labeled: np.ndarray, y_codes: np.ndarray) -> np.ndarray:
    """``G`` (l, m) of eq. 13: ``G_it = v_it sum_j e_ij v_jt`` in O(l m) via class sums.

    ``sum_j e_ij v_jt = (sum over i's class, j != i) - (sum over the other classes)
    = 2 S_{c(i), t} - T_t - v_it`` with ``S_c`` the class sums and ``T`` the total sum.
    """
    V_l = np.asarray(V_labeled, dtype=np.float64)
    n_classes = int(y_codes.max()) + 1
    onehot = np.zeros((V_l.shape[0], n_classes))
    onehot[np.arange(V_l.shape[0]), y_codes] = 1.0
    class_sums = onehot.T @ V_l  # (c, m)
    total = V_l.sum(axis=0)  # (m,)
    ev = 2.0 * class_sums[y_codes] - total[None, :] - V_l  # (l, m): sum_j e_ij v_jt
    return V_l * ev


def decay_matrix(m: int, eta: float) -> sp.csr_matrix:
    """``Gamma`` ((m-1), m) of eq. 14: ``Gamma_tt = 1``, ``Gamma_t,t+1 = -eta``."""
    rows = np.arange(m - 1)
    return sp.csr_matrix((np.r_[np.ones(m - 1), -eta * np.ones(m - 1)], (np.r_[rows, rows], np.r_[rows, rows + 1])),
                         shape=(max(m - 1, 0), m))


def solve_spectrum_lp(values: np.ndarray, V_labeled: np.ndarray, y_codes: np.ndarray, *, eta: float, beta: float,
                      constraint: str = "decay", allow_zero: bool = False) -> LPResult:
    """Solve eq. 14 with ``scipy.optimize.linprog(method="highs")``.

    Parameters
    ----------
    values : ndarray (m,)
        Eigenvalues ``lambda``.
    V_labeled : ndarray (l, m)
        Rows of the eigenvector matrix at the labeled points.
    y_codes : int ndarray (l,)
        Class codes 0..c-1 of the labeled points (every class present).
    eta : float >= 1
        Decay factor of eq. 8.
    beta : float > 0
        Weight of the hinge slacks.
    constraint : {"decay", "none"}
        Whether eq. 8 is imposed.
    allow_zero : bool
        Return the zero optimum ``mu = 0`` instead of raising (the caller handles it, e.g. TSK's fallback).

    Returns
    -------
    LPResult

    Raises
    ------
    ConvergenceError
        If HiGHS does not report an optimal solution (it cannot be infeasible or unbounded: mu = 0, xi = 1 is
        feasible and the objective is >= 0).
    ParameterError
        If the optimum is mu = 0 and ``allow_zero`` is False: the learned kernel is 0 and every eq. 5 score ties. This
        happens when no feasible spectrum beats paying the slack, e.g. small beta, or eq. 8 with the trivial vector kept
        and c > 2 classes (the trivial vector's column of G is negative for every i and eq. 8 gives it the largest
        weight).
    """
    lam = np.asarray(values, dtype=np.float64)
    m, l = lam.size, V_labeled.shape[0]
    if V_labeled.shape[1] != m:
        raise InputDataError(f"V_labeled must have {m} columns (one per eigenvalue); got {V_labeled.shape[1]}")
    G = gap_matrix(V_labeled, y_codes)
    c = np.r_[lam, beta * np.ones(l)]
    A_ub = sp.hstack([sp.csr_matrix(-G), -sp.identity(l, format="csr")])  # -(G mu + xi) <= -1
    b_ub = -np.ones(l)
    if constraint == "decay" and m > 1:
        A_ub = sp.vstack([A_ub, sp.hstack([-decay_matrix(m, eta), sp.csr_matrix((m - 1, l))])])
        b_ub = np.r_[b_ub, np.zeros(m - 1)]
    res = linprog(c, A_ub=sp.csr_matrix(A_ub), b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        raise ConvergenceError(f"the TSK linear program (eq. 14) was not solved by HiGHS: {res.message}")
    mu = np.clip(res.x[:m], 0.0, None)
    xi = np.clip(res.x[m:], 0.0, None)
    if not np.any(mu > 0) and not allow_zero:
        raise ParameterError(
            f"the TSK linear program's optimum is mu = 0 (beta={beta:g}, constraint={constraint!r}, {l} labeled "
            "points): the learned kernel is zero and eq. 5 cannot classify. Use a larger beta, constraint='none' "
            "or include_trivial=False")
    return LPResult(mu, xi, float(res.fun), G, str(res.message))
