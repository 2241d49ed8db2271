"""Coarse-to-fine start block for LOBPCG on the AMG hierarchy (a cascadic multilevel eigensolver).

pyamg's smoothed-aggregation hierarchy of ``A`` has levels ``A_0 = A``, ``A_{l+1} = P_l^T A_l P_l``. With
``B_0 = B`` (or ``I``) and ``B_{l+1} = P_l^T B_l P_l``, the pencil ``(A_{l+1}, B_{l+1})`` is the Galerkin
(Rayleigh-Ritz) restriction of ``(A_l, B_l)`` to ``range(P_l)``: its smallest eigenpairs are the best
approximations of the smallest ones of level ``l`` within that subspace, and the low end of a graph
Laplacian's spectrum is smooth, which is what aggregation keeps. So:

1. solve the coarsest level ``c`` that still has ``n_c >= COARSE_MIN_FACTOR * block`` nodes exactly
   (``scipy.linalg.eigh`` of the generalized pencil when ``n_c <= DENSE_MAX_N``; LOBPCG otherwise);
2. for ``l = c - 1, ..., 1``: prolongate ``X <- P_l X`` and refine with LOBPCG on ``(A_l, B_l)``,
   preconditioned by the V-cycle of the sub-hierarchy below ``l``, to the caller's tolerance
   (at most ``LEVEL_MAX_ITER`` iterations);
3. return ``P_0 X``, the start block of the level-0 LOBPCG.

The level-0 LOBPCG then starts close to the wanted subspace and needs a few iterations instead of the tens a
random block needs on kNN-graph Laplacians. The hierarchy's ``A_l`` carry the AMG
shift (``A + s I``, s = 1e-5); that only perturbs the start block, the final solve is on ``A`` itself.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import lobpcg

from eigenflow.spectral.eigen._block_amg import BlockVCycle

# The coarsest level used must have at least this many nodes per wanted eigenpair.
COARSE_MIN_FACTOR = 10
# Levels up to this size are solved with dense generalized eigh (O(n^3), still cheap at this size and exact).
DENSE_MAX_N = 4000
# LOBPCG iterations per intermediate level (the start is already close; more would be wasted on a level
# that only provides a start block).
LEVEL_MAX_ITER = 50


def coarse_level(ml, block: int) -> int | None:
    """Index of the coarsest level with ``>= COARSE_MIN_FACTOR * block`` nodes, or None if only level 0 has."""
    sizes = [lvl.A.shape[0] for lvl in ml.levels]
    usable = [i for i, s in enumerate(sizes) if s >= COARSE_MIN_FACTOR * block]
    deepest = max(usable) if usable else 0
    return deepest if deepest > 0 else None


def multilevel_start(ml, B, block: int, tol: float, dtype, rng) -> tuple[np.ndarray, dict]:
    """Start block ``(n, block)`` for LOBPCG on level 0 of ``ml`` (see module docstring).

    ``B`` is None (identity) or the explicit sparse/dense right-hand side of level 0. Returns the block and
    a report ``{"levels": [n_l...], "coarse_level": c, "level_iterations": {l: iters}}``.
    Raises ValueError if the hierarchy has no coarse level large enough (check with :func:`coarse_level`).
    """
    c = coarse_level(ml, block)
    if c is None:
        raise ValueError(f"the AMG hierarchy has no coarse level with >= {COARSE_MIN_FACTOR * block} nodes")
    Ps = [sp.csr_matrix(lvl.P, dtype=dtype) for lvl in ml.levels[:c]]
    Bs = [None if B is None else (sp.csr_matrix(B, dtype=dtype) if sp.issparse(B) else np.asarray(B, dtype))]
    for P in Ps:
        prev = Bs[-1]
        Bs.append(sp.csr_matrix(P.T @ P if prev is None else P.T @ (prev @ P)))
    report = {"levels": [lvl.A.shape[0] for lvl in ml.levels], "coarse_level": c, "level_iterations": {}}
    X = _solve_coarsest(ml, Bs[c], c, block, tol, dtype, rng, report)
    for lvl in range(c - 1, 0, -1):
        X = Ps[lvl] @ X
        A_l = sp.csr_matrix(ml.levels[lvl].A, dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _, X, rhist = lobpcg(A_l, X, B=Bs[lvl], M=BlockVCycle(ml, dtype=dtype, start=lvl), tol=tol,
                                    maxiter=LEVEL_MAX_ITER, largest=False, retResidualNormsHistory=True)
        report["level_iterations"][lvl] = max(len(rhist) - 1, 0)
    return np.ascontiguousarray(Ps[0] @ X), report


def _solve_coarsest(ml, B_c, c: int, block: int, tol: float, dtype, rng, report) -> np.ndarray:
    A_c = ml.levels[c].A
    n_c = A_c.shape[0]
    if n_c <= DENSE_MAX_N:
        dense = A_c.toarray() if sp.issparse(A_c) else np.asarray(A_c)
        _, X = scipy.linalg.eigh(dense.astype(np.float64), B_c.toarray().astype(np.float64),
                                 subset_by_index=[0, block - 1])
        report["coarse_solver"] = "dense"
        return X.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, X, rhist = lobpcg(sp.csr_matrix(A_c, dtype=dtype), rng.standard_normal((n_c, block)).astype(dtype),
                                B=B_c, M=BlockVCycle(ml, dtype=dtype, start=c), tol=tol, maxiter=LEVEL_MAX_ITER,
                                largest=False, retResidualNormsHistory=True)
    report["coarse_solver"] = "lobpcg"
    report["level_iterations"][c] = max(len(rhist) - 1, 0)
    return X
