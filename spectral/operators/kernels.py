"""The one kernel module: ``k(x, y)``, blocks ``K(X, Y)`` and kernel-PCA centering (scikit-learn's meaning).

Names, parameters and defaults are those of ``sklearn.metrics.pairwise.pairwise_kernels`` (which evaluates
every named kernel except "rbf", computed here with the in-place expansion below), so "poly" means one
thing in the whole package: ``(gamma x . y + coef0)^degree`` with ``degree=3, coef0=1, gamma=1/d`` unless
given. An estimator that needs other values states them as its own defaults (DNE / MFA / LFDA's
``<x, x'>^2`` of CK08 Sect. 5 is ``degree=2, gamma=1, coef0=0``).

| kernel | formula | parameters |
|---|---|---|
| ``"linear"`` | ``x . y`` | -- |
| ``"poly"`` | ``(gamma x . y + coef0)^degree`` | ``gamma > 0`` (default ``1 / d``), integer ``degree >= 1`` (3),
``coef0 >= 0`` (1) | | ``"rbf"`` | ``exp(-gamma ||x - y||^2)`` | ``gamma > 0`` (default ``1 / d``) |
| ``"laplacian"`` | ``exp(-gamma ||x - y||_1)`` | ``gamma > 0`` (default ``1 / d``) |
| ``"cosine"`` | ``x . y / (||x|| ||y||)`` | -- (zero rows give 0) |
| ``"sigmoid"`` | ``tanh(gamma x . y + coef0)`` | ``gamma > 0`` (default ``1 / d``), ``coef0`` (1); not PSD |
| callable | ``kernel(X, Y, **kernel_params) -> (n_x, n_y)`` | anything; must return a finite array of that shape |

``coef0 >= 0`` and an integer degree keep the polynomial kernel PSD; the Nystrom map needs a PSD kernel
(``PSD_KERNELS`` or a callable). Centering (:func:`center_gram`, :func:`center_rows`) is scikit-learn's
``KernelCenterer``: ``H K H`` with ``H = I - 11^T / n`` for the training block, the training column means
for new rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from sklearn.metrics import pairwise

from eigenflow.spectral._validation import check_array_2d, check_choice, check_float, check_int
from eigenflow.spectral.errors import InputDataError, ParameterError

KERNELS = ("linear", "poly", "rbf", "laplacian", "cosine", "sigmoid")
#: kernels with a Nystrom feature map (positive semi-definite)
PSD_KERNELS = ("linear", "poly", "rbf", "laplacian", "cosine")
#: scikit-learn's keyword parameters of the named kernels
KERNEL_PARAMS = ("gamma", "degree", "coef0")


@dataclass(frozen=True)
class Kernel:
    """A validated kernel: a name from ``KERNELS`` (with its parameters) or a callable."""

    kind: str | Callable
    gamma: float | None = None
    degree: int = 3
    coef0: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)

    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """``K(X, Y)`` (n_x, n_y) float64 for already-validated 2-D float arrays."""
        return _evaluate(self, X, Y)

    def attrs(self) -> dict[str, Any]:
        """JSON-able description (named kernels only) for ``to_state``."""
        if callable(self.kind):
            raise InputDataError("a callable kernel cannot be stored: use one of " + ", ".join(KERNELS))
        return {"kernel": self.kind, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}


def make_kernel(kernel="rbf", *, gamma=None, degree=3, coef0=1.0, kernel_params=None) -> Kernel:
    """Validate a kernel specification and return a :class:`Kernel` (parameters as :func:`pairwise_kernel`)."""
    if callable(kernel):
        return Kernel(kernel, params=dict(kernel_params or {}))
    kernel = check_choice("kernel", kernel, KERNELS)
    if kernel_params:
        raise InputDataError(f"kernel_params apply to callable kernels only; got {sorted(kernel_params)}")
    gamma = None if gamma is None else check_float("gamma", gamma, low=0.0, low_inclusive=False)
    degree = check_int("degree", degree, low=1)
    coef0 = check_float("coef0", coef0) if kernel == "sigmoid" else check_float("coef0", coef0, low=0.0)
    return Kernel(kernel, gamma, degree, coef0)


def kernel_from_params(kernel="rbf", params: dict | None = None, *, name: str = "kernel_params",
                       psd: bool = False) -> Kernel:
    """A :class:`Kernel` from scikit-learn's ``(kernel, kernel_params)`` pair (``KernelPCA`` style).

    For a named kernel ``params`` may hold ``gamma``, ``degree``, ``coef0`` (missing ones take
    :func:`pairwise_kernel`'s defaults); for a callable they are its keyword arguments. ``psd=True``
    refuses kernels without a Nystrom map ("sigmoid"). ``name`` is the parameter named in errors.
    """
    params = dict(params or {})
    if callable(kernel):
        return make_kernel(kernel, kernel_params=params)
    if psd:
        check_choice("kernel", kernel, PSD_KERNELS)
    unknown = sorted(set(params) - set(KERNEL_PARAMS))
    if unknown:
        raise ParameterError(f"{name} of a named kernel must be among {list(KERNEL_PARAMS)}; got {unknown}")
    return make_kernel(kernel, **params)


def pairwise_kernel(X, Y=None, kernel="rbf", *, gamma=None, degree=3, coef0=1.0, kernel_params=None) -> np.ndarray:
    """Kernel block ``K(X, Y)``, (n_x, n_y) float64; ``Y=None`` means ``Y = X``.

    Parameters
    ----------
    X : array (n_x, d)
    Y : array (n_y, d) or None
    kernel : {"linear", "poly", "rbf", "laplacian", "cosine", "sigmoid"} or callable
    gamma : float > 0 or None
        Scale of ``poly`` / ``rbf`` / ``laplacian`` / ``sigmoid``; None means ``1 / d`` (scikit-learn's default).
    degree : int >= 1
        Degree of ``poly`` (default 3, as scikit-learn).
    coef0 : float
        Offset of ``poly`` (>= 0) and ``sigmoid`` (default 1, as scikit-learn).
    kernel_params : dict or None
        Keyword arguments of a callable kernel.
    """
    k = make_kernel(kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params)
    X = check_array_2d(X, "X")
    Y = X if Y is None else check_array_2d(Y, "Y")
    if Y.shape[1] != X.shape[1]:
        raise InputDataError(f"X and Y must have the same number of features; got {X.shape[1]} and {Y.shape[1]}")
    return k(X, Y)


def _evaluate(k: Kernel, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    if callable(k.kind):
        out = np.asarray(k.kind(X, Y, **k.params), dtype=np.float64)
        if out.shape != (X.shape[0], Y.shape[0]) or not np.all(np.isfinite(out)):
            raise InputDataError(
                f"a callable kernel must return a finite ({X.shape[0]}, {Y.shape[0]}) array; got shape {out.shape}"
            )
        return out
    gamma = k.gamma if k.gamma is not None else 1.0 / X.shape[1]
    if k.kind == "rbf":
        return _rbf(X, Y, gamma)  # faster than scikit-learn's (in place, no distance matrix copy)
    return pairwise.pairwise_kernels(X, Y, metric=k.kind, filter_params=True, gamma=gamma, degree=k.degree,
                                     coef0=k.coef0)


def _rbf(X: np.ndarray, Y: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(-gamma ||x - y||^2)`` with the expansion ``|x|^2 + |y|^2 - 2 x.y`` clipped at 0 (in place)."""
    D = X @ Y.T
    D *= -2.0
    D += np.einsum("ij,ij->i", X, X)[:, None]
    D += np.einsum("ij,ij->i", Y, Y)[None, :]
    np.maximum(D, 0.0, out=D)
    D *= -gamma
    return np.exp(D, out=D)


def center_gram(K: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Kernel-PCA centering ``H K H`` of a training Gram matrix K (n, n), ``H = I - 11^T / n``.

    Returns ``(K_c (n, n), column means (n,), grand mean)``; the statistics center new rows
    (:func:`center_rows`), as scikit-learn's ``KernelCenterer``.
    """
    col = K.mean(axis=0)
    tot = float(col.mean())
    return K - col[None, :] - col[:, None] + tot, col, tot


def center_rows(K_new: np.ndarray, col: np.ndarray, tot: float) -> np.ndarray:
    """Center a block ``k(X_new, X_train)`` (m, n) with the training statistics of :func:`center_gram`."""
    return K_new - col[None, :] - K_new.mean(axis=1, keepdims=True) + tot


def kernel_diagonal(k: Kernel, X: np.ndarray) -> np.ndarray:
    """``k(x_i, x_i)`` for every row (n,), without forming K(X, X)."""
    if callable(k.kind):
        return np.array([k(X[i:i + 1], X[i:i + 1])[0, 0] for i in range(X.shape[0])])
    sq = np.einsum("ij,ij->i", X, X)
    if k.kind == "linear":
        return sq
    if k.kind == "poly":
        gamma = k.gamma if k.gamma is not None else 1.0 / X.shape[1]
        return (gamma * sq + k.coef0) ** k.degree
    if k.kind == "cosine":
        return (sq > 0).astype(np.float64)
    if k.kind == "sigmoid":
        gamma = k.gamma if k.gamma is not None else 1.0 / X.shape[1]
        return np.tanh(gamma * sq + k.coef0)
    return np.ones(X.shape[0])
