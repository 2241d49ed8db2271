"""Validation of an eigenproblem ``A v = lambda B v`` and the normalized :class:`Problem` solvers receive."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from eigenflow.spectral._sparse import max_asymmetry
from eigenflow.spectral.errors import InputDataError, ParameterError

# Relative asymmetry ||A - A^T||_max / ||A||_max tolerated in explicit matrices (round-off of products).
SYMMETRY_RTOL = 1e-8


@dataclass(frozen=True)
class Problem:
    """A validated symmetric(-definite) eigenproblem.

    ``A`` is a float64 ndarray, a CSR matrix or a ``LinearOperator`` (n, n); ``B`` is None or the same
    kinds. ``norm_A`` / ``norm_B`` are the infinity norms of explicit matrices (upper bounds of the
    2-norms of symmetric matrices), an operator's ``norm_bound`` if it has one, else None.
    """

    A: object
    B: object
    n: int
    k: int
    which: str
    tol: float | None
    max_iter: int | None
    rng: np.random.Generator
    raise_on_failure: bool
    norm_A: float | None
    norm_B: float | None


def is_explicit(A) -> bool:
    """True for an ndarray or a scipy sparse matrix (entries available), False for operators."""
    return isinstance(A, np.ndarray) or sp.issparse(A)


def check_matrix(A, name: str, *, check_symmetry: bool = True):
    """Return ``A`` as float64 ndarray / CSR / LinearOperator after shape, finiteness and symmetry checks (the
    last one skipped with ``check_symmetry=False``, for a matrix symmetric by construction)."""
    if isinstance(A, LinearOperator):
        if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
            raise InputDataError(f"{name} must be a square (n, n) operator; got shape {A.shape}")
        if getattr(A, "symmetric", True) is False:
            raise InputDataError(f"{name} must be a symmetric operator; got one with symmetric=False")
        return A
    if sp.issparse(A):
        M = sp.csr_matrix(A, dtype=np.float64)
        data = M.data
    else:
        M = np.asarray(A)
        if M.dtype == object or not (np.issubdtype(M.dtype, np.number) or M.dtype == bool):
            raise InputDataError(f"{name} must be a real numeric matrix; got dtype {M.dtype}")
        if np.iscomplexobj(M):
            raise InputDataError(f"{name} must be real; got complex dtype {M.dtype}")
        M = M.astype(np.float64, copy=False)
        data = M
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise InputDataError(f"{name} must be a square (n, n) matrix; got shape {M.shape}")
    if not np.all(np.isfinite(data)):
        raise InputDataError(f"{name} contains NaN or inf values")
    if check_symmetry:
        _check_symmetric(M, name)
    return M


def _check_symmetric(M, name: str) -> None:
    if sp.issparse(M):
        worst = max_asymmetry(M)
        scale = float(np.abs(M.data).max()) if M.nnz else 0.0
    else:
        worst = float(np.abs(M - M.T).max()) if M.shape[0] else 0.0
        scale = float(np.abs(M).max()) if M.shape[0] else 0.0
    if worst > SYMMETRY_RTOL * max(scale, np.finfo(float).tiny):
        raise InputDataError(
            f"{name} must be symmetric; max |{name} - {name}^T| = {worst:.3g} exceeds "
            f"{SYMMETRY_RTOL:g} * max|{name}| = {SYMMETRY_RTOL * scale:.3g}"
        )


def norm_bound(A) -> float | None:
    """Infinity norm of an explicit matrix (>= its 2-norm when symmetric), an operator's bound, or None."""
    if sp.issparse(A):
        return float(abs(A).sum(axis=1).max()) if A.shape[0] else 0.0
    if isinstance(A, np.ndarray):
        return float(np.abs(A).sum(axis=1).max()) if A.shape[0] else 0.0
    bound = getattr(A, "norm_bound", None)
    return float(bound()) if callable(bound) else None


def gershgorin_bounds(A) -> tuple[float, float] | None:
    """``(lower, upper)`` enclosing the spectrum of an explicit symmetric matrix (Gershgorin discs), or an
    operator's own ``spectral_bounds()``, or None when neither is available."""
    if is_explicit(A):
        diag = A.diagonal() if sp.issparse(A) else np.diag(A)
        radius = np.asarray(abs(A).sum(axis=1)).ravel() - np.abs(diag)
        return float(np.min(diag - radius)), float(np.max(diag + radius))
    bounds = getattr(A, "spectral_bounds", None)
    return tuple(float(b) for b in bounds()) if callable(bounds) else None


def check_n_components(k, n: int, *, allow_n: bool) -> int:
    """``k`` must be an integer in [1, n - 1] (iterative solvers) or [1, n] (dense)."""
    high = n if allow_n else n - 1
    if high < 1:
        raise ParameterError(f"the problem has n={n} rows: at least {2 if not allow_n else 1} are needed")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= high:
        hint = "" if allow_n else " (iterative solvers need n_components < n; use solver='dense' for all pairs)"
        raise ParameterError(f"n_components must be an integer in [1, {high}]{hint}; got {k!r}")
    return int(k)
