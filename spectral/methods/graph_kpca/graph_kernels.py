"""Graph kernels r^dagger(L) = U r^dagger(Lambda) U^T of STG18 eq. 14 (Table II; Smola & Kondor 2003).

``r`` is a non-decreasing function of the Laplacian eigenvalues and r^dagger its pseudo-inverse; the
functions below return r^dagger(lambda) directly:

=============== ======================================= =========================================
name            r(lambda)                               r^dagger(lambda)
=============== ======================================= =========================================
"regularized"   1 + s^2 lambda                          1 / (1 + s^2 lambda)
"diffusion"     exp(s^2 lambda / 2)                     exp(-s^2 lambda / 2)
"random_walk"   (a - lambda)^-p, a >= lambda_max        (a - lambda)^p
"cosine"        1 / cos(lambda pi / 4), lambda <= 2     cos(lambda pi / 4)
"bandlimited"   low-pass: 1 below ``cutoff``, inf above 1 if lambda <= cutoff else 0
=============== ======================================= =========================================

``random_walk`` and ``cosine`` assume the spectrum of the symmetric normalized Laplacian (in [0, 2]).
Dense form: full ``eigh`` of L (small n). Low-rank form (large n): the ``n_eigs`` smallest eigenpairs
of L, which carry the largest values of every r^dagger above (all are non-increasing in lambda).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from eigenflow.spectral._validation import check_choice, check_float, check_int
from eigenflow.spectral.errors import ConvergenceError, ParameterError

GRAPH_KERNELS = ("regularized", "diffusion", "random_walk", "cosine", "bandlimited")
_DEFAULTS = {"s": 1.0, "a": 2.0, "p": 2, "cutoff": None}
#: eigenvalues of L above lambda_max by less than this are round-off, not a violated assumption
_SPECTRUM_TOL = 1e-8


def graph_kernel_params(name: str, params: dict | None) -> dict:
    """Validate the parameters of graph kernel ``name``; returns a new dict with defaults filled in."""
    check_choice("graph_kernel", name, GRAPH_KERNELS)
    params = dict(params or {})
    unknown = set(params) - set(_DEFAULTS)
    if unknown:
        raise ParameterError(f"graph_kernel_params keys must be in {sorted(_DEFAULTS)}; got {sorted(unknown)}")
    out = {**_DEFAULTS, **params}
    out["s"] = check_float("graph_kernel_params['s']", out["s"], low=0.0, low_inclusive=False)
    out["a"] = check_float("graph_kernel_params['a']", out["a"], low=0.0, low_inclusive=False)
    out["p"] = check_int("graph_kernel_params['p']", out["p"], low=1)
    if name == "bandlimited":
        if out["cutoff"] is None:
            raise ParameterError("graph_kernel='bandlimited' needs graph_kernel_params['cutoff'] (a float >= 0)")
        out["cutoff"] = check_float("graph_kernel_params['cutoff']", out["cutoff"], low=0.0)
    return out


def r_dagger(lam: np.ndarray, name: str, params: dict) -> np.ndarray:
    """r^dagger applied to Laplacian eigenvalues ``lam`` (k,) -> (k,) (STG18 Table II)."""
    lam = np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)  # round-off below 0
    lmax = float(lam.max()) if lam.size else 0.0
    if name == "regularized":
        return 1.0 / (1.0 + params["s"] ** 2 * lam)
    if name == "diffusion":
        return np.exp(-(params["s"] ** 2) * lam / 2.0)
    if name == "random_walk":
        if lmax > params["a"] + _SPECTRUM_TOL:
            raise ParameterError(
                f"graph_kernel_params['a'] must be >= the largest Laplacian eigenvalue {lmax:.4g} "
                f"for the p-step random walk kernel; got {params['a']}"
            )
        return np.clip(params["a"] - lam, 0.0, None) ** params["p"]
    if name == "cosine":
        if lmax > 2.0 + _SPECTRUM_TOL:
            raise ParameterError(
                "graph_kernel='cosine' needs Laplacian eigenvalues in [0, 2] (laplacian='symmetric'); "
                f"got largest {lmax:.4g}"
            )
        return np.cos(np.minimum(lam, 2.0) * np.pi / 4.0)
    return (lam <= params["cutoff"]).astype(np.float64)


def dense_graph_kernel(L, name: str, params: dict) -> np.ndarray:
    """r^dagger(L) as a dense (n, n) matrix from the full eigendecomposition of L (eq. 14)."""
    Ld = L.toarray() if sp.issparse(L) else np.asarray(L, dtype=np.float64)
    lam, U = la.eigh(Ld)
    g = r_dagger(lam, name, params)
    return (U * g) @ U.T


def lowrank_graph_kernel(L, name: str, params: dict, n_eigs: int, *, random_state=None):
    """r^dagger(L) ~= U_k diag(r^dagger(lambda_k)) U_k^T from the k smallest eigenpairs of sparse L.

    Returns ``(U (n, k), g (k,))`` so that the graph kernel is the low-rank operator U diag(g) U^T;
    for the band-limited kernel this is exact when ``k`` covers every eigenvalue below the cutoff.
    """
    n = L.shape[0]
    k = check_int("n_graph_eigs", n_eigs, low=1, high=n - 2)
    rng = np.random.default_rng(random_state)
    v0 = rng.standard_normal(n)
    # shift-invert at a small negative sigma: L - sigma I is positive definite, so the factorization exists
    try:
        lam, U = spla.eigsh(sp.csc_matrix(L), k=k, sigma=-1e-3, which="LM", v0=v0)
    except spla.ArpackNoConvergence as exc:  # explicit, never a silent fallback
        raise ConvergenceError(f"ARPACK did not converge for the {k} smallest Laplacian eigenpairs") from exc
    order = np.argsort(lam)
    lam, U = lam[order], U[:, order]
    if name == "bandlimited" and lam[-1] <= params["cutoff"]:
        raise ParameterError(
            f"n_graph_eigs={k} does not reach graph_kernel_params['cutoff']={params['cutoff']} "
            f"(largest computed eigenvalue {lam[-1]:.4g}): increase n_graph_eigs"
        )
    return U, r_dagger(lam, name, params)
