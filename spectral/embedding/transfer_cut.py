"""Spectral embedding of a bipartite graph between the points and p landmarks, solved on the landmarks (transfer cut).

The landmark path of U-SPEC (Huang et al., IEEE TKDE 32(6), 2020): p landmarks are the k-means centres of 10 p
points drawn at random; each point is joined to its K nearest landmarks with Gaussian weights
``b_ij = exp(-d_ij^2 / (2 sigma^2))``, sigma the mean of those distances, which makes the n x p matrix B. The
normalized-cut eigenproblem of the bipartite graph ``[[0, B], [B^T, 0]]`` reduces to the p x p problem on the
landmarks (transfer cut, Li et al., CVPR 2012): ``(D_Y - B^T D_X^-1 B) v = gamma D_Y v`` with ``D_X = diag(B 1)``,
``D_Y = diag(B^T 1)``; an eigenvalue gamma of it is ``lambda (2 - lambda)`` for the bipartite graph's lambda, and the
points' side of that eigenvector is ``u = D_X^-1 B v / (1 - lambda)``. The cost is O(n K) beyond the search of the K
nearest of p landmarks; no n x n matrix is formed, and a new point is placed by the same formula as a fitted one.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh

#: candidates drawn per landmark before the k-means that picks the landmarks (U-SPEC's hybrid selection)
CANDIDATES_PER_LANDMARK = 10
#: rows per block of the landmark search (bounds its temporary memory)
SEARCH_BLOCK = 1 << 20
#: k-means iterations of the landmark selection (the landmarks need to cover the data, not converge)
SELECTION_MAX_ITER = 20


def select_landmarks(X: np.ndarray, n_landmarks: int, rng: np.random.Generator) -> np.ndarray:
    """``p = min(n_landmarks, n // 10)`` landmarks (p, d) (at least 2): the k-means centres of ``10 p`` rows of ``X``
    (n, d) drawn at random. Fewer than 10 points per landmark leave points joined to the graph by weights that
    underflow (sigma, the mean distance to the K nearest landmarks, shrinks with p), each such point a cluster."""
    from sklearn.cluster import KMeans

    n = X.shape[0]
    p = min(n, max(2, min(n_landmarks, n // CANDIDATES_PER_LANDMARK)))
    m = min(n, CANDIDATES_PER_LANDMARK * p)
    candidates = X[np.sort(rng.choice(n, size=m, replace=False))] if m < n else X
    if m == p:
        return np.array(candidates, dtype=np.float64)
    km = KMeans(n_clusters=p, n_init=1, max_iter=SELECTION_MAX_ITER, random_state=int(rng.integers(0, 2**31 - 1)))
    return km.fit(candidates).cluster_centers_


class TransferCutModel:
    """The landmark graph's spectral embedding: ``transform`` places any point by its K nearest landmarks.

    It has the attributes the clustering reads from a Laplacian eigenmap (``embedding`` (n, k) of the fitted points,
    ``component_eigenvalues`` (C, k), ``component_labels`` and ``degrees`` (n,), ``component_offsets`` (C, k)). A
    bipartite graph in C parts (landmarks no point joins to another's) is solved per part, as
    :func:`spectral.embedding.eigenmaps.laplacian_eigenmaps_from_graph` does with ``on_disconnected="per_component"``:
    each part's rows are translated by its offset, and a part with fewer landmarks than k + 1 pads its eigenvalues
    with inf.
    """

    def __init__(self, landmarks: np.ndarray, n_neighbors: int, sigma: float, maps: np.ndarray,
                 component_eigenvalues: np.ndarray, landmark_components: np.ndarray, component_offsets: np.ndarray):
        self.landmarks, self.n_neighbors, self.sigma = landmarks, int(n_neighbors), float(sigma)
        self.maps = maps  # (p, k): each landmark's side of its part's eigenvectors, divided by 1 - lambda
        self.component_eigenvalues, self.component_offsets = component_eigenvalues, component_offsets
        self.landmark_components = landmark_components  # (p,)
        self._index = None

    @classmethod
    def fit(cls, X: np.ndarray, n_components: int, *, n_landmarks: int, n_neighbors: int,
            rng: np.random.Generator) -> TransferCutModel:
        """The embedding of ``X`` (n, d) by the ``n_components`` smallest nontrivial eigenvectors of each part of its
        landmark graph."""
        from scipy.sparse.csgraph import connected_components

        from eigenflow.spectral.embedding.eigenmaps import component_offsets

        landmarks = select_landmarks(X, n_landmarks, rng)
        p, k = landmarks.shape[0], n_components
        model = cls(landmarks, min(n_neighbors, p), 1.0, np.zeros((p, k)), np.zeros((1, k)), np.zeros(p, np.int64),
                    np.zeros((1, k)))
        dist, idx = model._nearest(X)
        model.sigma = float(dist.mean()) or 1.0
        B = model._weights(dist, idx)
        B.eliminate_zeros()
        dx = np.asarray(B.sum(axis=1)).ravel()
        dy = np.asarray(B.sum(axis=0)).ravel()
        n_parts, parts = connected_components(B.T @ B, directed=False)
        order = np.argsort(-np.bincount(parts, weights=dy), kind="stable")  # part 0: the heaviest
        parts = np.argsort(order)[parts]
        values = np.full((n_parts, k), np.inf)
        for c in range(n_parts):
            mine = np.flatnonzero((parts == c) & (dy > 0))  # a landmark no point joins carries nothing
            if mine.size < 2:
                continue
            if mine.size == p:  # one part (the common case): B itself, no copy
                E = (B.T @ sp.diags(1.0 / dx) @ B).toarray()
            else:
                Bc = B[:, mine]
                rows = np.flatnonzero(np.diff(Bc.indptr))
                Bc = Bc[rows]
                E = (Bc.T @ sp.diags(1.0 / dx[rows]) @ Bc).toarray()
            kc = min(k, mine.size - 1)
            gamma, V = eigh(np.diag(dy[mine]) - E, np.diag(dy[mine]), subset_by_index=[0, kc])
            gamma = np.clip(gamma[1:], 0.0, 1.0 - 1e-12)  # the part's trivial (constant) vector dropped
            values[c, :kc] = gamma
            model.maps[mine, :kc] = V[:, 1:] / np.sqrt(1.0 - gamma)[None, :]  # 1 - lambda = sqrt(1 - gamma)
        del B
        model.component_eigenvalues, model.landmark_components = values, parts
        model.component_labels = parts[idx[:, 0]]
        model.embedding = model._place(dist, idx, offsets=False)
        del dist, idx
        model.component_offsets = component_offsets(model.embedding, n_parts)
        model.embedding += model.component_offsets[model.component_labels]
        model.degrees = dx
        return model

    def _nearest(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distances and indices (m, K) of the K nearest landmarks of each row of ``X``, by blocks of rows."""
        if self._index is None:
            from sklearn.neighbors import NearestNeighbors

            self._index = NearestNeighbors(n_neighbors=self.n_neighbors).fit(self.landmarks)
        dist = np.empty((X.shape[0], self.n_neighbors))
        idx = np.empty((X.shape[0], self.n_neighbors), dtype=np.int32)  # p < 2**31 landmarks
        for a in range(0, X.shape[0], SEARCH_BLOCK):
            dist[a:a + SEARCH_BLOCK], idx[a:a + SEARCH_BLOCK] = self._index.kneighbors(
                np.asarray(X[a:a + SEARCH_BLOCK], dtype=np.float64))
        return dist, idx

    def _gaussian(self, dist: np.ndarray) -> np.ndarray:
        """The weights (n, K) of the K nearest landmarks at distances ``dist``."""
        w = np.exp(-(dist ** 2) / (2.0 * self.sigma ** 2))
        w[w.sum(axis=1) == 0, 0] = np.finfo(np.float64).tiny  # far from every landmark: held by the nearest one
        return w

    def _weights(self, dist: np.ndarray, idx: np.ndarray) -> sp.csr_matrix:
        n, K = dist.shape
        indptr = np.arange(0, n * K + 1, K, dtype=np.int64 if n * K >= 2**31 else np.int32)
        return sp.csr_matrix((self._gaussian(dist).ravel(), idx.ravel(), indptr), shape=(n, self.landmarks.shape[0]))

    def _place(self, dist: np.ndarray, idx: np.ndarray, *, offsets: bool = True) -> np.ndarray:
        """The embedding (m, k) of rows whose K nearest landmarks are ``dist``, ``idx`` (m, K), by blocks of rows."""
        U = np.zeros((idx.shape[0], self.maps.shape[1]))
        for a in range(0, idx.shape[0], SEARCH_BLOCK):
            w = self._gaussian(dist[a:a + SEARCH_BLOCK])
            w /= w.sum(axis=1, keepdims=True)
            block, near = U[a:a + SEARCH_BLOCK], idx[a:a + SEARCH_BLOCK]
            for j in range(near.shape[1]):  # one neighbour at a time: never (m, K, k)
                block += w[:, j:j + 1] * self.maps[near[:, j]]
            if offsets:  # in the part of the nearest landmark, translated by its offset
                block += self.component_offsets[self.landmark_components[near[:, 0]]]
        return U

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The embedding (m, k) of points ``X`` (m, d): ``u = D_X^-1 B v / (1 - lambda)`` of their landmark weights."""
        return self._place(*self._nearest(X))

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` of the map (landmarks, eigenvector maps, parts; not the fitted points' rows)."""
        return ({"landmarks": self.landmarks, "maps": self.maps, "component_eigenvalues": self.component_eigenvalues,
                 "landmark_components": self.landmark_components, "component_offsets": self.component_offsets},
                {"n_neighbors": self.n_neighbors, "sigma": self.sigma})

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> TransferCutModel:
        return cls(arrays["landmarks"], attrs["n_neighbors"], attrs["sigma"], arrays["maps"],
                   arrays["component_eigenvalues"], arrays["landmark_components"].astype(np.int64),
                   arrays["component_offsets"])
