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

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh

#: candidates drawn per landmark before the k-means that picks the landmarks (U-SPEC's hybrid selection)
CANDIDATES_PER_LANDMARK = 10
#: rows whose mean distance to their K nearest landmarks is sigma
SIGMA_SAMPLE = 100_000
#: rows per block of the landmark search (bounds its temporary memory)
SEARCH_BLOCK = 1 << 20
#: k-means iterations of the landmark selection (the landmarks need to cover the data, not converge)
SELECTION_MAX_ITER = 20


def select_landmarks(n: int, take_rows: Callable[[np.ndarray], np.ndarray], n_landmarks: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``p = min(n_landmarks, n // 10)`` landmarks (p, d) (at least 2) of ``n`` rows: the k-means centres of ``10 p``
    rows drawn at random (``take_rows(sorted rows)`` gives them). Fewer than 10 points per landmark leave points
    joined to the graph by weights that underflow (sigma, the mean distance to the K nearest landmarks, shrinks with
    p), each such point a cluster."""
    from sklearn.cluster import KMeans

    p = min(n, max(2, min(n_landmarks, n // CANDIDATES_PER_LANDMARK)))
    m = min(n, CANDIDATES_PER_LANDMARK * p)
    candidates = np.asarray(take_rows(np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)),
                            dtype=np.float64)
    if m == p:
        return candidates
    km = KMeans(n_clusters=p, n_init=1, max_iter=SELECTION_MAX_ITER, random_state=int(rng.integers(0, 2**31 - 1)))
    return km.fit(candidates).cluster_centers_


class TransferCutModel:
    """The landmark graph's spectral embedding: ``transform`` places any point by its K nearest landmarks.

    A bipartite graph in C parts (landmarks no point joins to another's) is solved per part, as
    :func:`spectral.embedding.eigenmaps.laplacian_eigenmaps_from_graph` does with ``on_disconnected="per_component"``:
    ``component_eigenvalues`` (C, k) (inf where a part has fewer landmarks than k + 1), each part's rows translated
    by its row of ``component_offsets`` (C, k), :meth:`part_sizes`. :meth:`fit` also keeps the fitted rows'
    ``embedding`` (n, k) and ``component_labels`` (n,).
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
        landmark graph: :meth:`start`, :meth:`nearest`, :meth:`graph_sums`, :meth:`solve`, :meth:`place` on one
        chunk of rows (the pipeline runs the same steps on many, :mod:`tasks.bodies.clustering`)."""
        model = cls.start(X.shape[0], lambda rows: X[rows], n_landmarks=n_landmarks, n_neighbors=n_neighbors, rng=rng)
        dist, idx = model.nearest(X)
        model.solve(*model.graph_sums(dist, idx), n_components)
        model.embedding = model.place(dist, idx)
        model.component_labels = model.landmark_components[idx[:, 0]]
        return model

    @classmethod
    def start(cls, n: int, take_rows: Callable[[np.ndarray], np.ndarray], *, n_landmarks: int, n_neighbors: int,
              rng: np.random.Generator) -> TransferCutModel:
        """The landmarks of ``n`` rows (:func:`select_landmarks`) and sigma, the mean distance of at most
        :data:`SIGMA_SAMPLE` rows drawn at random to their K nearest landmarks (U-SPEC: the mean over all rows)."""
        landmarks = select_landmarks(n, take_rows, n_landmarks, rng)
        p = landmarks.shape[0]
        model = cls(landmarks, min(n_neighbors, p), 1.0, np.zeros((p, 0)), np.zeros((1, 0)), np.zeros(p, np.int64),
                    np.zeros((1, 0)))
        sample = np.sort(rng.choice(n, size=min(n, SIGMA_SAMPLE), replace=False))
        model.sigma = float(model.nearest(take_rows(sample))[0].mean()) or 1.0
        return model

    def graph_sums(self, dist: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The landmark side of the graph of the rows whose K nearest landmarks are ``dist``, ``idx`` (m, K):
        ``E = B^T D_X^-1 B`` (p, p), the landmark degrees ``B^T 1`` (p,) and the landmark links ``B^T B > 0`` (p, p).
        Each is a sum over rows: the sums of chunks add up to those of their union."""
        B = self._weights(dist, idx)
        B.eliminate_zeros()
        dx = np.asarray(B.sum(axis=1)).ravel()
        E = (B.T @ sp.diags(1.0 / dx) @ B).toarray()
        return E, np.asarray(B.sum(axis=0)).ravel(), (B.T @ B).toarray() > 0

    def solve(self, E: np.ndarray, dy: np.ndarray, links: np.ndarray, n_components: int) -> None:
        """Solve ``(D_Y - E) v = gamma D_Y v`` per part of the landmark graph (its components by ``links``) for the
        ``n_components`` smallest nontrivial eigenpairs; sets :attr:`maps`, the parts and their offsets."""
        from scipy.sparse.csgraph import connected_components

        p, k = self.landmarks.shape[0], n_components
        n_parts, parts = connected_components(sp.csr_matrix(links), directed=False)
        order = np.argsort(-np.bincount(parts, weights=dy), kind="stable")  # part 0: the heaviest
        parts = np.argsort(order)[parts]
        values, maps = np.full((n_parts, k), np.inf), np.zeros((p, k))
        for c in range(n_parts):
            mine = np.flatnonzero((parts == c) & (dy > 0))  # a landmark no point joins carries nothing
            if mine.size < 2:
                continue
            kc = min(k, mine.size - 1)
            gamma, V = eigh(np.diag(dy[mine]) - E[np.ix_(mine, mine)], np.diag(dy[mine]), subset_by_index=[0, kc])
            gamma = np.clip(gamma[1:], 0.0, 1.0 - 1e-12)  # the part's trivial (constant) vector dropped
            values[c, :kc] = gamma
            maps[mine, :kc] = V[:, 1:] / np.sqrt(1.0 - gamma)[None, :]  # 1 - lambda = sqrt(1 - gamma)
        self.maps, self.component_eigenvalues, self.landmark_components = maps, values, parts
        self.landmark_degrees = dy
        from eigenflow.spectral.embedding.eigenmaps import component_offsets

        # a row is a convex combination of map rows: max |maps| bounds every row, as max |embedding| does there
        self.component_offsets = component_offsets(maps, n_parts)

    def part_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Landmarks (C,) and graph volume (C,) of each part: the bound of its eigenvectors and the scale of its
        trivial vector (the volume of a part's rows equals that of its landmarks)."""
        return (np.bincount(self.landmark_components, minlength=self.component_offsets.shape[0]),
                np.bincount(self.landmark_components, weights=self.landmark_degrees,
                            minlength=self.component_offsets.shape[0]))

    def nearest(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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

    def place(self, dist: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """The embedding (m, k) of rows whose K nearest landmarks are ``dist``, ``idx`` (m, K), by blocks of rows."""
        U = np.zeros((idx.shape[0], self.maps.shape[1]))
        for a in range(0, idx.shape[0], SEARCH_BLOCK):
            w = self._gaussian(dist[a:a + SEARCH_BLOCK])
            w /= w.sum(axis=1, keepdims=True)
            block, near = U[a:a + SEARCH_BLOCK], idx[a:a + SEARCH_BLOCK]
            for j in range(near.shape[1]):  # one neighbour at a time: never (m, K, k)
                block += w[:, j:j + 1] * self.maps[near[:, j]]
            block += self.component_offsets[self.landmark_components[near[:, 0]]]  # its part's offset
        return U

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The embedding (m, k) of points ``X`` (m, d): ``u = D_X^-1 B v / (1 - lambda)`` of their landmark weights."""
        return self.place(*self.nearest(X))

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` of the map (landmarks, eigenvector maps, parts; not the fitted points' rows)."""
        return ({"landmarks": self.landmarks, "maps": self.maps, "component_eigenvalues": self.component_eigenvalues,
                 "landmark_components": self.landmark_components, "component_offsets": self.component_offsets,
                 "landmark_degrees": self.landmark_degrees},
                {"n_neighbors": self.n_neighbors, "sigma": self.sigma})

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> TransferCutModel:
        model = cls(arrays["landmarks"], attrs["n_neighbors"], attrs["sigma"], arrays["maps"],
                    arrays["component_eigenvalues"], arrays["landmark_components"].astype(np.int64),
                    arrays["component_offsets"])
        model.landmark_degrees = arrays["landmark_degrees"]
        return model
