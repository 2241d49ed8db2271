"""How the rows of a Laplacian eigenmap become cluster labels: the NJW columns and an assignment rule.

Shared by :class:`~spectral.clustering.SpectralClustering` (everything in memory) and the pipeline's clustering
stage, which runs the same steps on row chunks: the columns are chosen from the eigenvalues alone
(:func:`choose_columns`); a row's features depend on that row only (:meth:`ClusterRule.features`); k-means runs its
restarts on a sample of rows and refines the centres with Lloyd iterations whose sums are added over chunks
(:func:`kmeans_centers`), so a chunked fit and an in-memory one with the same seed give the same centres.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import qr, svd

from eigenflow.spectral.errors import DisconnectedGraphError, ParameterError

ASSIGN_LABELS = ("kmeans", "cluster_qr", "discretize")
#: iterations of the Yu-Shi rotation search ("discretize"), as scikit-learn's ``discretize``
DISCRETIZE_MAX_ITER = 20
#: eigenvalues at most this are 0: the graph has as many parts as it has such eigenvalues
ZERO_EIGENVALUE = 1e-10
#: rows the k-means restarts run on (all rows when there are fewer); the other rows join in the Lloyd refinement
KMEANS_SAMPLE = 100_000
#: rows per block of the distance computations (bounds their temporary memory)
ROW_BLOCK = 1 << 18
#: Lloyd refinement over all rows: at most this many passes ...
LLOYD_MAX_ITER = 100
#: ... stopping once the centres move less than this (sum of squared shifts; the features have unit-norm rows)
LLOYD_TOL = 1e-8


def _row_normalize(V: np.ndarray) -> np.ndarray:
    """Rows of ``V`` (n, k) scaled to unit norm (all-zero rows stay zero)."""
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.where(norms > 0, norms, 1.0)


def qr_rotation(V: np.ndarray) -> np.ndarray:
    """The rotation (k, k) of the column-pivoted QR rule (Damle, Minden & Ying 2019) for ``V`` (n, k):
    labels are ``argmax |V R|`` per row. The pivots pick k well-spread rows; ``R = U W^T`` is the orthogonal
    polar factor of those rows (transposed)."""
    k = V.shape[1]
    _, _, piv = qr(V.T, pivoting=True)
    u, _, vt = svd(V[piv[:k], :].T)
    return u @ vt


def yu_shi_rotation(V: np.ndarray, rng: np.random.Generator, max_iter: int = DISCRETIZE_MAX_ITER):
    """Yu & Shi (2003) multiclass discretization of ``V`` (n, k): ``(column_scale (k,), rotation (k, k), labels (n,))``.

    As scikit-learn's ``discretize``: each column scaled to norm sqrt(n), oriented so that its first entry is
    negative, rows unit-normalized; then alternate the discrete partition closest to ``V R`` (row argmax) and
    the rotation closest to that partition (an SVD) until the objective stops changing. A new row ``v`` gets
    ``argmax(normalize(v * column_scale) R)``.
    """
    n, k = V.shape
    norms = np.linalg.norm(V, axis=0)
    scale = np.sqrt(n) / np.where(norms > 0, norms, 1.0)
    first = V[0] * scale
    scale = np.where(first != 0, -np.sign(first) * scale, scale)
    Vn = _row_normalize(V * scale)
    R = np.zeros((k, k))
    R[:, 0] = Vn[rng.integers(n)]
    c = np.zeros(n)
    for j in range(1, k):
        c += np.abs(Vn @ R[:, j - 1])
        R[:, j] = Vn[c.argmin()]
    last = 0.0
    for it in range(max_iter + 1):
        labels = (Vn @ R).argmax(axis=1)
        T = np.zeros((k, k))
        np.add.at(T, labels, Vn)  # (indicator matrix)^T V
        U, S, Vh = np.linalg.svd(T)
        ncut = 2.0 * (n - S.sum())
        if abs(ncut - last) < np.finfo(float).eps or it == max_iter:
            break
        last = ncut
        R = Vh.T @ U.T
    return scale, R, labels




def choose_columns(component_eigenvalues: np.ndarray, sizes: np.ndarray, k: int | None, max_clusters: int
                   ) -> tuple[list[tuple[float, int, int]], int, float | None]:
    """The eigenmap columns to cluster: ``(columns, k, eigengap)``, a column ``(eigenvalue, component, j)``.

    ``component_eigenvalues`` (C, k_e): each component's nontrivial Laplacian eigenvalues; ``sizes`` (C,) its points.
    Candidates are every component's trivial vector (``j = -1``, eigenvalue 0) and its eigenvectors, in ascending
    eigenvalue order. ``k=None`` picks k in [2, max_clusters] at the largest relative eigengap
    ``(lambda_k - lambda_(k-1)) / lambda_k``, the absolute gap returned. A connected graph: its trivial vector is
    dropped; several components (or a second eigenvalue at most :data:`ZERO_EIGENVALUE`): the k smallest (indicators
    included). More components than k > 1 raise :class:`DisconnectedGraphError`.
    """
    comp_values = np.asarray(component_eigenvalues, dtype=np.float64)
    n_comp = len(sizes)
    cands = [(0.0, c, -1) for c in range(n_comp)]
    for c in range(n_comp):
        for j in range(min(comp_values.shape[1], int(sizes[c]) - 1)):
            if np.isfinite(comp_values[c, j]):  # (inf: a part with fewer eigenvectors)
                cands.append((float(comp_values[c, j]), c, j))
    cands.sort(key=lambda t: (max(t[0], 0.0), t[2] >= 0))
    eigengap = None
    if k is None:
        values = np.maximum(np.array([t[0] for t in cands[: max_clusters + 1]]), 0.0)
        if values.size < 3:
            raise ParameterError(f"n_clusters='auto' needs at least 3 Laplacian eigenvalues; got {values.size} "
                                 f"for n_samples={int(np.sum(sizes))}")
        gaps = np.diff(values)[1:]  # gaps[i] = lambda_(i+2) - lambda_(i+1): k = i + 2 clusters
        relative = np.divide(gaps, values[2:], out=np.zeros_like(gaps), where=values[2:] > 0)
        k = int(np.argmax(relative)) + 2
        eigengap = float(gaps[k - 2])
    if n_comp > k > 1:
        raise DisconnectedGraphError(
            f"the kNN graph has {n_comp} connected components, more than n_clusters={k}: every component needs "
            "at least one cluster. Use more n_neighbors or n_clusters"
        )
    # a graph whose one "component" has a second eigenvalue 0 (a landmark graph in parts) is not connected either
    connected = n_comp == 1 and not (len(cands) > 1 and cands[1][0] <= ZERO_EIGENVALUE)
    return (cands[1: k + 1] if connected else cands[:k]), k, eigengap


@dataclass
class ClusterRule:
    """The map from eigenmap rows to labels: NJW features of the chosen ``columns``, then ``assign_labels``.

    ``volumes`` (C,): each component's graph volume (sum of degrees; its trivial vector is ``1/sqrt(volume)``);
    ``offsets`` (C, k_e): the eigenmap's per-component translations. ``centers`` (k, k) for "kmeans"; ``rotation``
    (k, k) for "cluster_qr" / "discretize", with ``column_scale`` (k,) for "discretize".
    """

    columns: list[tuple[float, int, int]]
    volumes: np.ndarray
    offsets: np.ndarray
    assign_labels: str
    centers: np.ndarray | None = None
    rotation: np.ndarray | None = None
    column_scale: np.ndarray | None = None

    @property
    def n_clusters(self) -> int:
        return len(self.columns)

    def features(self, Z: np.ndarray, comp: np.ndarray) -> np.ndarray:
        """The row-normalized clustering embedding (m, k) of eigenmap rows ``Z`` (m, k_e) of components ``comp``."""
        V = np.zeros((Z.shape[0], len(self.columns)))
        for a in range(0, Z.shape[0], ROW_BLOCK):  # (block, k) temporaries
            Zb = np.asarray(Z[a:a + ROW_BLOCK], dtype=np.float64) - self.offsets[comp[a:a + ROW_BLOCK]]
            Vb, cb = V[a:a + ROW_BLOCK], comp[a:a + ROW_BLOCK]
            for col, (_, c, j) in enumerate(self.columns):
                mine = cb == c
                Vb[mine, col] = 1.0 / np.sqrt(self.volumes[c]) if j < 0 else Zb[mine, j]
            Vb[...] = _row_normalize(Vb)
        return V

    def component_of(self, Z: np.ndarray) -> np.ndarray:
        """The component (m,) of new eigenmap rows ``Z``: the nearest component offset on the first axis
        (components lie 4 R apart there and within R of their offset, :mod:`spectral.embedding.eigenmaps`)."""
        if self.offsets.shape[0] == 1:
            return np.zeros(Z.shape[0], dtype=np.int64)
        return np.abs(Z[:, :1] - self.offsets[None, :, 0]).argmin(axis=1)

    def labels(self, V: np.ndarray) -> np.ndarray:
        """Labels (m,) of feature rows ``V`` (m, k): the nearest centre, or the argmax of the rotated row."""
        if self.assign_labels == "kmeans":
            return nearest_centers(V, self.centers)
        if self.assign_labels == "cluster_qr":
            return np.abs(V @ self.rotation).argmax(axis=1).astype(np.int64)
        return (_row_normalize(V * self.column_scale) @ self.rotation).argmax(axis=1).astype(np.int64)

    def fit_assignment(self, n: int, take_rows: Callable[[np.ndarray], np.ndarray],
                       lloyd_sums: Callable[[np.ndarray], tuple], rng: np.random.Generator, *, n_init: int,
                       all_rows: Callable[[], np.ndarray] | None = None) -> int:
        """Fit the assignment on ``n`` feature rows; returns the Lloyd passes (0 for the rotations).

        "kmeans": :func:`kmeans_centers` (``take_rows(rows)`` gives the features of sorted ``rows``; ``lloyd_sums``
        as there). The rotations need every row at once: ``all_rows()`` gives the features (n, k).
        """
        if self.assign_labels == "kmeans":
            self.centers, n_iter = kmeans_centers(n, self.n_clusters, take_rows, lloyd_sums, rng, n_init=n_init)
            return n_iter
        V = all_rows()
        if self.assign_labels == "cluster_qr":
            self.rotation = qr_rotation(V)
        else:
            self.column_scale, self.rotation, _ = yu_shi_rotation(V, rng)
        return 0

    def to_attrs(self) -> dict:
        """JSON-able state (the arrays are small: (C,), (C, k_e), (k, k))."""
        return {"columns": [list(c) for c in self.columns], "volumes": np.asarray(self.volumes).tolist(),
                "offsets": np.asarray(self.offsets).tolist(), "assign_labels": self.assign_labels,
                **{name: np.asarray(getattr(self, name)).tolist()
                   for name in ("centers", "rotation", "column_scale") if getattr(self, name) is not None}}

    def to_state(self) -> tuple[dict, dict]:
        """The ``to_state`` protocol of stored models (:mod:`spectral.methods.estimator_state`)."""
        return {}, self.to_attrs()

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> ClusterRule:
        return cls.from_attrs(attrs)

    @classmethod
    def from_attrs(cls, attrs: dict) -> ClusterRule:
        arrays = {name: np.asarray(attrs[name], dtype=np.float64)
                  for name in ("centers", "rotation", "column_scale") if name in attrs}
        return cls([(float(v), int(c), int(j)) for v, c, j in attrs["columns"]],
                   np.asarray(attrs["volumes"], dtype=np.float64),
                   np.asarray(attrs["offsets"], dtype=np.float64).reshape(len(attrs["volumes"]), -1),
                   attrs["assign_labels"], **arrays)


def nearest_centers(V: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Index (m,) of the nearest of ``centers`` (k, p) to each row of ``V`` (m, p), by blocks of
    :data:`ROW_BLOCK` rows (the distances of one block in memory at a time)."""
    c2 = (centers * centers).sum(axis=1)[None, :]
    out = np.empty(V.shape[0], dtype=np.int64)
    for a in range(0, V.shape[0], ROW_BLOCK):
        B = V[a:a + ROW_BLOCK]
        out[a:a + ROW_BLOCK] = (c2 - 2.0 * B @ centers.T).argmin(axis=1)  # |v|^2 is the same for every centre
    return out


def lloyd_sums(V: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One Lloyd pass over rows ``V`` (m, p): per-centre sums (k, p) and counts (k,) of the rows nearest to each
    of ``centers`` (k, p), and the inertia. Sums of chunks add up to the sums of their union."""
    labels = nearest_centers(V, centers)
    k = centers.shape[0]
    sums = np.zeros((k, V.shape[1]))
    inertia = 0.0
    for a in range(0, V.shape[0], ROW_BLOCK):
        B, lab = V[a:a + ROW_BLOCK], labels[a:a + ROW_BLOCK]
        np.add.at(sums, lab, B)
        inertia += float(((B - centers[lab]) ** 2).sum())
    return sums, np.bincount(labels, minlength=k).astype(np.float64), inertia


def kmeans_centers(n: int, k: int, take_rows: Callable[[np.ndarray], np.ndarray],
                   lloyd: Callable[[np.ndarray], tuple], rng: np.random.Generator, *, n_init: int,
                   sample: int = KMEANS_SAMPLE, max_iter: int = LLOYD_MAX_ITER, tol: float = LLOYD_TOL
                   ) -> tuple[np.ndarray, int]:
    """k-means centres (k, p) of ``n`` rows for data too large for one process, and the Lloyd passes made.

    scikit-learn's ``KMeans`` (k-means++ seeding, ``n_init`` restarts) on ``min(n, sample)`` rows drawn from
    ``rng`` (``take_rows(sorted rows)`` gives their features), then Lloyd passes over all rows (``lloyd(centres)``
    returns the summed :func:`lloyd_sums` of every chunk) until the centres move less than ``tol``. A centre that
    loses every row keeps its place.
    """
    from sklearn.cluster import KMeans

    rows = np.arange(n) if n <= sample else np.sort(rng.choice(n, size=sample, replace=False))
    seed = int(rng.integers(0, 2**31 - 1))
    centers = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(take_rows(rows)).cluster_centers_
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        sums, counts, _ = lloyd(centers)
        moved = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1.0)[:, None], centers)
        shift = float(((moved - centers) ** 2).sum())
        centers = moved
        if shift <= tol:
            break
    return centers, n_iter
