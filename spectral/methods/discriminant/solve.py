"""The generalized eigenproblems of CK08: regularization of C (Sect. 3.2, remark 1), the scalings T
(remark 2) and the default target dimensionality (Sect. 5); signs: :func:`spectral.eigen.sign_flip`.

The problems are small and dense (d0 x d0, r x r or n x n with n in the hundreds), so the solver is the
reference ``scipy.linalg.eigh(A, B)``.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg

from eigenflow.spectral._validation import clip_int
from eigenflow.spectral.errors import NotPositiveDefiniteError, ParameterAdjustedWarning

#: remark 2: (1) T = I, (2) T_ii = 1/||z^(i)||, (3) T_ii = sqrt(|lambda_i|), (4) T_ii = sqrt(|lambda_i|)/||z^(i)||
SCALINGS = ("identity", "unit_norm", "sqrt_eigenvalue", "sqrt_eigenvalue_unit_norm")
REGULARIZATIONS = ("auto", "eps", "pca")
#: default fraction of the centered variance kept by the PCA / KPCA reduction (``pca_variance``)
DEFAULT_PCA_VARIANCE = 0.99


def resolve_regularization(regularization: str, mode: str) -> str:
    """``"auto"`` -> ``"pca"`` (linear and kernel modes) or ``"eps"`` (transductive); other values unchanged."""
    if regularization == "auto":
        return "eps" if mode == "transductive" else "pca"
    return regularization


def n_leading(variances_desc: np.ndarray, fraction: float | None) -> int:
    """Number of leading directions (variances sorted in descending order, zeros already dropped) that
    explain at least ``fraction`` of the total variance; all of them for ``fraction`` None or 1."""
    r = len(variances_desc)
    if fraction is None or fraction >= 1.0 or r == 0:
        return r
    cum = np.cumsum(variances_desc) / float(np.sum(variances_desc))
    return int(min(r, np.searchsorted(cum, fraction - 1e-12) + 1))

#: relative tolerance below which a singular value / eigenvalue counts as zero (rank decisions)
RANK_RTOL = 1e-10
#: C counts as singular when its smallest eigenvalue is below this fraction of its largest (double precision)
COND_RTOL = 1e-12
#: a direction w is uninformative when the training points' spread along it, sqrt(w^T S w) (S their covariance),
#: is below this fraction of ||w|| sqrt(lambda_max(S)): all of them project to one value (round-off level)
NULL_SPREAD_RTOL = 1e-8
#: relative tolerance deciding that an eigenvalue of DNE is negative (Sect. 5: d = number of negative ones)
NEGATIVE_RTOL = 1e-9


def ridge(B: np.ndarray, eps: float) -> np.ndarray:
    """``B + eps * s * I`` with ``s`` the mean diagonal of B (remark 1, made scale-free); ``s = 1`` if B = 0."""
    if eps == 0.0:
        return B
    s = float(np.mean(np.diag(B)))
    s = s if s > 0 else 1.0
    return B + (eps * s) * np.eye(B.shape[0])


def pca_basis(F: np.ndarray, variance: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal basis of the span of the centered rows of ``F`` (n, p) (remark 1, PCA / KPCA reduction).

    Returns ``mean (p,)`` and ``P (p, r)``, r = numerical rank of the centered data. The objectives only see
    differences ``x_i - x_j`` (L 1 = 0), so directions outside this span carry no information. ``variance``
    (in (0, 1)) keeps only the leading principal directions explaining that fraction of the variance.
    """
    mean = F.mean(axis=0)
    _, s, Vt = np.linalg.svd(F - mean, full_matrices=False)
    r = int(np.sum(s > RANK_RTOL * max(float(s[0]) if len(s) else 0.0, np.finfo(float).tiny)))
    if r == 0:
        raise NotPositiveDefiniteError("regularization='pca': the training points are all identical (rank 0)")
    r = n_leading(s[:r] ** 2, variance)
    return mean, Vt[:r].T


def generalized_eigh(A: np.ndarray, B: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """All eigenpairs of ``A v = lambda B v`` (eq. 4 / 7 / 10), ascending, B-orthonormal vectors.

    Raises :class:`NotPositiveDefiniteError` naming ``what`` when B is not positive definite.
    """
    A = 0.5 * (A + A.T)
    B = 0.5 * (B + B.T)
    b = scipy.linalg.eigvalsh(B)
    if b[0] <= COND_RTOL * max(float(b[-1]), np.finfo(float).tiny):
        raise NotPositiveDefiniteError(
            f"the constraint matrix C of {what} is not positive definite (eigenvalues in [{b[0]:.3g}, {b[-1]:.3g}]); "
            "use reg_eps > 0 (C + eps I) or regularization='pca' (CK08 Sect. 3.2, remark 1)"
        )
    return scipy.linalg.eigh(A, B)


def has_spread(spread: np.ndarray, norms: np.ndarray, scale: float) -> np.ndarray:
    """Mask (m,) of candidate directions along which the training points are not all equal.

    ``spread`` (m,) is the standard deviation of the training points' coordinates along each direction,
    ``norms`` (m,) the directions' norms and ``scale`` the largest spread a unit direction can have. With
    ``C + eps I`` a direction in the null space of the centered data solves ``A w = lambda C w`` with
    ``lambda = 0`` (A w = C w = 0): the smallest eigenvalue of MFA / LFDA-type problems, with no information
    (one constant feature of Ionosphere made it MFA's first component).
    """
    return spread > NULL_SPREAD_RTOL * norms * max(scale, np.finfo(float).tiny)


def n_negative(values: np.ndarray) -> int:
    """Number of clearly negative eigenvalues (DNE's target dimensionality, Sect. 5 after [9])."""
    tol = NEGATIVE_RTOL * max(float(np.max(np.abs(values))), np.finfo(float).tiny)
    return int(np.sum(values < -tol))


def choose_n_components(n_components, default: int, available: int, method: str) -> int:
    """Cap an explicit ``n_components`` or the paper's default at the problem dimension ``available``.

    An explicit value above ``available`` is clipped with a :class:`ParameterAdjustedWarning`; a default of 0
    (DNE: no negative eigenvalue) becomes 1 with the same warning.
    """
    if n_components is None:
        if default < 1:
            warnings.warn(ParameterAdjustedWarning(
                f"{method}: n_components=None (the number of negative eigenvalues) is 0 here; using n_components=1"
            ), stacklevel=3)
            return 1
        return min(default, available)
    return clip_int("n_components", n_components, available, bound=f"the dimension of the {method} problem")


def scaling_factors(norms: np.ndarray, values: np.ndarray, scaling: str) -> np.ndarray:
    """Diagonal of T of remark 2, shape (d,), from the column norms ``||z^(i)||`` (d,) of the unscaled
    solution and its eigenvalues ``lambda_i`` (d,)."""
    t = np.ones(len(values))
    if scaling in ("unit_norm", "sqrt_eigenvalue_unit_norm"):
        t = t / np.maximum(norms, np.finfo(float).tiny)
    if scaling in ("sqrt_eigenvalue", "sqrt_eigenvalue_unit_norm"):
        t = t * np.sqrt(np.abs(values))
    return t

