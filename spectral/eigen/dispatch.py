"""One entry point for every eigensolver: :func:`eigensolve`."""

from __future__ import annotations

import importlib

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._validation import check_choice, check_float, check_int, check_random_state
from eigenflow.spectral.eigen import generalized
from eigenflow.spectral.eigen._problem import Problem, check_matrix, check_n_components, norm_bound
from eigenflow.spectral.eigen._result import EigenResult, RawPairs, finalize
from eigenflow.spectral.errors import ParameterError

#: The one registry of eigensolvers: name -> what ``A`` must be. "matrix": the entries of A (dense, sparse or
#: an operator that ``"auto"`` / ``"dense"`` may densify); "operator": only products ``A @ V`` (any
#: LinearOperator); "data": the data X (n, d) and a kernel instead of A (one-shot Nystrom).
SOLVER_INPUTS = {
    "auto": "matrix",
    "dense": "matrix",
    "arpack": "operator",
    "lobpcg": "operator",
    "randomized": "operator",
    "nystrom": "data",
}
SOLVERS = tuple(SOLVER_INPUTS)
#: solvers of a given matrix or graph (every one but "nystrom", which needs the data)
MATRIX_SOLVERS = tuple(s for s, need in SOLVER_INPUTS.items() if need != "data")
#: solvers that only apply ``A`` (implicit operators such as :class:`spectral.operators.linear.ScaledSum`)
OPERATOR_SOLVERS = tuple(s for s, need in SOLVER_INPUTS.items() if need == "operator")
# "auto" uses dense eigh up to this size: LAPACK is exact, and its O(n^3) cost stays small below this.
AUTO_DENSE_MAX_N = 2000


def _solver_function(name: str):
    """The ``solve_<name>`` function of the solver's own module (imported on demand)."""
    module = importlib.import_module(f"{__package__}.{name}")
    return getattr(module, f"solve_{name}")


def eigensolve(A, n_components, *, B=None, which="smallest", solver="auto", tol=None, max_iter=None,
               random_state=None, raise_on_failure=True, reg=0.0, reduce_B=False, assume_symmetric=False,
               X0=None, **solver_options) -> EigenResult:
    """Extreme eigenpairs of the symmetric problem ``A v = lambda B v``.

    Parameters
    ----------
    A : ndarray (n, n), scipy sparse matrix (n, n) or LinearOperator (n, n)
        Symmetric matrix or operator (e.g. those of :mod:`spectral.operators.linear`). For ``solver="nystrom"``
        ``A`` is the data ``X`` (n, d) instead; see :mod:`spectral.eigen.nystrom`.
    n_components : int
        Number k of eigenpairs, in [1, n - 1] for the iterative solvers, [1, n] for ``"dense"``.
    B : None, ndarray, sparse matrix or LinearOperator (n, n)
        Symmetric positive definite right-hand side (CK08 eq. 4, 7, 10); None for ``B = I``.
    which : {"smallest", "largest"}
        Algebraically smallest (values ascending) or largest (values descending).
    solver : {"auto", "dense", "arpack", "lobpcg", "randomized", "nystrom"}
        ``"auto"`` picks ``"dense"`` for n <= 2000 (or k > n / 5), ``"lobpcg"`` (AMG) for a sparse A
        with ``which="smallest"``, ``"arpack"`` for a large generalized problem,
        otherwise ``"randomized"`` (never a solver that refuses the problem); ``EigenResult.solver`` says
        what ran.
    tol : float > 0 or None
        Absolute tolerance on every residual ``||A v - lambda B v||`` (unit / B-unit vectors). None:
        ``1e-6 * (||A|| + |lambda| ||B||)`` per pair (norms: infinity-norm bounds).
    max_iter : int >= 1 or None
        Iteration limit in the solver's own unit (see each solver); None: the solver's default.
    random_state : None, int or Generator
        Seed of the start vectors (via :func:`spectral._validation.check_random_state`).
    raise_on_failure : bool
        Raise :class:`spectral.errors.ConvergenceError` when a residual exceeds the tolerance or the
        solver reports failure; if False return the pairs with ``converged=False``.
    reg : float >= 0
        Solve with ``B + reg * I`` (regularization of a singular ``B``; residuals are those of the
        regularized pencil).
    reduce_B : bool
        Restrict to the range of ``B`` (CK08 Sect. 3.2 PCA/KPCA reduction) and solve the reduced
        dense problem; only with ``solver`` in {"auto", "dense"}.
    assume_symmetric : bool
        The caller guarantees that an explicit ``A`` is symmetric (e.g. a graph Laplacian built from a weight
        matrix whose symmetry was checked): its symmetry check, which builds a transposed copy of ``A``, is
        skipped. Shape and finiteness are still checked.
    X0 : ndarray (n, j) or None
        Start vectors (a warm start: e.g. the eigenvectors of a nearly equal problem solved before), passed to the
        solvers that iterate on a start block (``"lobpcg"``, ``"randomized"``) and completed with random columns;
        the other solvers need none (``EigenResult.info["X0"]`` says whether it was used).
    **solver_options
        Passed to the solver (each solver's module lists its options; unknown ones raise).

    Returns
    -------
    EigenResult
        ``values (k,)``, ``vectors (n, k)``, ``residuals (k,)``, ``converged``, ``solver``, ``n_iter``, ``info``.
    """
    solver = check_choice("solver", solver, SOLVERS)
    which = check_choice("which", which, ("smallest", "largest"))
    if solver == "nystrom":
        from eigenflow.spectral.eigen.nystrom import eigensolve_nystrom

        return eigensolve_nystrom(A, n_components, which=which, tol=tol, random_state=random_state,
                                  raise_on_failure=raise_on_failure, **solver_options)
    if not isinstance(assume_symmetric, (bool, np.bool_)):
        raise ParameterError(f"assume_symmetric must be a bool; got {assume_symmetric!r}")
    A = check_matrix(A, "A", check_symmetry=not assume_symmetric)
    n = A.shape[0]
    tol = None if tol is None else check_float("tol", tol, low=0.0, low_inclusive=False)
    max_iter = None if max_iter is None else check_int("max_iter", max_iter, low=1)
    reg = check_float("reg", reg, low=0.0)
    if not isinstance(raise_on_failure, (bool, np.bool_)):
        raise ParameterError(f"raise_on_failure must be a bool; got {raise_on_failure!r}")
    B = _check_B(B, n, reg, reduce_B)
    if solver == "auto":
        solver = _auto(A, n, which, reduce_B, B is not None, n_components, solver_options)
    if reduce_B and solver != "dense":
        raise ParameterError(f"reduce_B=True solves the reduced problem densely: use solver='dense' or 'auto'; got {solver!r}")
    k = check_n_components(n_components, n, allow_n=solver == "dense")
    problem = Problem(A, B, n, k, which, tol, max_iter, check_random_state(random_state),
                      bool(raise_on_failure), norm_bound(A), None if B is None else norm_bound(B))
    if reduce_B:
        return _solve_reduced(problem, solver_options)
    if X0 is not None and solver in WARM_STARTED:
        solver_options = {**solver_options, "X0": X0}
    raw = _solver_function(solver)(problem, **solver_options)
    if X0 is not None:  # LOBPCG joins it to its multilevel start (info["start"])
        raw.info["X0"] = "used" if solver in WARM_STARTED else f"unused ({solver} takes no start block)"
    return finalize(raw, problem, solver)


#: The solvers that take start vectors (``X0``).
WARM_STARTED = ("lobpcg", "randomized")


def _check_B(B, n: int, reg: float, reduce_B: bool):
    if not isinstance(reduce_B, (bool, np.bool_)):
        raise ParameterError(f"reduce_B must be a bool; got {reduce_B!r}")
    if B is None:
        if reg or reduce_B:
            raise ParameterError("reg and reduce_B apply to generalized problems only; B is None")
        return None
    B = check_matrix(B, "B")
    if B.shape != (n, n):
        raise ParameterError(f"B must have the shape of A ({n}, {n}); got {B.shape}")
    if reduce_B:
        if reg:
            raise ParameterError("use either reg > 0 or reduce_B=True, not both")
        return B
    B = generalized.regularize(B, reg)
    generalized.check_positive_definite(B)
    return B


def _auto(A, n: int, which: str, reduce_B: bool, generalized: bool, k, options: dict) -> str:
    """The solver of ``solver="auto"``: never one that would refuse the problem (then dense ``eigh``).

    Dense up to :data:`AUTO_DENSE_MAX_N` rows, with ``reduce_B``, or when k is too large for a block method
    (k >= n, or n < 5 x LOBPCG's block); LOBPCG (AMG) for the smallest pairs of a sparse A; the randomized solver for a
    standard problem; ARPACK for a large generalized one (the randomized solver handles B = I only).
    """
    from eigenflow.spectral.eigen.lobpcg import accepts as lobpcg_accepts

    iterative_k = isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 1 <= int(k) <= n - 1
    if n <= AUTO_DENSE_MAX_N or reduce_B or not iterative_k or not lobpcg_accepts(n, int(k), options):
        return "dense"  # (k > n / 5 pairs: a block method does not pay either)
    if which == "smallest" and sp.issparse(A):
        return "lobpcg"
    if generalized:
        return "arpack"
    return "randomized"


def _solve_reduced(problem: Problem, options) -> EigenResult:
    """CK08 Sect. 3.2: solve ``W^T A W y = lambda y`` with ``W = U_r S_r^{-1/2}`` (range of B)."""
    from eigenflow.spectral.eigen.dense import solve_dense

    W = generalized.range_basis(problem.B)
    r = W.shape[1]
    k = check_n_components(problem.k, r, allow_n=True) if problem.k > r else problem.k
    Ar = generalized.reduced_matrix(problem.A, W)
    sub = Problem(Ar, None, r, k, problem.which, None, None, problem.rng, False, norm_bound(Ar), None)
    raw = solve_dense(sub, **options)
    info = {"reduced_dimension": r, "reduce_rtol": generalized.REDUCE_RTOL}
    return finalize(RawPairs(raw.values, W @ raw.vectors, 0, True, info), problem, "dense")
