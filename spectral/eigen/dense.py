"""Dense reference solver: ``scipy.linalg.eigh`` (LAPACK), exact to round-off.

Sparse matrices and operators are materialized (an operator by applying it to the identity), so the
solver refuses problems larger than ``DENSE_MAX_N`` rows. ``n_components`` may be ``n`` here. ``tol``
and ``max_iter`` do not apply (``n_iter`` is 0); the residuals are still computed and checked.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from eigenflow.spectral.eigen._result import RawPairs
from eigenflow.spectral.errors import NotPositiveDefiniteError, ParameterError

# Largest n materialized densely: an (n, n) float64 matrix of 15,000 rows is 1.8 GB.
DENSE_MAX_N = 15_000


def to_dense(M, name: str = "A", *, max_n: int = DENSE_MAX_N, sparse_limited: bool = True,
             refusal: str | None = None) -> np.ndarray:
    """Return ``M`` (ndarray, sparse or operator (n, n)) as a dense float64 ndarray, symmetrized when it
    comes from an operator; refuse n > ``max_n`` (sparse matrices too unless ``sparse_limited=False``) with
    the message ``refusal`` (default: the dense solver's)."""
    if isinstance(M, np.ndarray):
        return M
    n = M.shape[0]
    if n > max_n and (sparse_limited or not sp.issparse(M)):
        raise ParameterError(refusal or (
            f"solver='dense' materializes {name} as an (n, n) array and accepts n <= {max_n}; got "
            f"n={n}: use solver='lobpcg', 'arpack' or 'randomized'"
        ))
    if sp.issparse(M):
        return M.toarray()
    D = np.asarray(M @ np.eye(n))
    return (D + D.T) / 2


def solve_dense(problem, **options) -> RawPairs:
    """All or ``k`` extreme eigenpairs by ``scipy.linalg.eigh`` (``driver`` option passed through)."""
    driver = options.pop("driver", None)
    if options:
        raise ParameterError(f"solver='dense' accepts the option 'driver' only; got {sorted(options)}")
    A = to_dense(problem.A, "A")
    B = None if problem.B is None else to_dense(problem.B, "B")
    n, k = problem.n, problem.k
    subset = [0, k - 1] if problem.which == "smallest" else [n - k, n - 1]
    try:
        values, vectors = sla.eigh(A, B, subset_by_index=subset, driver=driver, check_finite=False)
    except np.linalg.LinAlgError as exc:
        if B is None:
            raise
        raise NotPositiveDefiniteError(
            f"B must be positive definite for the generalized problem ({exc}); pass reg > 0 or reduce_B=True"
        ) from None
    return RawPairs(values, vectors, n_iter=0, info={"driver": driver or "default"})
