"""At-scale fitting of the linear and Nyström-kernel variants of CK08 (Sect. 4).

Only p x p matrices are ever formed (p = d0 for the linear variants, p = rank of K_mm <= n_landmarks for the
Nyström ones): ``F^T (D^(2) - W^(2)) F`` is accumulated over row blocks of a (Dask or NumPy) array with a sparse
W^(2); the label terms only involve the l labeled points, with sparse W^I / W^E (per-class exact kNN) and the
dense ``-1/n`` part of LFDA's W^bet written in closed form. No n x n (or n x m) matrix is built.

>>> est = fit_at_scale(LFDA(gamma=1.0), X_dask, y)            # doctest: +SKIP
>>> Z_chunk = est.transform(X_chunk)                          # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._arrays import row_block, take_rows, to_numpy
from eigenflow.spectral._validation import check_int, check_random_state
from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.methods.discriminant import graphs, solve
from eigenflow.spectral.methods.discriminant._kernel import landmark_map, resolve_kernel
from eigenflow.spectral.neighbours.index import KNNIndex
from eigenflow.spectral.neighbours.knn import knn_graph

#: rows per block of the accumulation: 65536 x 2000 float64 features are ~1 GB, so the kernel path uses fewer
DEFAULT_CHUNK_ROWS = 65536
KERNEL_CHUNK_ROWS = 8192
#: the kernel path materializes the Nystrom features Phi (n, r) as float32 when they fit in this many bytes
FEATURE_MEMORY_BYTES = 4 * 2**30


def graph_gram(X, W: sp.csr_matrix, feature_fn=None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> np.ndarray:
    """``F^T (D - W) F`` (p, p) for ``F = feature_fn(X)`` accumulated over row blocks of ``X`` (n, d0).

    Each block needs its own rows and the rows of its graph neighbours (a sorted gather), so memory is
    O(chunk_rows * (1 + k) * p).
    """
    W = sp.csr_matrix(W)
    deg = np.asarray(W.sum(axis=1)).ravel()
    f = (lambda Z: Z) if feature_fn is None else feature_fn  # noqa: E731
    G = None
    for i0 in range(0, W.shape[0], chunk_rows):
        i1 = min(i0 + chunk_rows, W.shape[0])
        Wb = W[i0:i1]
        cols = np.unique(Wb.indices)
        Fb, Fn = f(row_block(X, i0, i1)), f(take_rows(X, cols))
        W_loc = sp.csr_matrix((Wb.data, np.searchsorted(cols, Wb.indices), Wb.indptr), shape=(i1 - i0, len(cols)))
        part = Fb.T @ (deg[i0:i1, None] * Fb - W_loc @ Fn)  # rows of (D - W) F
        G = part if G is None else G + part
    return 0.5 * (G + G.T)


def nystrom_features(X, raw_fn, M: np.ndarray, chunk_rows: int = KERNEL_CHUNK_ROWS) -> np.ndarray:
    """``Phi = k(X, landmarks) M`` (n, r) as float32, computed per row block (as Dask work when ``X`` is a Dask
    array: one block per thread of the active scheduler)."""
    n, r = X.shape[0], M.shape[1]
    features = lambda Z: (raw_fn(np.asarray(Z, dtype=np.float64)) @ M).astype(np.float32)  # noqa: E731
    if hasattr(X, "map_blocks"):
        Xr = X.rechunk((chunk_rows, -1))
        blocks = Xr.map_blocks(features, dtype=np.float32, chunks=(Xr.chunks[0], (r,)))
        return np.asarray(blocks.compute())
    Phi = np.empty((n, r), dtype=np.float32)
    for i0 in range(0, n, chunk_rows):
        Phi[i0:i0 + chunk_rows] = features(row_block(X, i0, min(i0 + chunk_rows, n)))
    return Phi


def moments(X, n: int, feature_fn=None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Mean (p,) and covariance (p, p) of ``F = feature_fn(X)`` over row blocks."""
    f = (lambda Z: Z) if feature_fn is None else feature_fn  # noqa: E731
    s, S = 0.0, 0.0
    for i0 in range(0, n, chunk_rows):
        Fb = f(row_block(X, i0, min(i0 + chunk_rows, n)))
        s, S = s + Fb.sum(axis=0), S + Fb.T @ Fb
    mean = s / n
    return mean, S / n - np.outer(mean, mean)


def sparse_label_graphs(F: np.ndarray, y: np.ndarray, k: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """W^I, W^E of Sect. 2.1.2 over labeled points ``F`` (l, p) with exact per-class kNN (sparse).

    Neig^I of a class is the kNN graph of its points (:class:`spectral.neighbours.index.KNNIndex`, no self-neighbours),
    Neig^E the k nearest points of the other classes (a query of their index).
    """
    n = len(y)
    rows_i, cols_i, rows_e, cols_e = [], [], [], []
    for c in np.unique(y):
        same, other = np.flatnonzero(y == c), np.flatnonzero(y != c)
        ks = min(k, len(same) - 1)
        if ks > 0:
            nb = KNNIndex.build(F[same], ks, method="exact").neighbor_graph()[0]
            rows_i.append(np.repeat(same, ks)), cols_i.append(same[nb].ravel())
        ke = min(k, len(other))
        nb = _nearest(F[other], F[same], ke)
        rows_e.append(np.repeat(same, ke)), cols_e.append(other[nb].ravel())
    cat = lambda parts: np.concatenate(parts) if parts else np.empty(0, np.int64)  # noqa: E731
    return graphs._or_graph(n, cat(rows_i), cat(cols_i)), graphs._or_graph(n, cat(rows_e), cat(cols_e))


def _nearest(F_ref: np.ndarray, F_query: np.ndarray, k: int) -> np.ndarray:
    """Positions (q, k) of the k nearest rows of F_ref (r, p) for each row of F_query (q, p) (exact search)."""
    if len(F_ref) == 1:
        return np.zeros((len(F_query), 1), dtype=np.int64)
    return KNNIndex.build(F_ref, 1, method="exact").query(F_query, k)[0]


def _quad(F: np.ndarray, W: sp.csr_matrix) -> np.ndarray:
    deg = np.asarray(W.sum(axis=1)).ravel()
    return F.T @ (deg[:, None] * F - W @ F)


def label_terms(method: str, F: np.ndarray, y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``F^T L^(1) F`` and ``F^T L_C F`` (None when C = I) over the labeled points (Sect. 2.1.2).

    LFDA's ``W^bet = W^I o (1/n_k - 1/n) - (1/n) [y_i != y_j]``: the dense part is
    ``F^T L([y_i != y_j]) F = (n F^T F - s s^T) - sum_k (n_k F_k^T F_k - s_k s_k^T)`` with ``s = F^T 1``.
    """
    W_I, W_E = sparse_label_graphs(F, y, k)
    if method == "DNE":
        return _quad(F, (W_I - W_E).tocsr()), None
    if method == "MFA":
        return _quad(F, W_I), _quad(F, W_E)
    n = len(y)
    classes, counts = np.unique(y, return_counts=True)
    inv_nk = (1.0 / counts)[np.searchsorted(classes, y)]
    W_I = W_I.tocoo()
    W_same = sp.csr_matrix((W_I.data * (inv_nk[W_I.row] - 1.0 / n), (W_I.row, W_I.col)), shape=(n, n))
    W_wit = sp.csr_matrix((W_I.data * inv_nk[W_I.row], (W_I.row, W_I.col)), shape=(n, n))
    s = F.sum(axis=0)
    diff = n * F.T @ F - np.outer(s, s)
    for c in classes:
        Fc = F[y == c]
        sc = Fc.sum(axis=0)
        diff -= len(Fc) * Fc.T @ Fc - np.outer(sc, sc)
    return _quad(F, W_same) - diff / n, _quad(F, W_wit)


def fit_at_scale(estimator, X, y, *, W2=None, chunk_rows=None, knn_method="auto", random_state=None):
    """Fit a linear or Nyström-kernel DNE / MFA / LFDA on ``X`` (n, d0), NumPy or Dask, labels ``y`` (n,).

    ``W2`` (csr (n, n)) is W^(2) when already computed (e.g. read from a store); otherwise it is
    built with :func:`spectral.neighbours.knn.knn_graph` + :func:`spectral.graph.weights.knn_weights` in the input space
    (also for the Nyström kernel variants, where a feature-space kNN over n x n_landmarks features would cost more than
    the whole fit). Returns the fitted estimator (``transform`` works per chunk; no ``embedding_``).
    """
    est = estimator
    est._check_params()
    if est.mode == "transductive" or (est.mode == "kernel" and est.n_landmarks is None):
        raise ParameterError(f"fit_at_scale needs mode='linear' or mode='kernel' with n_landmarks; got mode={est.mode!r}")
    if est.manifold_graph != "knn":
        raise ParameterError(f"fit_at_scale needs manifold_graph='knn' (sparse W^(2)); got {est.manifold_graph!r}")
    n, d0 = X.shape
    y = est._check_labels(np.empty((n, 0)), y)  # codes (index in est.classes_, -1 unlabeled)
    rng = check_random_state(random_state if random_state is not None else est.random_state)
    lab = np.flatnonzero(y >= 0)
    est.n_features_in_ = d0
    est._kernel, est._kernel_params = resolve_kernel(est.kernel, est.kernel_params)
    raw_fn, M, chunk = None, None, chunk_rows or DEFAULT_CHUNK_ROWS
    est.basis_, est._feature_map = None, None
    X_input = X  # the manifold graph W^(2) is built in the input space (see the docstring)
    if est.mode == "kernel":
        m = check_int("n_landmarks", est.n_landmarks, low=1, high=n)
        nys = landmark_map(X, est._kernel, m, rng)
        est.basis_, est._feature_map = nys.landmarks_, nys.normalization_
        M = est._feature_map
        raw_fn = lambda Z: est._kernel(Z, est.basis_)  # noqa: E731
        chunk = chunk_rows or KERNEL_CHUNK_ROWS
        F_lab = raw_fn(take_rows(X, lab)) @ M  # float64 features of the labeled points (label graphs, eq. 3)
        if n * M.shape[1] * 4 <= FEATURE_MEMORY_BYTES:
            # Phi (n, r) once, then the linear path on it: n m r + 2 n r^2 flops, and every neighbour gather of
            # graph_gram reads Phi instead of re-evaluating the kernel (r is the rank of K_mm: at most 528 for the
            # degree-2 polynomial kernel on 32-D data, 93 on the benchmark roll, against m = 2000 raw kernel columns)
            X = nystrom_features(X, raw_fn, M, chunk)
            raw_fn, M = None, None
            est.scale_info_ = {"kernel_path": "features", "rank": int(X.shape[1])}
        else:
            # Phi does not fit: accumulate in the raw kernel features K(x, landmarks) (n x m) and sandwich by
            # M once at the end (Phi^T L Phi = M^T (K_nm^T L K_nm) M); neighbour rows are re-evaluated
            est.scale_info_ = {"kernel_path": "raw kernel columns", "rank": int(M.shape[1])}
    else:
        est.scale_info_ = {"kernel_path": None, "rank": d0}
        F_lab = take_rows(X, lab)
    sandwich = (lambda S: S) if M is None else (lambda S: M.T @ S @ M)  # noqa: E731
    A, B = label_terms(est._method, F_lab, y[lab], est.n_neighbors)
    if est.gamma > 0:
        W2 = W2 if W2 is not None else _manifold_graph(X_input, est, knn_method, rng)
        A = A + est.gamma * sandwich(graph_gram(X, W2, raw_fn, chunk))
        mean_raw, cov_raw = moments(X, n, raw_fn, chunk)
        mean, cov = (mean_raw, cov_raw) if M is None else (mean_raw @ M, sandwich(cov_raw))
    else:
        mean, cov = F_lab.mean(axis=0), np.cov(F_lab.T, bias=True).reshape(F_lab.shape[1], -1)
    P = _pca_from_cov(cov, est.pca_variance) if est._regularization() == "pca" else np.eye(len(mean))
    est._solve_primal(A, B, mean, P, cov)
    return est


def _manifold_graph(X, est, knn_method: str, rng) -> sp.csr_matrix:
    from eigenflow.spectral.graph.weights import knn_weights

    X_np = to_numpy(X, np.float32)
    k = est.n_neighbors if est.manifold_neighbors is None else est.manifold_neighbors
    idx, dist = knn_graph(X_np, k, method=knn_method, random_state=rng)
    return knn_weights(idx, dist, weighting=est.manifold_weighting)


def _pca_from_cov(cov: np.ndarray, variance: float | None = None) -> np.ndarray:
    """Basis (p, r) of the range of a covariance matrix (remark 1, PCA reduction at scale); ``variance``: only
    the leading directions explaining that fraction of the variance (as :func:`solve.pca_basis`)."""
    lam, V = np.linalg.eigh(0.5 * (cov + cov.T))
    keep = lam > solve.RANK_RTOL * max(float(lam[-1]), np.finfo(float).tiny)
    if not keep.any():
        raise ParameterError("regularization='pca': the data have zero variance")
    lam, V = lam[keep][::-1], V[:, keep][:, ::-1]
    return V[:, :solve.n_leading(lam, variance)]
