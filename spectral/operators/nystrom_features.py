"""Nystrom kernel machinery: landmarks, the feature map ``Phi = K_nm K_mm^{-1/2}`` and the one-shot Nystrom
eigendecomposition (CK08 Sect. 4; Fowlkes, Belongie, Chung & Malik 2004).

Kernel blocks ``K(X_chunk, landmarks)`` are computed chunk by chunk: with ``dask.array.map_blocks`` in
:meth:`NystromFeatures.transform` when X is a dask array, and as one Dask task per row chunk in
:func:`nystrom_eigh` (numpy X is wrapped with ``da.from_array``), on the active Dask client if any, on the
threaded scheduler otherwise. The (m, m) pseudo-inverse square root drops eigenvalues of ``K_mm`` below
``eig_floor * max`` (default ``EIG_FLOOR``), so ``Phi`` has ``r <= m`` columns.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits
from sklearn.cluster import MiniBatchKMeans, kmeans_plusplus

from eigenflow.spectral._arrays import is_dask, take_rows
from eigenflow.spectral._validation import check_array_2d, check_choice, check_float, check_int, check_random_state, seed_int
from eigenflow.spectral.errors import InputDataError, NotPositiveDefiniteError, ParameterError
from eigenflow.spectral.operators.kernels import PSD_KERNELS, Kernel, kernel_diagonal, make_kernel

LANDMARK_METHODS = ("uniform", "kmeans++", "kmeans", "rls")
# Eigenvalues of K_mm below EIG_FLOOR * max are treated as zero (pseudo-inverse): 1e-10 keeps
# Phi's entries within ~1e5 of K's for a unit-scale kernel while dropping numerically null directions.
EIG_FLOOR = 1e-10
# K_mm with an eigenvalue below -PSD_RTOL * max is not a kernel matrix (round-off of a PSD kernel stays ~1e-15).
PSD_RTOL = 1e-6
DEFAULT_CHUNK_ROWS = 20_000
#: Landmarks when the caller gives none: all points up to this many, a uniform sample above (the (m, m)
#: eigendecomposition of K_mm stays cheap at this size, and the approximation error of the benchmarks is flat
#: beyond it).
DEFAULT_LANDMARKS = 1000
# BLAS threads of the dense (m, m) eigendecompositions: one, because OpenBLAS threads spin-wait on each other
# and make the eigh many times slower when another process keeps a core busy.
DENSE_BLAS_THREADS = 1
# With float32 kernel blocks (dtype=float32 in nystrom_eigh) the pseudo-inverse floor is raised to this:
# float32 round-off (~1e-7) divided by the floor must stay well below the approximation error.
FLOAT32_EIG_FLOOR = 1e-4
# k-means++ / k-means / ridge-leverage selection run on a uniform sample of this many rows per landmark
# (at least SAMPLE_MIN), not on the whole data: O(sample * m * d) instead of O(n * m * d).
SAMPLE_PER_LANDMARK, SAMPLE_MIN = 10, 20_000


def select_landmarks(X, n_landmarks, *, method="uniform", kernel=None, random_state=None):
    """Choose m landmarks among the rows of X (numpy or dask, (n, d)).

    Parameters
    ----------
    method : {"uniform", "kmeans++", "kmeans", "rls"}
        Uniform without replacement; k-means++ seeding (``sklearn.cluster.kmeans_plusplus``); k-means
        centres (``MiniBatchKMeans``, not data points); ridge-leverage-score sampling (Alaoui & Mahoney
        2015), scores from :func:`ridge_leverage_scores`, then m draws without replacement proportional
        to the scores.
    kernel : Kernel or None
        Needed by ``"rls"`` (default RBF with gamma = 1/d).

    Returns
    -------
    landmarks : ndarray (m, d) float64
    indices : ndarray (m,) int64 into X, or None for k-means centres
    """
    method = check_choice("method", method, LANDMARK_METHODS)
    n = X.shape[0]
    m = check_int("n_landmarks", n_landmarks, low=1, high=n)
    rng = check_random_state(random_state)
    if method == "uniform":
        idx = np.sort(rng.choice(n, size=m, replace=False))
        return take_rows(X, idx), idx
    pool = np.sort(rng.choice(n, size=min(n, max(SAMPLE_MIN, SAMPLE_PER_LANDMARK * m)), replace=False))
    Xp = take_rows(X, pool)
    if method == "kmeans++":
        centres, local = kmeans_plusplus(Xp, m, random_state=seed_int(rng))
        return centres.astype(np.float64), pool[local]
    if method == "kmeans":
        km = MiniBatchKMeans(n_clusters=m, random_state=seed_int(rng), n_init=1).fit(Xp)
        return km.cluster_centers_.astype(np.float64), None
    kern = kernel if kernel is not None else make_kernel("rbf")
    local = _ridge_leverage_sample(Xp, m, kern, rng)
    return Xp[local], pool[local]


def _ridge_leverage_sample(Xp: np.ndarray, m: int, kernel, rng) -> np.ndarray:
    """m row indices of Xp drawn without replacement proportionally to :func:`ridge_leverage_scores`."""
    scores = ridge_leverage_scores(Xp, m, kernel, rng)
    return np.sort(rng.choice(Xp.shape[0], size=m, replace=False, p=scores / scores.sum()))


def ridge_leverage_scores(Xp: np.ndarray, m: int, kernel, rng) -> np.ndarray:
    """Approximate ridge leverage scores (n_pool,) ``(k_ii - k_iP (K_PP + lambda I)^{-1} k_Pi) / lambda``.

    P is a uniform pilot set of ``min(n_pool, 2m)`` rows, ``lambda = trace(K_pool) / m`` (so that the
    effective dimension ``sum_i s_i / (s_i + lambda)`` is at most m). Points the pilot explains badly
    (isolated ones) get the largest scores, up to ``k_ii / lambda``.
    """
    n_pool = Xp.shape[0]
    pilot = rng.choice(n_pool, size=min(n_pool, 2 * m), replace=False)
    K_pp = kernel(Xp[pilot], Xp[pilot])
    K_xp = kernel(Xp, Xp[pilot])
    k_diag = kernel_diagonal(kernel, Xp)
    lam = max(k_diag.sum() / m, np.finfo(float).tiny)
    sol = sla.solve(K_pp + lam * np.eye(len(pilot)), K_xp.T, assume_a="pos")
    return np.maximum((k_diag - np.einsum("ij,ji->i", K_xp, sol)) / lam, 1e-12)


class NystromFeatures:
    """Nystrom feature map ``Phi(x) = k(x, landmarks) K_mm^{-1/2}`` so that ``Phi Phi^T ~ K``.

    Parameters
    ----------
    kernel, gamma, degree, coef0, kernel_params :
        As :func:`spectral.operators.kernels.pairwise_kernel`.
    n_landmarks : int >= 1
    method : {"uniform", "kmeans++", "kmeans", "rls"}
        Landmark selection (:func:`select_landmarks`).
    eig_floor : float in [0, 1)
        Relative floor of the pseudo-inverse of ``K_mm``.
    rank : int >= 1 or None
        Keep at most the ``rank`` leading eigenpairs of ``K_mm`` (after the floor): Phi is (n, r),
        ``r = min(rank, #eigenvalues above the floor)``. None keeps every one above the floor.
    chunk_rows : int
        Rows per chunk when X is numpy.
    random_state : None, int or Generator

    Attributes
    ----------
    landmarks_ : (m, d); landmark_indices_ : (m,) or None; eigenvalues_ : (r,) kept eigenvalues of K_mm;
    normalization_ : (m, r) ``U_r diag(s_r^{-1/2})`` (``K_mm^+ = N N^T``); n_components_ : r.
    """

    def __init__(self, kernel="rbf", n_landmarks=100, *, method="uniform", gamma=None, degree=3, coef0=1.0,
                 kernel_params=None, eig_floor=EIG_FLOOR, rank=None, chunk_rows=DEFAULT_CHUNK_ROWS,
                 random_state=None):
        self.kernel, self.n_landmarks, self.method = kernel, n_landmarks, method
        self.gamma, self.degree, self.coef0, self.kernel_params = gamma, degree, coef0, kernel_params
        self.eig_floor, self.rank, self.chunk_rows, self.random_state = eig_floor, rank, chunk_rows, random_state

    @classmethod
    def from_kernel(cls, kernel: Kernel, n_landmarks, **options) -> "NystromFeatures":
        """An unfitted map of a validated :class:`spectral.operators.kernels.Kernel` (e.g. from ``kernel_from_params``)."""
        return cls(kernel.kind, n_landmarks, gamma=kernel.gamma, degree=kernel.degree, coef0=kernel.coef0,
                   kernel_params=kernel.params or None, **options)

    def _kernel(self):
        if not callable(self.kernel):
            check_choice("kernel", self.kernel, PSD_KERNELS)
        return make_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                           kernel_params=self.kernel_params)

    def fit(self, X) -> "NystromFeatures":
        """Choose landmarks among the rows of X (numpy or dask (n, d)) and factor ``K_mm``."""
        if not is_dask(X):
            X = check_array_2d(X, "X")
        check_float("eig_floor", self.eig_floor, low=0.0, high=1.0, high_inclusive=False)
        check_int("chunk_rows", self.chunk_rows, low=1)
        if self.rank is not None:
            check_int("rank", self.rank, low=1, high=self.n_landmarks)
        kern = self._kernel()
        landmarks, idx = select_landmarks(X, self.n_landmarks, method=self.method, kernel=kern,
                                          random_state=self.random_state)
        self._set_landmarks(landmarks, idx, kern)
        return self

    def _set_landmarks(self, landmarks, idx, kern) -> None:
        self.kernel_ = kern
        self.landmarks_, self.landmark_indices_ = landmarks, idx
        with threadpool_limits(limits=DENSE_BLAS_THREADS, user_api="blas"):
            s, U = sla.eigh(kern(landmarks, landmarks), driver="evd")  # all pairs: divide and conquer
        if s[-1] <= 0:
            raise InputDataError(f"K(landmarks, landmarks) has no positive eigenvalue (largest {s[-1]:.3g})")
        if s[0] < -PSD_RTOL * s[-1]:
            raise NotPositiveDefiniteError(
                f"K(landmarks, landmarks) has a negative eigenvalue {s[0]:.3g} (largest {s[-1]:.3g}): the kernel "
                "is not positive semidefinite, it has no Nystrom map"
            )
        keep = s > self.eig_floor * s[-1]
        if self.rank is not None:
            keep &= np.arange(len(s)) >= len(s) - self.rank  # the rank leading pairs (s ascending)
        self.eigenvalues_ = s[keep][::-1]
        self.normalization_ = (U[:, keep] / np.sqrt(s[keep]))[:, ::-1]
        self.n_components_ = int(keep.sum())

    def kernel_block(self, X_chunk: np.ndarray) -> np.ndarray:
        """``K(X_chunk, landmarks)`` (rows, m) in X_chunk's float dtype."""
        L = self.landmarks_.astype(X_chunk.dtype, copy=False)
        return self.kernel_(X_chunk, L)

    def transform(self, X):
        """``Phi = K(X, landmarks) K_mm^{-1/2}``: numpy (n, r) for numpy X, a dask array for dask X."""
        if not hasattr(self, "normalization_"):
            raise ParameterError("NystromFeatures is not fitted: call fit(X) first")
        N = self.normalization_
        if is_dask(X):
            if X.shape[1] != self.landmarks_.shape[1]:
                raise InputDataError(f"X must have {self.landmarks_.shape[1]} features; got {X.shape[1]}")
            Xc = X.rechunk({1: -1}).astype(np.float64)
            return Xc.map_blocks(lambda b: self.kernel_block(b) @ N, chunks=(Xc.chunks[0], (N.shape[1],)),
                                 dtype=np.float64)
        X = check_array_2d(X, "X")
        if X.shape[1] != self.landmarks_.shape[1]:
            raise InputDataError(f"X must have {self.landmarks_.shape[1]} features; got {X.shape[1]}")
        step = self.chunk_rows
        return np.vstack([self.kernel_block(X[i:i + step]) @ N for i in range(0, X.shape[0], step)])

    def fit_transform(self, X):
        """``fit(X).transform(X)``."""
        return self.fit(X).transform(X)

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` for :mod:`storage.models` (named kernels only; no pickle)."""
        arrays = {"landmarks": self.landmarks_, "normalization": self.normalization_, "eigenvalues": self.eigenvalues_}
        if self.landmark_indices_ is not None:
            arrays["landmark_indices"] = np.asarray(self.landmark_indices_, dtype=np.int64)
        attrs = {"class": "NystromFeatures", **self.kernel_.attrs(), "n_landmarks": int(self.n_landmarks),
                 "method": self.method, "eig_floor": float(self.eig_floor), "chunk_rows": int(self.chunk_rows),
                 "rank": None if self.rank is None else int(self.rank)}
        return arrays, attrs

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> "NystromFeatures":
        """Rebuild a fitted map from :meth:`to_state` output."""
        if attrs.get("class") != "NystromFeatures":
            raise InputDataError(f"state is not a NystromFeatures state: class={attrs.get('class')!r}")
        self = cls(attrs["kernel"], attrs["n_landmarks"], method=attrs["method"], gamma=attrs["gamma"],
                   degree=attrs["degree"], coef0=attrs["coef0"], eig_floor=attrs["eig_floor"],
                   rank=attrs.get("rank"), chunk_rows=attrs["chunk_rows"])
        self.kernel_ = self._kernel()
        self.landmarks_ = np.asarray(arrays["landmarks"], dtype=np.float64)
        self.landmark_indices_ = arrays.get("landmark_indices")
        self.normalization_ = np.asarray(arrays["normalization"], dtype=np.float64)
        self.eigenvalues_ = np.asarray(arrays["eigenvalues"], dtype=np.float64)
        self.n_components_ = self.normalization_.shape[1]
        return self


def nystrom_eigh(X, n_components, features: NystromFeatures, *, normalized=False, dtype=np.float64,
                 chunk_rows=DEFAULT_CHUNK_ROWS):
    """One-shot Nystrom eigendecomposition of the kernel matrix of X (CK08 Sect. 4; Fowlkes et al.).

    With ``C = K(X, landmarks)`` (n, m) and ``A = K_mm = N^{-T} N^{-1}`` (pseudo-inverse ``A^+ = N N^T``),
    ``K ~ C A^+ C^T``. For landmarks among the points, ``C^T C = A^2 + B B^T`` so
    ``S = N^T C^T C N`` is Fowlkes' ``A + A^{-1/2} B B^T A^{-1/2}`` (CK08: S = Q Lambda Q^T) and
    ``V = C N Q Lambda^{-1/2}`` (= ``[A; B^T] A^{-1/2} Q Lambda^{-1/2}``) has orthonormal columns with
    ``V Lambda V^T = C A^+ C^T``. ``normalized=True`` decomposes ``D^{-1/2} C A^+ C^T D^{-1/2}`` with the
    Nystrom row sums ``d = C A^+ C^T 1`` (Fowlkes et al. eq. for d_hat: ``a_r + b_r``,
    ``b_c + B^T A^{-1} b_r``), the normalized affinity of spectral embedding (its top eigenvector is
    ``~ sqrt(d)``, eigenvalue 1). Two passes over X (three when normalized), each computing the kernel
    blocks per chunk as Dask tasks; ``V`` is the out-of-sample embedding of every row. With
    ``dtype=float32`` the kernel blocks and the Gram update run in single precision and eigenvalues of
    ``K_mm`` below ``FLOAT32_EIG_FLOOR * max`` are dropped as well.

    Returns
    -------
    values : (k,) largest eigenvalues, descending; vectors : (n, k);
    degrees : (n,) Nystrom row sums ``d`` (normalized) or None
    """
    import dask.array as da

    N = features.normalization_
    if np.dtype(dtype) == np.float32:
        # float32 blocks carry ~1e-7 relative noise, amplified by 1 / s_min through N: keep s >= 1e-4 max
        N = N[:, features.eigenvalues_ >= FLOAT32_EIG_FLOOR * features.eigenvalues_[0]]
    k = check_int("n_components", n_components, low=1, high=N.shape[1])
    Xd = X if is_dask(X) else da.from_array(np.asarray(X), chunks=(chunk_rows, X.shape[1]))
    Xd = Xd.rechunk({1: -1}).astype(dtype)
    z = None
    if normalized:
        col_sums = _reduce(Xd, lambda b: features.kernel_block(b).sum(axis=0, dtype=np.float64))
        z = N @ (N.T @ col_sums)  # A^+ C^T 1, so that d = C z
    gram = _reduce(Xd, lambda b: _weighted_gram(features.kernel_block(b), z))
    gram = (gram + gram.T) / 2
    S = N.T @ gram @ N
    r = S.shape[0]
    with threadpool_limits(limits=DENSE_BLAS_THREADS, user_api="blas"):
        lam, Q = sla.eigh((S + S.T) / 2, subset_by_index=[r - k, r - 1])  # only the top k of the (r, r) matrix
    lam, Q = lam[::-1], Q[:, ::-1]
    if lam[-1] <= 0:
        raise InputDataError(f"the Nystrom matrix S has non-positive eigenvalues among the top {k}: {lam}")
    W = N @ (Q / np.sqrt(lam))  # (m, k): V = D^{-1/2} C W

    W_b, z_b = W.astype(dtype), None if z is None else z.astype(dtype)

    def embed(b):  # (rows, k + 1): V rows and the Nystrom degrees (1 when not normalized)
        C = features.kernel_block(b)  # products in the block's dtype, results in float64 (no (rows, m) copy)
        d = (C @ z_b).astype(np.float64) if z is not None else np.ones(C.shape[0])
        return np.hstack([(C @ W_b).astype(np.float64) / np.sqrt(d)[:, None], d[:, None]])

    out = Xd.map_blocks(embed, chunks=(Xd.chunks[0], (k + 1,)), dtype=np.float64).compute()
    return lam, out[:, :k], (out[:, k] if normalized else None)


def _weighted_gram(C: np.ndarray, z) -> np.ndarray:
    """``C^T diag(w) C`` (m, m), ``w = 1 / (C z)`` (normalized) or 1, by a symmetric rank-k update."""
    if z is not None:
        d = (C @ z.astype(C.dtype)).astype(np.float64)  # in C's dtype: no (rows, m) float64 copy of C
        if np.any(d <= 0):
            raise InputDataError(
                f"Nystrom row sums d = C A^+ C^T 1 are not all positive (min {d.min():.3g}): the normalized "
                "variant needs more landmarks or a wider kernel"
            )
        C = C / np.sqrt(d).astype(C.dtype)[:, None]
    syrk = sla.blas.get_blas_funcs("syrk", (C,))
    G = syrk(1.0, C, trans=1, lower=0)  # upper triangle of C^T C
    return np.triu(G) + np.triu(G, 1).T


def _reduce(Xd, fn):
    """Sum of ``fn(block)`` over the row blocks of a dask array, as Dask tasks in batches."""
    import dask

    blocks = Xd.to_delayed().ravel()
    total = None
    batch = 8
    for i in range(0, len(blocks), batch):
        parts = dask.compute(*[dask.delayed(fn)(b) for b in blocks[i:i + batch]])
        for part in parts:
            total = np.asarray(part, dtype=np.float64) if total is None else total + part
    return total
