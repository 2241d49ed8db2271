"""ARPACK implicitly restarted Lanczos (``scipy.sparse.linalg.eigsh``).

* ``which="largest"``: regular mode, ``which="LA"`` (algebraically largest).
* ``which="smallest"``, explicit ``A`` (ndarray / sparse): shift-invert mode around ``sigma`` with
  ``which="LM"``: the ``k`` eigenvalues nearest ``sigma`` are the ``k`` smallest when ``sigma`` lies below
  the spectrum. Default ``sigma``: ``-1e-5 * ||A||_inf`` (scikit-learn's ``sigma=-1e-5`` scaled) when the
  Gershgorin discs prove ``A`` positive semi-definite, else the Gershgorin lower bound minus that margin
  (generalized: ``a_lo / b_lo`` from both matrices' discs; when B's discs do not prove it positive, a
  ``sigma`` must be given -- a guessed shift could return eigenvalues that are not the smallest).
  For normalized Laplacians (PSD but not diagonally dominant) pass ``sigma=-1e-5`` as scikit-learn does.
  ``A - sigma B`` is factorized once (sparse LU); each iteration is one triangular solve.
* ``which="smallest"``, operator ``A`` (no entries to factorize): regular mode, ``which="SA"`` (slow on
  clustered spectra such as Laplacians; ``info["mode"]`` says which mode ran).

``n_iter`` counts applications of the Lanczos operator (one ``OP x`` each). Options: ``sigma``,
``ncv`` (Lanczos basis size, default ``max(2k + 1, 20)``), ``v0`` (n,) start vector (default: drawn from
``random_state``), ``mode`` (``"shift_invert"`` or ``"regular"``). ``tol=None`` asks ARPACK for machine
precision (its ``tol=0``); a given ``tol`` (absolute residual) is passed as ``0.1 * tol / ||A||``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh, splu

from eigenflow.spectral.eigen._problem import gershgorin_bounds, is_explicit
from eigenflow.spectral.eigen._result import RawPairs
from eigenflow.spectral.errors import ParameterError

# Relative margin below the spectrum for the default shift (scikit-learn uses sigma = -1e-5 on Laplacians).
SHIFT_MARGIN = 1e-5


class _Counted(LinearOperator):
    """Wrap a matvec and count its calls (ARPACK's iteration count is not exposed by scipy)."""

    def __init__(self, n, apply):
        super().__init__(np.float64, (n, n))
        self._apply, self.calls = apply, 0

    def _matvec(self, x):
        self.calls += 1
        return self._apply(np.asarray(x).ravel())


def solve_arpack(problem, **options) -> RawPairs:
    """k extreme eigenpairs of ``A v = lambda B v`` by ``eigsh`` (see module docstring for the modes)."""
    allowed = {"sigma", "ncv", "v0", "mode"}
    if set(options) - allowed:
        raise ParameterError(f"solver='arpack' accepts options {sorted(allowed)}; got {sorted(options)}")
    n, k = problem.n, problem.k
    ncv = options.get("ncv") or min(n, max(2 * k + 1, 20))
    v0 = options.get("v0")
    v0 = problem.rng.standard_normal(n) if v0 is None else np.asarray(v0, dtype=np.float64).ravel()
    if v0.shape != (n,):
        raise ParameterError(f"v0 must have shape ({n},); got {v0.shape}")
    norm = problem.norm_A or 1.0
    tol = 0.0 if problem.tol is None else 0.1 * problem.tol / norm
    mode = options.get("mode") or ("shift_invert" if problem.which == "smallest" and is_explicit(problem.A) else "regular")
    kwargs = dict(k=k, ncv=ncv, v0=v0, tol=tol, maxiter=problem.max_iter, M=problem.B)
    info = {"mode": mode, "ncv": ncv}
    if mode == "shift_invert":
        sigma = options.get("sigma")
        sigma = default_sigma(problem) if sigma is None else float(sigma)
        op = _Counted(n, _shift_invert_solver(problem.A, problem.B, sigma))
        kwargs.update(sigma=sigma, which="LM", OPinv=op)
        info["sigma"] = sigma
    elif mode == "regular":
        op = _Counted(n, lambda x: np.asarray(problem.A @ x).ravel())
        kwargs.update(which="SA" if problem.which == "smallest" else "LA")
        if problem.B is not None:
            kwargs["Minv"] = _Counted(n, _shift_invert_solver(problem.B, None, 0.0))
        kwargs["A"] = op
    else:
        raise ParameterError(f"mode must be one of ['shift_invert', 'regular']; got {mode!r}")
    A = kwargs.pop("A", problem.A)
    try:
        values, vectors = eigsh(A, **kwargs)
        ok = True
    except ArpackNoConvergence as exc:
        values, vectors, ok = _pad(exc, n, k)
    return RawPairs(values, vectors, n_iter=op.calls, solver_converged=ok, info=info)


def default_sigma(problem) -> float:
    """A shift provably below the spectrum (see module docstring), else a clear error."""
    margin = SHIFT_MARGIN * (problem.norm_A or 1.0)
    a_lo = gershgorin_bounds(problem.A)[0]
    if a_lo >= 0:
        return -margin
    if problem.B is None:
        return a_lo - margin
    b_lo = gershgorin_bounds(problem.B)[0] if is_explicit(problem.B) else 0.0
    if b_lo <= 0:
        raise ParameterError(
            "solver='arpack' cannot bound the spectrum of the pencil (A, B) from below (A is not provably PSD "
            "and B is not diagonally dominant): pass sigma=<a value below the smallest eigenvalue> or use "
            "solver='lobpcg' or 'dense'"
        )
    return a_lo / b_lo - margin  # v'Av / v'Bv >= a_lo / b_lo when a_lo < 0 < b_lo


def _shift_invert_solver(A, B, sigma):
    """A function ``x -> (A - sigma B)^{-1} x`` from one LU factorization."""
    n = A.shape[0]
    if sp.issparse(A):
        Bm = sp.identity(n, format="csc") if B is None else sp.csc_matrix(B)
        lu = splu(sp.csc_matrix(A - sigma * Bm))
        return lu.solve
    Bd = np.eye(n) if B is None else (B.toarray() if sp.issparse(B) else np.asarray(B))
    factor = sla.lu_factor(np.asarray(A) - sigma * Bd)
    return lambda x: sla.lu_solve(factor, x)


def _pad(exc: ArpackNoConvergence, n: int, k: int):
    """The converged pairs of a failed run, padded with NaN to k (residual inf, converged=False)."""
    values = np.full(k, np.nan)
    vectors = np.full((n, k), np.nan)
    m = min(k, len(exc.eigenvalues))
    values[:m] = exc.eigenvalues[:m]
    vectors[:, :m] = exc.eigenvectors[:, :m]
    return values, vectors, False
