"""LOBPCG (``scipy.sparse.linalg.lobpcg``) with the algebraic-multigrid preconditioner scikit-learn uses.

For ``which="smallest"`` on an explicit sparse ``A`` the default preconditioner is pyamg's
``smoothed_aggregation_solver(A + 1e-5 I).aspreconditioner()``, exactly as
``sklearn.manifold._spectral_embedding`` (eigen_solver="amg") configures it: the shift keeps the AMG
hierarchy away from the singular Laplacian, the eigenproblem itself is solved on ``A``. Otherwise no
preconditioner, unless one is passed.

``n_iter`` is the number of LOBPCG iterations. Options: ``preconditioner`` (``"amg"``; ``"block_amg"``, the
same hierarchy with a block Jacobi V-cycle, :mod:`._block_amg`; ``None``; or a
``LinearOperator`` approximating ``A^{-1}``), ``X0`` (n, j <= block) initial columns, completed with
standard normal ones from ``random_state`` (e.g. ``sqrt(degrees)``, the known null vector of a normalized
Laplacian, as scikit-learn does), ``amg_shift`` (default 1e-5), ``amg_options`` (keyword arguments of
``pyamg.smoothed_aggregation_solver``), ``extra_vectors`` (block columns beyond k, default 0), ``dtype``
(``"float32"`` runs LOBPCG and the AMG cycles in single precision on a float32 copy of a sparse A: half
the memory traffic; residuals are still computed in float64 on A).
``tol=None`` uses ``DEFAULT_RTOL * ||A||`` as LOBPCG's residual tolerance; ``max_iter=None`` means
``DEFAULT_MAX_ITER``. scipy's LOBPCG silently switches to dense ``eigh`` when ``n < 5 * block``: that case
is refused here (use ``solver="dense"``).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, lobpcg

from ..errors import ParameterError
from ._block_amg import BlockVCycle
from ._result import DEFAULT_RTOL, RawPairs

# scikit-learn's diagonal shift before building the AMG hierarchy (see sklearn/manifold/_spectral_embedding.py).
AMG_SHIFT = 1e-5
# Iteration cap when the caller gives none (scipy's default of 20 rarely reaches 1e-6 on graphs).
DEFAULT_MAX_ITER = 1000


def amg_preconditioner(A, shift: float = AMG_SHIFT, amg_options=None, block: bool = False) -> LinearOperator:
    """pyamg smoothed-aggregation V-cycle for ``A + shift I`` as a preconditioner (scikit-learn's recipe);
    ``block=True``: the same hierarchy with the block Jacobi V-cycle of :mod:`._block_amg`."""
    from pyamg import smoothed_aggregation_solver

    if not sp.issparse(A):
        raise ParameterError("preconditioner='amg' needs an explicit sparse A; got an operator or a dense array")
    shifted = sp.csr_matrix(A + shift * sp.identity(A.shape[0], format="csr", dtype=A.dtype))
    ml = smoothed_aggregation_solver(shifted, **dict(amg_options or {}))
    return BlockVCycle(ml, dtype=A.dtype) if block else ml.aspreconditioner()


def solve_lobpcg(problem, **options) -> RawPairs:
    """k extreme eigenpairs of ``A v = lambda B v`` by LOBPCG (see module docstring)."""
    allowed = {"preconditioner", "X0", "amg_shift", "extra_vectors", "dtype", "amg_options"}
    if set(options) - allowed:
        raise ParameterError(f"solver='lobpcg' accepts options {sorted(allowed)}; got {sorted(options)}")
    n, k = problem.n, problem.k
    block = k + int(options.get("extra_vectors", 0))
    if n < 5 * block:
        raise ParameterError(
            f"solver='lobpcg' needs n >= 5 * block size = {5 * block} (scipy falls back to dense eigh below "
            f"that); got n={n}: use solver='dense'"
        )
    dtype = np.dtype(options.get("dtype", "float64"))
    if dtype not in (np.float64, np.float32):
        raise ParameterError(f"dtype must be 'float64' or 'float32'; got {dtype}")
    A = problem.A.astype(dtype) if dtype == np.float32 and sp.issparse(problem.A) else problem.A
    X = _initial_block(options.get("X0"), n, block, problem.rng).astype(dtype)
    M, precond = _preconditioner(problem, options, A)
    tol = DEFAULT_RTOL * (problem.norm_A or 1.0) if problem.tol is None else problem.tol
    maxiter = DEFAULT_MAX_ITER if problem.max_iter is None else problem.max_iter
    with warnings.catch_warnings():
        # non-convergence is detected from the residuals below and reported, not warned about
        warnings.simplefilter("ignore", UserWarning)
        values, vectors, _, rhist = lobpcg(
            A, X, B=problem.B, M=M, tol=tol, maxiter=maxiter,
            largest=problem.which == "largest", retLambdaHistory=True, retResidualNormsHistory=True,
        )
    n_iter = max(len(rhist) - 1, 0)
    final = np.asarray(rhist[-1]) if len(rhist) else np.full(block, np.inf)
    ok = bool(np.all(final[:k] <= tol)) if final.size >= k else False
    return RawPairs(values, vectors, n_iter=n_iter, solver_converged=ok,
                    info={"preconditioner": precond, "lobpcg_tol": tol, "block_size": block,
                          "max_iter": maxiter})


def _initial_block(X0, n: int, block: int, rng) -> np.ndarray:
    """The start block: ``X0`` (n, j <= block) completed with Gaussian columns, or all Gaussian."""
    if X0 is None:
        return rng.standard_normal((n, block))
    X0 = np.asarray(X0, dtype=np.float64).reshape(n, -1) if np.ndim(X0) == 1 else np.asarray(X0, dtype=np.float64)
    if X0.ndim != 2 or X0.shape[0] != n or X0.shape[1] > block:
        raise ParameterError(f"X0 must have shape ({n}, j) with j <= block size {block}; got {X0.shape}")
    return np.hstack([X0, rng.standard_normal((n, block - X0.shape[1]))])


def _preconditioner(problem, options, A):
    choice = options.get("preconditioner", "default")
    if isinstance(choice, str) and choice == "default":
        choice = "amg" if problem.which == "smallest" and sp.issparse(problem.A) else None
    if choice is None:
        return None, "none"
    if isinstance(choice, str):
        if choice not in ("amg", "block_amg"):
            raise ParameterError(f"preconditioner must be 'amg', 'block_amg', None or a LinearOperator; got {choice!r}")
        shift = float(options.get("amg_shift", AMG_SHIFT))
        return amg_preconditioner(A, shift, options.get("amg_options"), block=choice == "block_amg"), choice
    return choice, "user"
