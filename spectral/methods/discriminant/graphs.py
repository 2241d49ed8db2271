"""Graphs of CK08 (Sect. 2.1.2 and 3.3): label graphs W^I / W^E, the LFDA weights, the manifold graph W^(2).

All graphs are symmetric ``scipy.sparse.csr_matrix`` of shape (n, n) with a zero diagonal. Points are rows of
``X``; labels use -1 for unlabeled points, which get no edge in the label graphs (Sect. 3.1:
"w^I_ij = w^E_ij = 0 if x_i and/or x_j are unlabeled").

The graphs are built from a dense squared-distance matrix: the generalized problems of the paper are small
(n up to a few thousand). The at-scale path (:mod:`spectral.methods.discriminant.scale`) builds W^(2) from an
approximate kNN graph instead and only ever forms label graphs over the labeled points.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.graph.laplacian import dense_laplacian
from eigenflow.spectral.graph.laplacian import laplacian as sparse_laplacian
from eigenflow.spectral.graph.weights import knn_weights
from eigenflow.spectral.neighbours.index import knn_mask_from_distances

#: weightings of the manifold graph W^(2) (Sect. 3.3): binary, heat kernel (eq. 14), local scaling (eq. 15)
MANIFOLD_WEIGHTINGS = ("local_scaling", "heat", "binary")
#: edges of W^(2): the OR-symmetrized kNN graph, or all pairs ("full", the complete graph of Sect. 3.3 / [7])
MANIFOLD_GRAPHS = ("knn", "full")


def sq_dists_from_gram(K: np.ndarray) -> np.ndarray:
    """Squared feature-space distances ``k(x_i,x_i) + k(x_j,x_j) - 2 k(x_i,x_j)`` (Sect. 5), shape (n, n)."""
    diag = np.diag(K)
    D2 = diag[:, None] + diag[None, :] - 2.0 * K
    np.maximum(D2, 0.0, out=D2)
    np.fill_diagonal(D2, 0.0)
    return D2


def sq_dists(X: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``X`` (n, d) -> (n, n)."""
    return sq_dists_from_gram(X @ X.T)


def _or_graph(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray | None = None) -> sp.csr_matrix:
    """Symmetric graph with an edge when j in Neig(i) OR i in Neig(j) (Sect. 2.1.2); weight max of both."""
    w = np.ones(len(i)) if w is None else w
    G = sp.csr_matrix((w, (i, j)), shape=(n, n))
    G.sum_duplicates()
    G = G.maximum(G.T).tocsr()
    G.setdiag(0.0)
    G.eliminate_zeros()
    return G


def label_graphs(D2: np.ndarray, y: np.ndarray, n_neighbors: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Binary label graphs W^I (same label) and W^E (different labels) of Sect. 2.1.2.

    Parameters
    ----------
    D2 : ndarray (n, n)
        Squared distances (input space for the linear variants, feature space for the kernel ones).
    y : ndarray (n,)
        Integer labels, -1 = unlabeled (no edges).
    n_neighbors : int
        k of Neig^I and Neig^E. A class with n_c <= k points uses its n_c - 1 other points.

    Returns
    -------
    W_I, W_E : csr_matrix (n, n)
        ``w_ij = 1`` if j is among the k nearest same-label (resp. different-label) labeled points of i or
        i among those of j; 0 otherwise.
    """
    n = len(y)
    labeled = y >= 0
    both = labeled[:, None] & labeled[None, :]
    same = both & (y[:, None] == y[None, :])
    np.fill_diagonal(same, False)  # no self-neighbours; ties by index (deterministic graphs)
    graphs = []
    for allowed in (same, both & (y[:, None] != y[None, :])):
        i, j = np.nonzero(knn_mask_from_distances(D2, n_neighbors, allowed))
        graphs.append(_or_graph(n, i, j))
    return graphs[0], graphs[1]


def lfda_graphs(W_I: sp.csr_matrix, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LFDA weights of Sect. 2.1.2 (the 1/n_k weights), over the labeled points.

    ``w^bet_ij = w^I_ij (1/n_k - 1/n)`` if ``y_i = y_j = k``, ``-1/n`` if both are labeled with different
    labels; ``w^wit_ij = w^I_ij / n_k`` if ``y_i = y_j = k``. ``n`` and ``n_k`` count labeled points (the
    between-class -1/n term is a label term: unlabeled points get no edge, as in Sect. 3.1).

    Returns dense (n, n) arrays ``W_bet, W_wit`` (W^bet is dense among labeled points by definition).
    """
    n_total = len(y)
    labeled = y >= 0
    n = int(labeled.sum())
    counts = {c: int(np.sum(y == c)) for c in np.unique(y[labeled])}
    inv_nk = np.zeros(n_total)
    for c, nc in counts.items():
        inv_nk[y == c] = 1.0 / nc
    same = (y[:, None] == y[None, :]) & labeled[:, None]
    both = labeled[:, None] & labeled[None, :]
    WI = W_I.toarray()
    W_wit = np.where(same, WI * inv_nk[:, None], 0.0)
    W_bet = np.where(same, WI * (inv_nk[:, None] - 1.0 / n), np.where(both, -1.0 / n, 0.0))
    np.fill_diagonal(W_bet, 0.0)
    return W_bet, W_wit


def knn_from_dists(D2: np.ndarray, n_neighbors: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact kNN (self excluded) from squared distances: ``(indices (n, k) int64, distances (n, k))``."""
    n = D2.shape[0]
    if not 1 <= n_neighbors <= n - 1:
        raise ParameterError(f"manifold_neighbors must be an integer in [1, {n - 1}]; got {n_neighbors}")
    sub = D2.copy()
    np.fill_diagonal(sub, np.inf)
    idx = np.argsort(sub, axis=1, kind="stable")[:, :n_neighbors]
    return idx.astype(np.int64), np.sqrt(np.take_along_axis(sub, idx, axis=1))


def manifold_weights(
    indices: np.ndarray,
    distances: np.ndarray,
    weighting: str = "local_scaling",
    sigma: float | None = None,
    scale_k: int | None = None,
) -> sp.csr_matrix:
    """W^(2) from a kNN relation (Sect. 3.3), OR-symmetrized, shape (n, n): :func:`spectral.graph.weights.knn_weights`.

    ``binary``: w = 1; ``heat``: w = exp(-d^2 / sigma^2) (eq. 14, sign of the exponent corrected), sigma
    defaulting here to the median distance to the ``scale_k``-th neighbour; ``local_scaling``:
    w = exp(-d^2 / (sigma_i sigma_j)) with sigma_i the distance to the ``scale_k``-th neighbour (eq. 15;
    default the last column). With all n - 1 neighbours this is the complete local-scaling affinity of the
    LFDA implementation.
    """
    if weighting not in MANIFOLD_WEIGHTINGS:
        raise ParameterError(f"manifold_weighting must be one of {list(MANIFOLD_WEIGHTINGS)}; got {weighting!r}")
    if weighting == "heat" and sigma is None:
        s = float(np.median(distances[:, (indices.shape[1] if scale_k is None else scale_k) - 1]))
        sigma = s if s > 0 else 1.0
    return knn_weights(indices, distances, weighting=weighting, symmetrize="or", sigma=sigma, scale_k=scale_k)


def manifold_graph(D2: np.ndarray, n_neighbors: int, graph: str = "knn", weighting: str = "local_scaling"):
    """W^(2) over all n points from squared distances (n, n): kNN graph (csr) or complete graph (dense).

    For ``graph="full"`` every pair is an edge and ``n_neighbors`` only sets the local scale sigma_i (the
    affinity of the LFDA implementation, eq. 15 over all pairs).
    """
    if graph == "knn":
        return manifold_weights(*knn_from_dists(D2, n_neighbors), weighting)
    n = D2.shape[0]
    if n_neighbors > n - 1:
        raise ParameterError(f"manifold_neighbors must be an integer in [1, {n - 1}]; got {n_neighbors}")
    sub = D2.copy()
    np.fill_diagonal(sub, np.inf)
    kth = np.sqrt(np.partition(sub, n_neighbors - 1, axis=1)[:, n_neighbors - 1])  # distance to k-th neighbour
    if weighting == "binary":
        W = np.ones_like(D2)
    elif weighting == "heat":
        s = float(np.median(kth))
        W = np.exp(-D2 / max(s * s, np.finfo(float).tiny))
    elif weighting == "local_scaling":
        sig = np.maximum(kth, np.finfo(float).tiny)
        W = np.exp(-D2 / np.outer(sig, sig))
    else:
        raise ParameterError(f"manifold_weighting must be one of {list(MANIFOLD_WEIGHTINGS)}; got {weighting!r}")
    np.fill_diagonal(W, 0.0)
    return W  # dense (n, n): the complete graph


def laplacian(W) -> np.ndarray | sp.csr_matrix:
    """``D - W`` with ``D = diag(W 1)`` (eq. 3) of a signed symmetric W: csr for sparse W, ndarray for dense
    (:func:`spectral.graph.laplacian.laplacian` / :func:`~spectral.graph.laplacian.dense_laplacian`)."""
    if sp.issparse(W):
        return sparse_laplacian(W, signed=True)[0]
    return dense_laplacian(W, signed=True)[0]


def method_laplacians(method: str, D2: np.ndarray, y: np.ndarray, n_neighbors: int):
    """Laplacians ``L^(1) = D^(1) - W^(1)`` and of the constraint graph (None when C = I) of Sect. 2.1.2 / 3.1.

    DNE: W^(1) = W^I - W^E, C = I.  MFA: W^(1) = W^I, C from D^E - W^E.  LFDA: W^(1) = W^bet, C from
    D^wit - W^wit. Shapes (n, n), dense for LFDA (W^bet is dense among labeled points), sparse otherwise.
    """
    W_I, W_E = label_graphs(D2, y, n_neighbors)
    if method == "DNE":
        return laplacian(W_I - W_E), None
    if method == "MFA":
        return laplacian(W_I), laplacian(W_E)
    if method == "LFDA":
        W_bet, W_wit = lfda_graphs(W_I, y)
        return laplacian(W_bet), laplacian(W_wit)
    raise ParameterError(f"method must be one of ['DNE', 'MFA', 'LFDA']; got {method!r}")
