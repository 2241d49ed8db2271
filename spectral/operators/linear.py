"""Symmetric linear operators for the eigensolvers (all ``scipy.sparse.linalg.LinearOperator``).

Every operator has ``shape (n, n)``, ``dtype``, a ``symmetric`` flag, ``matvec`` / ``matmat`` and, when it
can say so cheaply, ``norm_bound()`` (an upper bound of its 2-norm) and ``spectral_bounds()`` ((lower,
upper) enclosing its spectrum); the solvers use those for tolerances and spectral shifts.

* :class:`SparseOperator` -- a scipy sparse matrix.
* :class:`LowRankOperator` -- ``Phi Phi^T`` with ``Phi`` (n, m) numpy or dask (Nystrom features).
* :class:`ScaledSum` -- ``sum_i c_i A_i`` (e.g. ``K - gamma L``, ``L_w - mu L_b + mu2 M``).
* :class:`DiagonalOperator`, :class:`IdentityOperator` -- diagonals and identity shifts.
* :class:`DaskRowBlockOperator` -- a CSR matrix or a row-chunked dask array whose product runs as one
  Dask task per row block.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from eigenflow.spectral._arrays import is_dask
from eigenflow.spectral._validation import check_int
from eigenflow.spectral.errors import InputDataError, ParameterError


class SymmetricOperator(LinearOperator):
    """Base class: a real (n, n) operator with a ``symmetric`` flag (default True)."""

    def __init__(self, n: int, dtype=np.float64, symmetric: bool = True):
        super().__init__(np.dtype(dtype), (int(n), int(n)))
        self.symmetric = bool(symmetric)

    def _matvec(self, x):
        return self._matmat(np.asarray(x).reshape(-1, 1)).ravel()

    def _adjoint(self):
        if self.symmetric:
            return self
        return super()._adjoint()

    def norm_bound(self) -> float:
        """Upper bound of the 2-norm (subclasses refine)."""
        lo, hi = self.spectral_bounds()
        return max(abs(lo), abs(hi))


def _as_2d(X) -> tuple[np.ndarray, bool]:
    X = np.asarray(X)
    return (X.reshape(-1, 1), True) if X.ndim == 1 else (X, False)


class SparseOperator(SymmetricOperator):
    """A scipy sparse matrix ``M`` (n, n) as an operator; bounds from Gershgorin discs."""

    def __init__(self, M, symmetric: bool = True):
        if not sp.issparse(M) or M.shape[0] != M.shape[1]:
            raise InputDataError(f"M must be a square scipy sparse matrix; got {type(M).__name__} {getattr(M, 'shape', '')}")
        self.M = sp.csr_matrix(M)
        super().__init__(M.shape[0], self.M.dtype, symmetric)

    def _matmat(self, X):
        return np.asarray(self.M @ X)

    def spectral_bounds(self) -> tuple[float, float]:
        diag = self.M.diagonal()
        radius = np.asarray(abs(self.M).sum(axis=1)).ravel() - np.abs(diag)
        return float(np.min(diag - radius)), float(np.max(diag + radius))

    def norm_bound(self) -> float:
        return float(abs(self.M).sum(axis=1).max())


class LowRankOperator(SymmetricOperator):
    """``scale * Phi Phi^T`` for ``Phi`` (n, m), numpy or dask; never forms the (n, n) product.

    A product costs two passes over ``Phi``: ``Phi (Phi^T X)``; with a dask ``Phi`` both run as Dask work
    over its row chunks and the result is a numpy array. Spectrum in ``[0, scale ||Phi||_F^2]``.
    """

    def __init__(self, Phi, scale: float = 1.0):
        if getattr(Phi, "ndim", None) != 2:
            raise InputDataError(f"Phi must be a 2-D (n, m) array; got {type(Phi).__name__}")
        if scale < 0:
            raise ParameterError(f"scale must be >= 0 (Phi Phi^T is PSD only then); got {scale}")
        self.Phi, self.scale = Phi, float(scale)
        self._is_dask = is_dask(Phi)
        super().__init__(Phi.shape[0], np.float64, True)

    def _matmat(self, X):
        X = np.asarray(X, dtype=np.float64)
        if self._is_dask:
            import dask.array as da

            inner = (self.Phi.T @ da.from_array(X, chunks=(self.Phi.chunks[0], X.shape[1]))).compute()
            return self.scale * np.asarray((self.Phi @ inner).compute())
        return self.scale * (self.Phi @ (self.Phi.T @ X))

    def spectral_bounds(self) -> tuple[float, float]:
        fro2 = self.Phi.map_blocks(np.square).sum().compute() if self._is_dask else np.square(self.Phi).sum()
        return 0.0, self.scale * float(fro2)


class DiagonalOperator(SymmetricOperator):
    """``diag(d)`` for ``d`` (n,)."""

    def __init__(self, d):
        self.d = np.asarray(d, dtype=np.float64).ravel()
        super().__init__(self.d.shape[0], np.float64, True)

    def _matmat(self, X):
        return self.d[:, None] * X

    def spectral_bounds(self) -> tuple[float, float]:
        return float(self.d.min()), float(self.d.max())


class IdentityOperator(DiagonalOperator):
    """The identity of size n (use in :class:`ScaledSum` for shifts ``A - sigma I``)."""

    def __init__(self, n: int):
        super().__init__(np.ones(check_int("n", n, low=1)))

    def _matmat(self, X):
        return np.array(X, dtype=np.float64, copy=True)


class ScaledSum(SymmetricOperator):
    """``sum_i c_i A_i`` over symmetric operators / matrices of one shape (e.g. ``K - gamma L``)."""

    def __init__(self, operators, coefficients):
        operators, coefficients = list(operators), [float(c) for c in coefficients]
        if not operators or len(operators) != len(coefficients):
            raise ParameterError(
                f"operators and coefficients must be non-empty and of equal length; got {len(operators)} "
                f"and {len(coefficients)}"
            )
        shapes = {tuple(op.shape) for op in operators}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            raise InputDataError(f"all operators must have one square shape; got {sorted(shapes)}")
        self.operators, self.coefficients = operators, coefficients
        symmetric = all(getattr(op, "symmetric", True) for op in operators)
        super().__init__(operators[0].shape[0], np.float64, symmetric)

    def _matmat(self, X):
        out = np.zeros((self.shape[0], X.shape[1]))
        for c, op in zip(self.coefficients, self.operators):
            out += c * np.asarray(op @ X)
        return out

    def spectral_bounds(self) -> tuple[float, float]:
        lo = hi = 0.0
        for c, op in zip(self.coefficients, self.operators):
            a, b = operator_bounds(op)
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi


def operator_bounds(op) -> tuple[float, float]:
    """``(lower, upper)`` of a matrix (Gershgorin) or an operator with ``spectral_bounds``."""
    if sp.issparse(op):
        return SparseOperator(op).spectral_bounds()
    if isinstance(op, np.ndarray):
        diag = np.diag(op)
        radius = np.abs(op).sum(axis=1) - np.abs(diag)
        return float(np.min(diag - radius)), float(np.max(diag + radius))
    bounds = getattr(op, "spectral_bounds", None)
    if bounds is None:
        raise ParameterError(f"cannot bound the spectrum of a {type(op).__name__}: give it spectral_bounds()")
    return bounds()


class DaskRowBlockOperator(SymmetricOperator):
    """``M @ X`` computed as one Dask task per row block of ``M``.

    ``M`` is a scipy sparse matrix (split here into CSR row blocks of ``block_rows`` rows) or a dask array
    (n, n) chunked by rows (its row chunks are the blocks). The product is computed with
    ``dask.compute`` and therefore runs on the active ``distributed.Client`` when there is one (the
    blocks are then shipped with the graph on every product: persist them on the cluster first or use a
    dask-array ``M`` for big clusters), and on Dask's threaded scheduler otherwise (scipy's sparse
    products release the GIL only partly, so the gain from threads is modest; ``benchmarks/bench_solvers.py``
    measures it). ``scheduler`` forces one (e.g. ``"threads"``, ``"sync"``).
    """

    def __init__(self, M, *, block_rows: int | None = None, symmetric: bool = True, scheduler=None):
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise InputDataError(f"M must be square (n, n); got shape {M.shape}")
        n = M.shape[0]
        self.scheduler = scheduler
        self._dask_array = is_dask(M)
        if self._dask_array:
            self.M = M
            self._blocks = None
        elif sp.issparse(M):
            rows = check_int("block_rows", block_rows, low=1) if block_rows is not None else max(1, -(-n // 8))
            csr = sp.csr_matrix(M)
            self._blocks = [csr[i:i + rows] for i in range(0, n, rows)]
            self.M = csr
        else:
            raise InputDataError(f"M must be a scipy sparse matrix or a dask array; got {type(M).__name__}")
        super().__init__(n, np.float64, symmetric)

    @property
    def n_blocks(self) -> int:
        """Number of row blocks (Dask tasks) per product."""
        return len(self.M.chunks[0]) if self._dask_array else len(self._blocks)

    def _matmat(self, X):
        import dask
        import dask.array as da

        X = np.ascontiguousarray(X, dtype=np.float64)
        if self._dask_array:
            Xd = da.from_array(X, chunks=(self.M.chunks[1], X.shape[1]))
            return np.asarray((self.M @ Xd).compute(scheduler=self.scheduler))
        tasks = [dask.delayed(_block_product, pure=True)(block, X, dask_key_name=f"rowblock-{i}-{id(X)}")
                 for i, block in enumerate(self._blocks)]
        return np.vstack(dask.compute(*tasks, scheduler=self.scheduler))

    def spectral_bounds(self) -> tuple[float, float]:
        if self._dask_array:
            M = self.M
            diag = da_diag(M)
            radius = abs(M).sum(axis=1).compute() - np.abs(diag)
            return float(np.min(diag - radius)), float(np.max(diag + radius))
        return SparseOperator(self.M).spectral_bounds()


def _block_product(block, X):
    return np.asarray(block @ X)


def da_diag(M) -> np.ndarray:
    """Diagonal of a square dask array as numpy (n,)."""
    import dask.array as da

    return np.asarray(da.diagonal(M).compute())
