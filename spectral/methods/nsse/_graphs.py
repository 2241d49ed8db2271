"""Within-class and between-class graphs of NSSE / SUPLAP (OV19, eqs. 9-10), dense.

NSSE trains on N labeled points (hundreds to a few thousands), so every matrix here is a dense N x N
array: the pairwise squared distances are shared with the RBF matrix Psi (:mod:`._rbf`).
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.neighbours.index import knn_mask_from_distances


def squared_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, ``(m, n)`` from ``A (m, p)`` and ``B (n, p)``, clipped at 0.

    The expansion ||a||^2 + ||b||^2 - 2 a.b is used (BLAS matmul); round-off negatives are clipped.
    """
    aa = np.einsum("ij,ij->i", A, A)[:, None]
    bb = np.einsum("ij,ij->i", B, B)[None, :]
    D2 = aa + bb - 2.0 * (A @ B.T)
    np.maximum(D2, 0.0, out=D2)
    return D2


def class_graphs(
    D2: np.ndarray, y: np.ndarray, n_neighbors: int, bandwidth: float | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Gaussian within-class and between-class weight matrices (OV19, eqs. 9 and 10).

    Each point is linked to its ``min(n_neighbors, n_c - 1)`` nearest neighbours of its own class
    (``W_w``) and to its ``n_neighbors`` nearest neighbours of the other classes (``W_b``); both
    graphs are symmetrized with OR (a link if either end chose it). Edge weights are
    ``exp(-||x_i - x_j||^2 / t^2)`` with one bandwidth ``t`` for both graphs.

    Parameters
    ----------
    D2 : ndarray (N, N)
        Squared pairwise distances of the training points.
    y : ndarray (N,)
        Integer class labels (at least two classes, at least two points per class; checked by the caller).
    n_neighbors : int
        Neighbours per point in each graph.
    bandwidth : float or None
        Kernel bandwidth ``t``; ``None`` uses the median distance of the within-class kNN edges.

    Returns
    -------
    W_w, W_b : ndarray (N, N)
        Symmetric, zero-diagonal weight matrices.
    t : float
        The bandwidth used.
    """
    N = D2.shape[0]
    same = y[:, None] == y[None, :]
    np.fill_diagonal(same, False)
    diff = y[:, None] != y[None, :]
    _, inverse, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    counts = class_counts[inverse]  # (N,) size of each point's class
    k_w = np.minimum(n_neighbors, counts - 1)
    k_b = np.minimum(n_neighbors, N - counts)
    mask_w = knn_mask_from_distances(D2, k_w, same)
    mask_b = knn_mask_from_distances(D2, k_b, diff)
    mask_w |= mask_w.T  # OR symmetrization
    mask_b |= mask_b.T
    if bandwidth is None:
        bandwidth = float(np.sqrt(np.median(D2[mask_w])))
        if bandwidth <= 0.0:  # duplicated points only: any positive scale gives weight 1
            bandwidth = 1.0
    K = np.exp(-D2 / bandwidth**2)
    return np.where(mask_w, K, 0.0), np.where(mask_b, K, 0.0), bandwidth

