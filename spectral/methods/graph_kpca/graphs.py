"""Graphs of the GRAD methods (STG18): data graphs, user graphs, constraint graphs, Laplacians.

Every graph is a symmetric, non-negative ``scipy.sparse.csr_matrix`` of shape (n, n) with a zero diagonal.

- :func:`data_graph` builds a kNN graph from features (one per data mode in eq. 21), with Gaussian,
  cosine (the paper's LNEG experiments: a_ij = y_i^T y_j / (||y_i|| ||y_j||)) or binary weights.
- :func:`check_user_graph` validates a prior graph given by the user (the point of the paper).
- :func:`constraint_graphs` forms the must-link / cannot-link graphs of eq. 22-23 from pairs or labels.
- Laplacians: :func:`spectral.graph.laplacian.laplacian`, L = D - A (eq. 10) or I - D^-1/2 A D^-1/2
  (``LAPLACIANS`` are the two the estimators accept).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.neighbors import NearestNeighbors

from eigenflow.spectral._sparse import max_asymmetry
from eigenflow.spectral._validation import check_choice, check_float, check_int
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph.weights import knn_weights
from eigenflow.spectral.neighbours.index import METRICS as KNN_METRICS
from eigenflow.spectral.neighbours.index import KNNIndex

GRAPH_WEIGHTS = ("gaussian", "cosine", "binary")
LAPLACIANS = ("unnormalized", "symmetric")
#: relative tolerance for the symmetry check of a user graph (float32 round-off of stored weights)
_SYMMETRY_RTOL = 1e-6


def knn_indices(X, n_neighbors: int, *, metric: str = "euclidean"):
    """Exact kNN (no self-neighbour) of the rows of X: ``(indices (n, k) int64, distances (n, k) float64)``.

    :class:`spectral.neighbours.index.KNNIndex` for its metrics (euclidean, manhattan, cosine); other scikit-learn
    metrics of a data mode (eq. 21, e.g. "hamming" for binary features), which KNNIndex does not have, use
    scikit-learn's exact search with the same contract (a duplicate displacing self drops the farthest).
    """
    n = X.shape[0]
    k = check_int("n_neighbors", n_neighbors, low=1, high=n - 1)
    if metric in KNN_METRICS:
        ind, dist = KNNIndex.build(X, k, method="exact", metric=metric).neighbor_graph()
        return ind, dist.astype(np.float64)
    nn = NearestNeighbors(n_neighbors=k + 1, metric=metric).fit(X)
    dist, ind = nn.kneighbors(X)
    # drop self: the first column is the point itself unless duplicates tie with it
    keep = ind != np.arange(n)[:, None]
    rows_with_self = (~keep).any(axis=1)
    keep[~rows_with_self, -1] = False  # a duplicate displaced self: drop the farthest instead
    ind = ind[keep].reshape(n, k)
    dist = dist[keep].reshape(n, k)
    return ind.astype(np.int64), dist


def knn_adjacency(X, ind, dist, *, weight: str = "gaussian", sigma: float | None = None):
    """Weights on kNN pairs, OR-symmetrized (max), zero diagonal: csr (n, n).

    gaussian: exp(-d^2 / (2 sigma^2)), sigma defaults to the median kNN distance (the "heat" weights of
    :func:`spectral.graph.weights.knn_weights` with bandwidth sqrt(2) sigma); binary: 1 (its "binary");
    cosine: max(0, cos(y_i, y_j)) of the features (negative similarities are clipped so that L stays PSD).
    """
    n, k = ind.shape
    weight = check_choice("graph_weight", weight, GRAPH_WEIGHTS)
    if weight != "cosine":
        if weight == "gaussian":
            sigma = default_sigma(dist) if sigma is None else check_float("graph_sigma", sigma, low=0.0,
                                                                         low_inclusive=False)
            return knn_weights(ind, dist, weighting="heat", sigma=np.sqrt(2.0) * sigma)
        return knn_weights(ind, dist, weighting="binary")
    rows = np.repeat(np.arange(n), k)
    cols = ind.ravel()
    vals = edge_weights(X, X, rows, cols, dist.ravel(), weight=weight, sigma=sigma)
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    A = A.maximum(A.T).tocsr()
    A.setdiag(0.0)
    A.eliminate_zeros()
    return A


def default_sigma(dist) -> float:
    """Gaussian bandwidth default: the median kNN distance (1.0 if that is 0)."""
    med = float(np.median(dist))
    return med if med > 0 else 1.0


def edge_weights(Xa, Xb, rows, cols, dist, *, weight: str, sigma):
    """Weights of the edges (rows[e] of Xa, cols[e] of Xb) with kNN distances dist (e,) -> (e,)."""
    if weight == "gaussian":
        sigma = check_float("graph_sigma", sigma, low=0.0, low_inclusive=False)
        return np.exp(-(np.asarray(dist, dtype=np.float64) ** 2) / (2.0 * sigma**2))
    if weight == "cosine":
        na, nb = np.linalg.norm(Xa, axis=1), np.linalg.norm(Xb, axis=1)
        if np.any(na == 0) or np.any(nb == 0):
            raise InputDataError("graph_weight='cosine' needs non-zero rows; X has an all-zero row")
        vals = np.einsum("ij,ij->i", Xa[rows], Xb[cols]) / (na[rows] * nb[cols])
        return np.maximum(vals, 0.0)  # clip negative similarities so that L stays PSD
    return np.ones(len(rows))


def data_graph(X, n_neighbors: int = 10, *, weight: str = "gaussian", metric: str = "euclidean", sigma=None):
    """kNN graph of the rows of X (n, D) -> symmetric csr adjacency (n, n).

    ``metric`` is any scikit-learn NearestNeighbors metric, e.g. "hamming" for a binary data mode (eq. 21).
    """
    ind, dist = knn_indices(X, n_neighbors, metric=metric)
    return knn_adjacency(X, ind, dist, weight=weight, sigma=sigma)


def check_user_graph(A, n: int, name: str = "graph"):
    """Validate a user adjacency: (n, n), finite, non-negative, symmetric; returns csr with zero diagonal."""
    if not (sp.issparse(A) or isinstance(A, np.ndarray)):
        raise InputDataError(
            f"{name} must be a scipy.sparse matrix or ndarray adjacency of shape ({n}, {n}); got {type(A).__name__}"
        )
    if A.ndim != 2 or A.shape != (n, n):
        raise InputDataError(f"{name} must have shape ({n}, {n}) (one node per sample); got {A.shape}")
    A = sp.csr_matrix(A, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(A.data)):
        raise InputDataError(f"{name} contains NaN or inf weights")
    if A.nnz and A.data.min() < 0:
        raise InputDataError(f"{name} weights must be >= 0; got minimum {A.data.min():.6g}")
    asym = max_asymmetry(A)
    scale = max(float(abs(A).max()) if A.nnz else 0.0, 1.0)
    if asym > _SYMMETRY_RTOL * scale:
        raise InputDataError(
            f"{name} must be symmetric (undirected); max |A - A^T| = {asym:.3g} "
            f"exceeds {_SYMMETRY_RTOL * scale:.3g}"
        )
    A = ((A + A.T) * 0.5).tocsr()
    A.setdiag(0.0)
    A.eliminate_zeros()
    return A


def _check_pairs(pairs, n: int, name: str) -> np.ndarray:
    P = np.asarray(pairs)
    if P.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if P.ndim != 2 or P.shape[1] != 2 or not np.issubdtype(P.dtype, np.integer):
        raise InputDataError(f"{name} must be an integer array of shape (p, 2); got {P.dtype} shape {P.shape}")
    if P.min() < 0 or P.max() >= n:
        raise InputDataError(
            f"{name} indices must be in [0, {n - 1}]; got values in [{int(P.min())}, {int(P.max())}]"
        )
    if np.any(P[:, 0] == P[:, 1]):
        raise InputDataError(f"{name} contains a self pair ({int(P[P[:, 0] == P[:, 1]][0, 0])}, same)")
    return np.sort(P.astype(np.int64), axis=1)


def pairs_from_labels(y) -> tuple[np.ndarray, np.ndarray]:
    """All must-link (same label) and cannot-link (different labels) pairs among labeled points (y >= 0)."""
    y = np.asarray(y)
    idx = np.flatnonzero(y >= 0)
    i, j = np.triu_indices(idx.size, k=1)
    same = y[idx[i]] == y[idx[j]]
    pairs = np.column_stack([idx[i], idx[j]])
    return pairs[same], pairs[~same]


def constraint_graphs(n: int, must_link=None, cannot_link=None):
    """Adjacencies A^S (eq. 22) and A^D (eq. 23): a_ij = 1 if (i, j) or (j, i) is a constraint, else 0.

    Raises :class:`InputDataError` for out-of-range indices, self pairs, and a pair that is both
    must-link and cannot-link.
    """
    S = _check_pairs(must_link if must_link is not None else [], n, "must_link")
    D = _check_pairs(cannot_link if cannot_link is not None else [], n, "cannot_link")
    if S.size and D.size:
        s_keys = S[:, 0] * n + S[:, 1]
        d_keys = D[:, 0] * n + D[:, 1]
        both = np.intersect1d(s_keys, d_keys)
        if both.size:
            i, j = divmod(int(both[0]), n)
            raise InputDataError(
                f"pair ({i}, {j}) is both must_link and cannot_link ({both.size} conflicting pairs)"
            )
    return _pairs_adjacency(S, n), _pairs_adjacency(D, n)


def _pairs_adjacency(P: np.ndarray, n: int):
    A = sp.csr_matrix((np.ones(P.shape[0]), (P[:, 0], P[:, 1])), shape=(n, n))
    A = A + A.T
    A.data[:] = 1.0  # duplicates count once
    return A.tocsr()


def check_modes(modes, n_features: int) -> list[tuple[np.ndarray, str]]:
    """Validate data modes (feature groups, eq. 21): list of (column indices, metric) -> normalized list."""
    if not isinstance(modes, (list, tuple)) or len(modes) == 0:
        raise ParameterError(f"modes must be a non-empty list of (columns, metric) pairs; got {modes!r}")
    out = []
    for m, mode in enumerate(modes):
        if not (isinstance(mode, (list, tuple)) and len(mode) == 2):
            raise ParameterError(f"modes[{m}] must be a (columns, metric) pair; got {mode!r}")
        cols = np.asarray(mode[0])
        if cols.ndim != 1 or cols.size == 0 or not np.issubdtype(cols.dtype, np.integer):
            raise ParameterError(f"modes[{m}] columns must be a non-empty 1-D integer array; got {mode[0]!r}")
        if cols.min() < 0 or cols.max() >= n_features:
            raise ParameterError(
                f"modes[{m}] columns must be in [0, {n_features - 1}]; got [{int(cols.min())}, {int(cols.max())}]"
            )
        if not isinstance(mode[1], str):
            raise ParameterError(f"modes[{m}] metric must be a string; got {mode[1]!r}")
        out.append((cols.astype(np.int64), mode[1]))
    return out
