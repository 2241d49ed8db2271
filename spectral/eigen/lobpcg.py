"""LOBPCG (``scipy.sparse.linalg.lobpcg``) with an algebraic-multigrid preconditioner and a multilevel start.

For ``which="smallest"`` on an explicit sparse ``A`` the default pipeline is:

1. **reorder** (``reorder="rcm"``, :mod:`._reorder`): renumber the nodes by reverse Cuthill-McKee so that
   sparse x block products read neighbouring rows (cache-friendly products instead of latency-bound ones). A
   CSR ``A`` in canonical format with writeable arrays is permuted in place for the solve and restored bit for
   bit before the residuals are computed (``info["reorder_in_place"]``): one copy of the matrix during the
   solve instead of two. So ``A`` must not be read by another thread during the call;
2. **hierarchy**: pyamg's ``smoothed_aggregation_solver(A + amg_shift I, **amg_options)`` as scikit-learn's
   ``eigen_solver="amg"`` builds it (the shift keeps the hierarchy away from a singular Laplacian), with
   ``DEFAULT_AMG_OPTIONS``: local Jacobi weighting of the prolongation smoother (no spectral-radius
   estimate, a large part of the setup time otherwise), and ``strength=None``, i.e. the matrix itself as the
   strength-of-connection graph. pyamg's default, symmetric strength with ``theta=0``, keeps every stored
   entry, so its pattern is A's and standard aggregation reads only the pattern: the same hierarchy
   (the tests check it level by level: identical A_l and P_l) without building a copy of A (less setup time,
   one matrix less at the setup's peak), and ``keep=False`` (no aggregation and tentative operators kept).
   With exactly these options the finest level is built by row blocks (:mod:`._amg_setup`: the same level,
   without pyamg's whole-matrix temporaries, the eigensolve's memory peak otherwise) and pyamg builds the
   coarser ones;
3. **preconditioner** ``"block_amg"``: the block Jacobi V-cycle of :mod:`._block_amg` on that hierarchy
   (``"amg"`` is pyamg's own column-by-column V-cycle, scikit-learn's choice);
4. **start** ``"multilevel"`` (:mod:`._multilevel`): eigenvectors of the coarsest usable level,
   prolongated and refined level by level; LOBPCG on ``A`` then needs a few iterations;
5. LOBPCG on the (reordered) problem; the vectors are permuted back.

Otherwise (an operator, ``which="largest"``) no reordering, no preconditioner and a random start, unless
given. ``n_iter`` is the number of level-0 LOBPCG iterations; ``info`` records every choice.

Options: ``preconditioner`` (``"block_amg"``, ``"amg"``, ``None`` or a ``LinearOperator`` approximating
``A^{-1}``; default ``"block_amg"`` as above), ``start`` (``"multilevel"``: needs an AMG preconditioner, a
sparse/dense or no ``B``, and a hierarchy with a coarse level of >= 10 * block nodes, else it raises;
``"random"``; default: multilevel when possible, else random, the pick in ``info["start"]``), ``X0`` (n, j
<= block) initial columns (with the default start, joined to the multilevel start: the block's smallest
Rayleigh-Ritz vectors of both, ``info["start"] == "multilevel + X0"``; with a random start, completed with
standard normal columns), ``reorder``
(``"rcm"``, ``None``; default ``"rcm"`` for a sparse ``A`` with n >= ``REORDER_MIN_N`` and an explicit or
no ``B``), ``amg_shift`` (default 1e-5), ``amg_options`` (keyword arguments of
``pyamg.smoothed_aggregation_solver``, replacing ``DEFAULT_AMG_OPTIONS``), ``extra_vectors`` (block columns
beyond k, default 0), ``dtype`` (``"float32"`` runs LOBPCG and the AMG cycles in single precision on a
float32 copy of a sparse A: half the memory traffic; residuals are still computed in float64 on A).
``tol=None`` uses ``DEFAULT_RTOL * ||A||`` as LOBPCG's residual tolerance; ``max_iter=None`` means
``DEFAULT_MAX_ITER``. scipy's LOBPCG silently switches to dense ``eigh`` when ``n < 5 * block``: that case
is refused here (use ``solver="dense"``).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, lobpcg
from threadpoolctl import threadpool_limits

from eigenflow.spectral._sparse import diagonal_positions
from eigenflow.spectral.eigen import _multilevel, _reorder
from eigenflow.spectral.eigen._amg_setup import LEAN_OPTIONS, lean_hierarchy
from eigenflow.spectral.eigen._block_amg import BlockVCycle, share_transfer_operators
from eigenflow.spectral.eigen._result import DEFAULT_RTOL, RawPairs
from eigenflow.spectral.errors import ParameterError

# scikit-learn's diagonal shift before building the AMG hierarchy (see sklearn/manifold/_spectral_embedding.py).
AMG_SHIFT = 1e-5
# pyamg options of the default hierarchy (see module docstring, step 2).
DEFAULT_AMG_OPTIONS = LEAN_OPTIONS
# Iteration cap when the caller gives none (scipy's default of 20 rarely reaches 1e-6 on graphs).
DEFAULT_MAX_ITER = 1000
# Below this size a sparse problem is not reordered (it fits in cache; the reordering would not pay).
REORDER_MIN_N = 20_000
# BLAS threads inside LOBPCG: its dense work is tall-skinny (n, 3 * block) Gram products, memory-bound, so more
# threads add nothing, and OpenBLAS threads that spin-wait for a busy core slow them down many times over (as
# for the randomized solver's BLAS_THREADS).
BLAS_THREADS = 1

_OPTIONS = {"preconditioner", "X0", "amg_shift", "extra_vectors", "dtype", "amg_options", "start", "reorder"}


def amg_hierarchy(A, shift: float = AMG_SHIFT, amg_options=None):
    """pyamg smoothed-aggregation hierarchy of ``A + shift I`` (``amg_options`` replace the defaults).

    When the CSR ``A`` stores every diagonal entry (a Laplacian does), the shift is added to them in place for
    the setup and the original values are written back afterwards, bit for bit: the hierarchy's level 0 is then
    ``A`` itself (its coarse levels are those of ``A + shift I``), not a shifted copy (one copy of the Laplacian
    less at the setup's peak). Otherwise (no stored diagonal, unsorted indices, read-only
    data) the shifted copy is built. ``A`` must not be read
    by another thread during the setup.
    """
    from pyamg import smoothed_aggregation_solver

    if not sp.issparse(A):
        raise ParameterError("preconditioner='amg' / 'block_amg' needs an explicit sparse A; got an operator "
                             "or a dense array")
    options = DEFAULT_AMG_OPTIONS if amg_options is None else dict(amg_options)
    build = lean_hierarchy if options == DEFAULT_AMG_OPTIONS else (lambda M: smoothed_aggregation_solver(M, **options))
    in_place = sp.isspmatrix_csr(A) and A.has_sorted_indices and A.data.flags.writeable
    positions = diagonal_positions(A) if in_place else None
    if positions is None:
        shifted = sp.csr_matrix(A + shift * sp.identity(A.shape[0], format="csr", dtype=A.dtype))
        return build(shifted)
    original = A.data[positions]
    A.data[positions] = original + shift
    try:
        return build(A)
    finally:
        A.data[positions] = original


def accepts(n: int, k: int, options: dict) -> bool:
    """Whether :func:`solve_lobpcg` takes a problem of n rows and k pairs: ``n >= 5 * block``, block = k +
    ``extra_vectors`` (below that scipy's LOBPCG would silently run dense ``eigh``)."""
    return n >= 5 * (k + int(options.get("extra_vectors", 0)))


def solve_lobpcg(problem, **options) -> RawPairs:
    """k extreme eigenpairs of ``A v = lambda B v`` by LOBPCG (see module docstring)."""
    if set(options) - _OPTIONS:
        raise ParameterError(f"solver='lobpcg' accepts options {sorted(_OPTIONS)}; got {sorted(options)}")
    n, k = problem.n, problem.k
    block = k + int(options.get("extra_vectors", 0))
    if not accepts(n, k, options):
        raise ParameterError(
            f"solver='lobpcg' needs n >= 5 * block size = {5 * block} (scipy falls back to dense eigh below "
            f"that); got n={n}: use solver='dense'"
        )
    dtype = np.dtype(options.get("dtype", "float64"))
    if dtype not in (np.float64, np.float32):
        raise ParameterError(f"dtype must be 'float64' or 'float32'; got {dtype}")
    info = {"block_size": block}
    timings = {}
    t = time.perf_counter()
    perm = _reordering(problem, options.get("reorder", "auto"))
    A, B = problem.A, problem.B
    in_place = perm is not None and _reorder.can_permute_in_place(A)
    if in_place:
        _reorder.permute_symmetric_in_place(A, perm)
    elif perm is not None:
        A = _reorder.permute_symmetric(A, perm)
    B = _reorder.permute_symmetric(B, perm) if perm is not None else B
    info["reorder"] = "rcm" if perm is not None else "none"
    info["reorder_in_place"] = in_place
    timings["reorder"] = time.perf_counter() - t
    try:
        values, vectors, rhist = _solve_ordered(problem, options, A, B, perm, block, dtype, info, timings)
    finally:
        if in_place:  # back to the caller's order, bit for bit (finalize computes the residuals on problem.A)
            t = time.perf_counter()
            _reorder.permute_symmetric_in_place(A, _reorder.inverse_permutation(perm))
            timings["restore_order"] = time.perf_counter() - t
    if perm is not None:
        vectors = _reorder.unpermute_rows(vectors, perm)
    n_iter = max(len(rhist) - 1, 0)
    final = np.asarray(rhist[-1]) if len(rhist) else np.full(block, np.inf)
    ok = bool(np.all(final[:k] <= info["lobpcg_tol"])) if final.size >= k else False
    info["seconds"] = timings
    return RawPairs(values, vectors, n_iter=n_iter, solver_converged=ok, info=info)


def _solve_ordered(problem, options, A, B, perm, block, dtype, info, timings):
    """AMG setup and LOBPCG on the (reordered) ``A``, ``B``: ``(values, vectors in that order, residual history)``."""
    A = A.astype(dtype) if dtype == np.float32 and sp.issparse(A) else A
    t = time.perf_counter()
    M, precond, ml = _preconditioner(problem, options, A)
    info["preconditioner"] = precond
    timings["amg_setup"] = time.perf_counter() - t
    tol = DEFAULT_RTOL * (problem.norm_A or 1.0) if problem.tol is None else problem.tol
    maxiter = DEFAULT_MAX_ITER if problem.max_iter is None else problem.max_iter
    info.update({"lobpcg_tol": tol, "max_iter": maxiter})
    with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        return _run(problem, options, A, B, M, ml, perm, block, tol, maxiter, dtype, info, timings)


def _run(problem, options, A, B, M, ml, perm, block, tol, maxiter, dtype, info, timings):
    """Start block, then LOBPCG on the (reordered) problem: ``(values, vectors, residual history)``."""
    t = time.perf_counter()
    X = _start_block(problem, options, ml, A, B, block, tol, dtype, info, perm)
    timings["start"] = time.perf_counter() - t
    t = time.perf_counter()
    with warnings.catch_warnings():
        # non-convergence is detected from the residuals below and reported, not warned about
        warnings.simplefilter("ignore", UserWarning)
        values, vectors, _, rhist = lobpcg(
            A, X, B=B, M=M, tol=tol, maxiter=maxiter,
            largest=problem.which == "largest", retLambdaHistory=True, retResidualNormsHistory=True,
        )
    timings["lobpcg"] = time.perf_counter() - t
    return values, vectors, rhist


def _reordering(problem, choice):
    """The RCM permutation, or None (see the ``reorder`` option)."""
    explicit_B = problem.B is None or sp.issparse(problem.B) or isinstance(problem.B, np.ndarray)
    if isinstance(choice, str) and choice == "auto":
        use = sp.issparse(problem.A) and explicit_B and problem.n >= REORDER_MIN_N
    elif choice == "rcm":
        if not (sp.issparse(problem.A) and explicit_B):
            raise ParameterError("reorder='rcm' needs a sparse A and an explicit (or no) B; got an operator")
        use = True
    elif choice is None:
        use = False
    else:
        raise ParameterError(f"reorder must be 'auto', 'rcm' or None; got {choice!r}")
    return _reorder.rcm_permutation(problem.A) if use else None


def _start_block(problem, options, ml, A, B, block: int, tol: float, dtype, info, perm) -> np.ndarray:
    """The start block in the solve's (reordered) row order: multilevel (coarse-to-fine on the AMG hierarchy) or
    random (+ X0 columns). With ``start="auto"``, X0 and a multilevel start both possible, the ``block`` smallest
    Rayleigh-Ritz vectors of the span of both (:func:`_ritz_block`): the wanted vectors are at least as good as
    either start's, and the guard vectors come from the multilevel start instead of random columns."""
    choice = options.get("start", "auto")
    if choice not in ("auto", "multilevel", "random"):
        raise ParameterError(f"start must be 'auto', 'multilevel' or 'random'; got {choice!r}")
    X0 = options.get("X0")
    if choice == "multilevel":
        if X0 is not None:
            raise ParameterError("start='multilevel' computes the start block itself: do not pass X0")
        if ml is None:
            raise ParameterError("start='multilevel' needs preconditioner='amg' or 'block_amg' (the AMG hierarchy)")
        if isinstance(B, LinearOperator):
            raise ParameterError("start='multilevel' needs an explicit (or no) B; got an operator")
        if problem.which != "smallest":
            raise ParameterError("start='multilevel' finds the smallest eigenpairs; got which='largest'")
        if _multilevel.coarse_level(ml, block) is None:
            raise ParameterError(f"start='multilevel': the AMG hierarchy has no coarse level with >= "
                                 f"{_multilevel.COARSE_MIN_FACTOR * block} nodes (levels "
                                 f"{[lvl.A.shape[0] for lvl in ml.levels]}); use start='random'")
    elif choice == "auto":
        usable = (ml is not None and not isinstance(B, LinearOperator) and problem.which == "smallest"
                  and _multilevel.coarse_level(ml, block) is not None)
        choice = "multilevel" if usable else "random"
    given = None if X0 is None else _initial_block(X0, problem.n, block, problem.rng)
    given = given[perm] if given is not None and perm is not None else given
    info["start"] = choice if X0 is None or choice == "random" else "multilevel + X0"
    if choice == "random":
        return (given if given is not None else _initial_block(None, problem.n, block, problem.rng)).astype(dtype)
    X, report = _multilevel.multilevel_start(ml, B, block, tol, dtype, problem.rng)
    info["multilevel"] = report
    if given is None:
        return X
    j = np.asarray(X0).reshape(problem.n, -1).shape[1]  # the X0 columns of ``given``, without its random ones
    return _ritz_block(A, B, np.hstack([given[:, :j], X]), block).astype(dtype)


def _ritz_block(A, B, Y: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` smallest Rayleigh-Ritz vectors (n, size) of the span of ``Y`` (n, m >= size), its directions that
    are numerically dependent dropped (one product with ``A``)."""
    Y = np.asarray(Y, dtype=np.float64)
    BY = Y if B is None else np.asarray(B @ Y)
    w, U = np.linalg.eigh((Y.T @ BY + BY.T @ Y) / 2)
    keep = w > w.max() * 1e-12
    if keep.sum() < size:
        raise ParameterError(f"the start block spans {int(keep.sum())} directions; the solve needs {size}")
    Q = Y @ (U[:, keep] / np.sqrt(w[keep]))
    AQ = np.asarray(A @ Q)
    _, V = np.linalg.eigh((Q.T @ AQ + AQ.T @ Q) / 2)
    return Q @ V[:, :size]


def _initial_block(X0, n: int, block: int, rng) -> np.ndarray:
    """The start block: ``X0`` (n, j <= block) completed with Gaussian columns, or all Gaussian."""
    if X0 is None:
        return rng.standard_normal((n, block))
    X0 = np.asarray(X0, dtype=np.float64).reshape(n, -1) if np.ndim(X0) == 1 else np.asarray(X0, dtype=np.float64)
    if X0.ndim != 2 or X0.shape[0] != n or X0.shape[1] > block:
        raise ParameterError(f"X0 must have shape ({n}, j) with j <= block size {block}; got {X0.shape}")
    return np.hstack([X0, rng.standard_normal((n, block - X0.shape[1]))])


def _preconditioner(problem, options, A):
    """``(M, name, ml)``: the preconditioner, its name for ``info`` and the AMG hierarchy (or None)."""
    choice = options.get("preconditioner", "default")
    if isinstance(choice, str) and choice == "default":
        choice = "block_amg" if problem.which == "smallest" and sp.issparse(problem.A) else None
    if choice is None:
        return None, "none", None
    if isinstance(choice, str):
        if choice not in ("amg", "block_amg"):
            raise ParameterError(f"preconditioner must be 'amg', 'block_amg', None or a LinearOperator; got {choice!r}")
        amg_options = options.get("amg_options")
        ml = amg_hierarchy(A, float(options.get("amg_shift", AMG_SHIFT)), amg_options)
        if choice == "block_amg" and (amg_options or {}).get("symmetry", "hermitian") in ("hermitian", "symmetric"):
            share_transfer_operators(ml)
        M = BlockVCycle(ml, dtype=A.dtype) if choice == "block_amg" else ml.aspreconditioner()
        return M, choice, ml
    return choice, "user", None
