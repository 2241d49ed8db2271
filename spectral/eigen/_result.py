"""The result type shared by every eigensolver and the post-processing every solver goes through.

Every solver returns raw ``(values, vectors)``; :func:`finalize` then (1) normalizes the vectors (unit
2-norm, or ``V^T B V = I`` for generalized problems), (2) sorts the pairs (ascending for ``"smallest"``,
descending for ``"largest"``), (3) fixes the signs (largest-|.| entry of each vector positive, as
scikit-learn's ``_deterministic_vector_sign_flip``), (4) computes the residuals ``||A v - lambda B v||_2``
and (5) decides convergence against the tolerance. Nothing is ever silently replaced by another solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.errors import ConvergenceError

# Default relative tolerance on the normwise backward error r_i / (||A|| + |lambda_i| ||B||) when the
# caller gives no ``tol``: 1e-6 is well above what dense eigh reaches (~1e-15) and below what any
# embedding downstream can see.
DEFAULT_RTOL = 1e-6


@dataclass(frozen=True)
class EigenResult:
    """Eigenpairs computed by :func:`spectral.eigen.eigensolve`.

    Attributes
    ----------
    values : ndarray (k,)
        Eigenvalues, ascending for ``which="smallest"``, descending for ``which="largest"``.
    vectors : ndarray (n, k)
        Eigenvectors as columns; unit 2-norm (standard problem) or ``V^T B V = I`` (generalized);
        the largest-|.| entry of each column is positive.
    residuals : ndarray (k,)
        Absolute residual norms ``||A v_i - lambda_i B v_i||_2`` of the returned (normalized) vectors.
        ``info["relative_residuals"]`` holds ``residuals / (||A|| + |lambda_i| ||B||)`` with the norm
        estimates of ``info["norm_A"]``, ``info["norm_B"]``.
    converged : bool
        True when the solver reported success AND every residual is within the tolerance
        (``info["tol"]``, absolute, per pair).
    solver : str
        The solver that actually ran (``"auto"`` reports its pick).
    n_iter : int
        Iterations of the solver (its own unit, see each solver's docstring; 0 for ``"dense"``).
    info : dict
        Solver-specific details (tolerance used, operator applications, shifts, ...).
    """

    values: np.ndarray
    vectors: np.ndarray
    residuals: np.ndarray
    converged: bool
    solver: str
    n_iter: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RawPairs:
    """What a solver hands back before :func:`finalize`: unsorted pairs plus its own success flag."""

    values: np.ndarray
    vectors: np.ndarray
    n_iter: int
    solver_converged: bool = True
    info: dict[str, Any] = field(default_factory=dict)


def normalize(vectors: np.ndarray, B) -> np.ndarray:
    """Scale columns to unit 2-norm (``B is None``) or unit B-norm ``v^T B v = 1``."""
    if B is None:
        norms = np.linalg.norm(vectors, axis=0)
    else:
        norms = np.sqrt(np.abs(np.einsum("ij,ij->j", vectors, np.asarray(B @ vectors))))
    norms[norms == 0] = 1.0
    return vectors / norms


def residual_norms(A, B, values: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``||A v_i - lambda_i B v_i||_2`` for every column, ``(k,)``; NaN columns give ``inf``."""
    finite = np.isfinite(values) & np.isfinite(vectors).all(axis=0)
    out = np.full(values.shape, np.inf)
    if not finite.any():
        return out
    V = vectors[:, finite]
    AV = np.asarray(A @ V)
    BV = V if B is None else np.asarray(B @ V)
    out[finite] = np.linalg.norm(AV - BV * values[finite], axis=0)
    return out


def finalize(raw: RawPairs, problem, solver: str) -> EigenResult:
    """Normalize, sort, sign-fix, compute residuals and check convergence (see module docstring)."""
    values = np.asarray(raw.values, dtype=np.float64).copy()
    vectors = normalize(np.asarray(raw.vectors, dtype=np.float64), problem.B)
    order = pair_order(values, problem.which)
    values, vectors = values[order][: problem.k], vectors[:, order][:, : problem.k]
    vectors = sign_flip(vectors)
    residuals = residual_norms(problem.A, problem.B, values, vectors)
    return conclude(values, vectors, residuals, raw, problem, solver)


def pair_order(values: np.ndarray, which: str) -> np.ndarray:
    """Order of the pairs ``(k,)``: ascending (``"smallest"``) or descending (``"largest"``), non-finite last."""
    order = np.argsort(values, kind="stable")
    if which == "largest":
        order = order[::-1]
    return np.array(order[np.isfinite(values[order])].tolist() + order[~np.isfinite(values[order])].tolist(),
                    dtype=np.int64)


def conclude(values: np.ndarray, vectors: Any, residuals: np.ndarray, raw: RawPairs, problem, solver: str):
    """Steps (5) of :func:`finalize` for pairs already normalized, sorted and sign-fixed: the tolerance per pair,
    the convergence flag, the info and the failure (``ConvergenceError`` when asked). ``vectors`` is the
    ``(n, k)`` array, or what the caller holds instead (row parts on workers, :mod:`._sharded_vectors`)."""
    norm_A = problem.norm_A if problem.norm_A is not None else max(1.0, float(np.nanmax(np.abs(values))))
    norm_B = 1.0 if problem.B is None else problem.norm_B
    denom = norm_A + np.abs(values) * norm_B
    tol_each = problem.tol if problem.tol is not None else DEFAULT_RTOL * denom
    tol_each = np.broadcast_to(np.asarray(tol_each, dtype=np.float64), residuals.shape)
    converged = bool(raw.solver_converged and np.all(residuals <= tol_each))
    info = dict(raw.info)
    info.update(
        tol=float(problem.tol) if problem.tol is not None else f"{DEFAULT_RTOL} * (norm_A + |lambda| norm_B)",
        relative_residuals=residuals / denom,
        norm_A=float(norm_A),
        norm_B=float(norm_B),
        max_iter=raw.info.get("max_iter", problem.max_iter),
        solver_reported_success=bool(raw.solver_converged),
    )
    result = EigenResult(values, vectors, residuals, converged, solver, int(raw.n_iter), info)
    if not converged and problem.raise_on_failure:
        raise ConvergenceError(_failure_message(result, tol_each))
    return result


def _failure_message(result: EigenResult, tol_each: np.ndarray) -> str:
    worst = int(np.argmax(result.residuals - tol_each)) if len(result.residuals) else 0
    tol = result.info["tol"]
    return (
        f"eigensolver {result.solver!r} did not converge: worst residual ||Av - lambda Bv|| = "
        f"{result.residuals[worst]:.3g} for pair {worst} (lambda = {result.values[worst]:.6g}) exceeds "
        f"the tolerance {tol_each[worst]:.3g} (tol={tol}) after {result.n_iter} iterations "
        f"(max_iter={result.info['max_iter']}, solver reported success: "
        f"{result.info['solver_reported_success']}); pass a larger max_iter or tol, another solver, "
        "or raise_on_failure=False to get the unconverged pairs with converged=False"
    )
