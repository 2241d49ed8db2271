"""Randomized block eigensolver: filtered subspace iteration with Rayleigh-Ritz (Halko, Martinsson &
Tropp 2011, Alg. 4.4 + 5.3; Zhou & Saad 2007 for the Chebyshev filter).

The problem is turned into "smallest eigenpairs of S": ``S = A`` (``which="smallest"``) or ``S = -A``
(``"largest"``). The spectrum of S must be bounded above by ``hi`` (the ``spectral_bounds=(lo, hi)`` option -- e.g.
``(0, 2)`` for a normalized Laplacian --, an operator's ``spectral_bounds()``, the tighter of the Gershgorin discs and a
fixed-step Lanczos estimate with a safety margin for an explicit matrix, or that estimate alone for a bare
operator; recorded in ``info["bound_source"]``). A Gaussian block of ``p = k + oversample`` columns (from
``random_state``) or ``X0`` is then repeatedly filtered, orthonormalized (Cholesky-QR twice) and Rayleigh-Ritz projected
until the k wanted residuals ``||A v - lambda v||`` are <= the tolerance or ``max_iter`` outer iterations ran:

* ``method="chebyshev"`` (default): degree-``degree`` Chebyshev polynomial of S that damps ``[a, hi]``,
  ``a`` = largest Ritz value of the block (updated every iteration), amplifying the wanted end;
* ``method="subspace"``: HMT power / subspace iteration with ``(hi I - S)^degree``, i.e. the largest
  eigenpairs of the shifted PSD operator (for a normalized Laplacian with ``hi = 2``: ``2I - L = I + N``);
* ``method="krylov"``: block Krylov space ``[V, F V, ..., F^degree V]`` with ``F = hi I - S`` (HMT Sect. 4.5
  / Musco & Musco 2015), Rayleigh-Ritz over the whole space, restarted from its best p Ritz vectors.

Every product with ``A`` goes through ``A @ X``; with a :class:`spectral.operators.linear.DaskRowBlockOperator`
it runs as Dask work over row blocks. Standard problems only (``B`` must be None). ``n_iter`` counts
outer iterations; ``info["matmats"]`` counts block products with A.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

from eigenflow.spectral.eigen._problem import gershgorin_bounds, is_explicit
from eigenflow.spectral.eigen._result import DEFAULT_RTOL, RawPairs
from eigenflow.spectral.errors import ParameterError

DEFAULT_MAX_ITER = 300
# Oversampling p - k: HMT recommend 5-10; 10 extra columns also separate the filter cut from lambda_k.
DEFAULT_OVERSAMPLE = 10
DEFAULT_DEGREE = {"chebyshev": 20, "subspace": 4, "krylov": 6}
# BLAS threads for the tall-skinny (n, p) products: they are memory-bound, so extra threads add nothing, and
# multi-threaded OpenBLAS slows them down many times over when a core is shared with other work (its threads
# spin-wait for each other).
BLAS_THREADS = 1
# Relative margin added to a Lanczos estimate of the top of the spectrum to make it a safe bound.
LANCZOS_BOUND_MARGIN = 1e-2
# Lanczos steps of that estimate (Zhou & Li 2011: a few steps bound the extreme eigenvalue by theta + beta).
LANCZOS_BOUND_STEPS = 30
# Largest ratio the Chebyshev filter may put between the amplification of the first and the k-th wanted
# Ritz direction in one outer iteration. A fast-decaying spectrum (kernel matrices) puts the damped interval
# [cut, hi] close to 0 and lambda_1 far outside it: a full-degree filter then amplifies v_1 ~1e37 times more
# than v_k and the k-th direction is lost to round-off; the degree is lowered to keep the ratio below this.
MAX_FILTER_SPREAD = 1e8


def solve_randomized(problem, **options) -> RawPairs:
    """k extreme eigenpairs of a symmetric A by filtered randomized subspace iteration (module docstring)."""
    allowed = {"method", "oversample", "degree", "X0", "spectral_bounds"}
    if set(options) - allowed:
        raise ParameterError(f"solver='randomized' accepts options {sorted(allowed)}; got {sorted(options)}")
    if problem.B is not None:
        raise ParameterError("solver='randomized' handles standard problems (B=None) only; use 'lobpcg', 'arpack' or 'dense'")
    method = options.get("method", "chebyshev")
    if method not in DEFAULT_DEGREE:
        raise ParameterError(f"method must be one of {sorted(DEFAULT_DEGREE)}; got {method!r}")
    n, k = problem.n, problem.k
    p = min(n, k + int(options.get("oversample", DEFAULT_OVERSAMPLE)))
    degree = int(options.get("degree", DEFAULT_DEGREE[method]))
    if degree < 1:
        raise ParameterError(f"degree must be an integer >= 1; got {degree}")
    sign = 1.0 if problem.which == "smallest" else -1.0
    hi, source = _upper_bound(problem, sign, options.get("spectral_bounds"))
    tol = DEFAULT_RTOL * (problem.norm_A or max(abs(hi), 1.0)) if problem.tol is None else problem.tol
    max_iter = DEFAULT_MAX_ITER if problem.max_iter is None else problem.max_iter
    state = _State(problem.A, sign)
    X = _start_block(options.get("X0"), n, p, problem.rng)
    with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        theta, V, SV = _rayleigh_ritz(state, orthonormalize(X))
        it, res = 0, _residuals(theta, V, SV, k)
        while np.max(res) > tol and it < max_iter:
            it += 1
            cut = min(theta[-1], hi - 1e-12 * max(abs(hi), 1.0))
            low = min(theta[0], cut - 1e-3 * (hi - cut))
            m = _chebyshev_degree(degree, theta[0], theta[k - 1], cut, hi) if method == "chebyshev" else degree
            basis = _FILTERS[method](state, V, m, cut, hi, low)
            theta, V, SV = _rayleigh_ritz(state, orthonormalize(basis), keep=p)
            res = _residuals(theta, V, SV, k)
    info = {"method": method, "block_size": p, "degree": degree, "upper_bound": hi, "bound_source": source,
            "matmats": state.matmats, "randomized_tol": tol, "max_iter": max_iter}
    return RawPairs(sign * theta[:k], V[:, :k], n_iter=it, solver_converged=bool(np.max(res) <= tol), info=info)


class _State:
    """``S = sign * A`` with a counter of block products."""

    def __init__(self, A, sign: float):
        self.A, self.sign, self.matmats = A, sign, 0

    def apply(self, X: np.ndarray) -> np.ndarray:
        self.matmats += 1
        return self.sign * np.asarray(self.A @ X)


def _start_block(X0, n: int, p: int, rng) -> np.ndarray:
    if X0 is None:
        return rng.standard_normal((n, p))
    X0 = np.asarray(X0, dtype=np.float64)
    if X0.ndim != 2 or X0.shape[0] != n or X0.shape[1] > p:
        raise ParameterError(f"X0 must have shape ({n}, j) with j <= block size {p}; got {X0.shape}")
    if X0.shape[1] < p:  # warm start: complete the block with random columns
        X0 = np.hstack([X0, rng.standard_normal((n, p - X0.shape[1]))])
    return X0


def _upper_bound(problem, sign: float, given) -> tuple[float, str]:
    """Upper bound of the spectrum of ``S = sign * A`` and where it came from."""
    if given is not None:
        lo, hi = (float(b) for b in given)
        if not lo <= hi:
            raise ParameterError(f"spectral_bounds must be (lower, upper) with lower <= upper; got {given}")
        return (hi if sign > 0 else -lo), "option"
    bounds = gershgorin_bounds(problem.A)
    if bounds is not None and not is_explicit(problem.A):
        # an operator's own bounds, without extra products (a distributed operator pays a pass per product)
        return (bounds[1] if sign > 0 else -bounds[0]), "gershgorin/operator"
    lo, hi = lanczos_bounds(problem.A, problem.n, problem.rng)
    est = hi if sign > 0 else -lo
    est += LANCZOS_BOUND_MARGIN * max(abs(est), 1.0)
    if bounds is None:
        return est, "lanczos-estimate"
    # Gershgorin can be far too loose (a kernel matrix: |lower| ~ ||A|| while the spectrum ends near 0); the
    # filter's convergence rate is the gap over the damped interval's width, so the tighter Lanczos estimate
    # of an explicit (in-memory) matrix is taken when it is below. (A slight underestimate is harmless: the
    # eigenvalues beyond it are the unwanted far end, amplified little near the interval's edge.)
    rigorous = bounds[1] if sign > 0 else -bounds[0]
    return (est, "lanczos-estimate") if est < rigorous else (rigorous, "gershgorin/operator")


def lanczos_bounds(A, n: int, rng, steps: int = LANCZOS_BOUND_STEPS) -> tuple[float, float]:
    """``(lower, upper)`` bounds of the spectrum of a symmetric operator ``A`` (n, n) from a few Lanczos steps.

    ``m = min(steps, n)`` steps with full reorthogonalization give the tridiagonal ``T_m`` and the residual
    norm ``beta_m``; ``theta_min - beta_m`` and ``theta_max + beta_m`` bound the spectrum (Zhou & Li 2011,
    "Bounding the spectrum of large Hermitian matrices", the bound used by Chebyshev-filtered subspace
    iteration). A fixed number of steps, no convergence test: unlike ARPACK on an extreme eigenvalue inside a
    cluster (a PSD kernel's many eigenvalues near 0), it cannot fail. Breakdown (an invariant subspace,
    ``beta ~ 0``) returns the exact extreme Ritz values.
    """
    m = max(1, min(int(steps), n))
    Q = np.zeros((n, m))
    alpha, beta = np.zeros(m), np.zeros(m)
    q = rng.standard_normal(n)
    q /= np.linalg.norm(q)
    used = m
    for j in range(m):
        Q[:, j] = q
        w = np.asarray(A @ q, dtype=np.float64).ravel()
        alpha[j] = q @ w
        w -= Q[:, : j + 1] @ (Q[:, : j + 1].T @ w)  # full reorthogonalization (twice is enough)
        w -= Q[:, : j + 1] @ (Q[:, : j + 1].T @ w)
        beta[j] = np.linalg.norm(w)
        if beta[j] <= 1e-12 * max(abs(alpha[: j + 1]).max(), 1e-300):
            used, beta[j] = j + 1, 0.0
            break
        q = w / beta[j]
    theta = sla.eigh_tridiagonal(alpha[:used], beta[: used - 1], eigvals_only=True)
    r = beta[used - 1]
    return float(theta[0] - r), float(theta[-1] + r)


def _chebyshev_degree(degree: int, first: float, kth: float, cut: float, hi: float) -> int:
    """Largest filter degree <= ``degree`` that keeps ``T_m(t_1) / T_m(t_k) <= MAX_FILTER_SPREAD``.

    ``t_j = (c - theta_j) / e`` maps the Ritz values ``first = theta_1 <= kth = theta_k < cut`` of S onto the
    Chebyshev variable of the interval ``[cut, hi]`` (centre c, half-width e); ``T_m(t) ~ cosh(m acosh t)``.
    """
    e, c = (hi - cut) / 2.0, (hi + cut) / 2.0
    if e <= 0:
        return degree
    t1, tk = max((c - first) / e, 1.0), max((c - kth) / e, 1.0)
    spread = np.arccosh(t1) - np.arccosh(tk)
    if spread <= 0:
        return degree
    return int(max(1, min(degree, np.floor(np.log(MAX_FILTER_SPREAD) / spread))))


def orthonormalize(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of range(Y) by Cholesky-QR applied twice; Householder QR if Y is ill-conditioned."""
    Q = Y
    for _ in range(2):
        G = Q.T @ Q
        try:
            R = sla.cholesky(G, lower=False, check_finite=False)
        except np.linalg.LinAlgError:
            return np.linalg.qr(Y)[0]
        Q = sla.solve_triangular(R, Q.T, trans="T", lower=False, check_finite=False).T
    return Q


def _rayleigh_ritz(state: _State, Q: np.ndarray, keep: int | None = None):
    """Ritz pairs of S on range(Q): ``theta`` ascending (keep,), ``V = Q U``, ``S V``."""
    SQ = state.apply(Q)
    T = Q.T @ SQ
    theta, U = sla.eigh((T + T.T) / 2, check_finite=False)
    U = U[:, :keep] if keep is not None else U
    return theta[: U.shape[1]], Q @ U, SQ @ U


def _residuals(theta, V, SV, k: int) -> np.ndarray:
    return np.linalg.norm(SV[:, :k] - V[:, :k] * theta[:k], axis=0)


def _chebyshev(state: _State, V, degree: int, cut: float, hi: float, low: float):
    """Degree-m Chebyshev filter of S damping [cut, hi], scaled to 1 at ``low`` (Zhou & Saad 2007 /
    Zhou 2010, "Chebyshev_filter_scaled"); in-place updates keep it to one extra (n, p) buffer."""
    e, c = (hi - cut) / 2.0, (hi + cut) / 2.0
    sigma = e / (low - c)
    tau = 2.0 / sigma
    X = V.copy()
    Y = state.apply(X)
    Y -= c * X
    Y *= sigma / e
    for _ in range(1, degree):
        sigma_new = 1.0 / (tau - sigma)
        Z = state.apply(Y)
        Z -= c * Y
        Z *= 2.0 * sigma_new / e
        X *= sigma * sigma_new
        Z -= X
        X, Y, sigma = Y, Z, sigma_new
    return Y


def _subspace(state: _State, V, degree: int, cut: float, hi: float, low: float):
    """``(hi I - S)^degree V``: HMT subspace iteration on the shifted PSD operator."""
    Y = V
    for _ in range(degree):
        Y = orthonormalize(hi * Y - state.apply(Y))
    return Y


def _krylov(state: _State, V, degree: int, cut: float, hi: float, low: float):
    """Block Krylov basis ``[V, F V, ..., F^degree V]``, ``F = hi I - S``, orthonormalized as it grows."""
    blocks = [V]
    Y = V
    for _ in range(degree):
        Y = hi * Y - state.apply(Y)
        basis = np.hstack(blocks)
        Y = Y - basis @ (basis.T @ Y)
        Y = orthonormalize(Y)
        blocks.append(Y)
    return np.hstack(blocks)


_FILTERS = {"chebyshev": _chebyshev, "subspace": _subspace, "krylov": _krylov}
