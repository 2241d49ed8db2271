"""Laplacian eigenmaps with ``eigen_solver="nystrom"``: the fully connected heat-kernel graph, Nystrom-solved.

The one-shot Nystrom solver (:mod:`spectral.eigen.nystrom`, CK08 Sect. 4, Fowlkes et al.) works on
the data and a kernel, not on a sparse graph. So with ``eigen_solver="nystrom"`` the affinity is the fully
connected heat kernel ``K(x, y) = exp(-||x - y||^2 / sigma^2)`` (CK08 eq. 14) with ``sigma`` the mean
kNN distance of the data's kNN graph (the heat default of :mod:`spectral.graph.weights`); ``weighting`` and
``symmetrize`` do not apply and the normalization must be "symmetric" or "random_walk". With ``C = K(X, Z)``
for m landmarks ``Z`` and ``K_mm^+ = N N^T`` (:class:`spectral.operators.nystrom_features.NystromFeatures`), ``K ~ Phi
Phi^T`` with ``Phi = C N`` (n, r). As scikit-learn's ``SpectralEmbedding`` (scipy's ``csgraph.laplacian``), the graph
has no self-loops: ``W = Phi Phi^T - S`` with ``S = diag(Phi Phi^T)`` (the approximated kernel's diagonal, 1
up to round-off when every point is a landmark), degrees ``d = Phi Phi^T 1 - diag(S)``, and the top
eigenpairs ``(mu_j, u_j)`` of ``D^-1/2 W D^-1/2 = U U^T - D^-1 S`` (``U = D^-1/2 Phi``) come from
:func:`spectral.eigen.eigensolve` on that implicit operator (dense ``eigh`` up to 2000 points). Embedding
(the sklearn convention of :mod:`spectral.embedding.eigenmaps`): ``f_j = D^-1/2 u_j`` for j = 1..k, eigenvalues
``lambda_j = 1 - mu_j``.

Out of sample (Bengio et al. 2004 with the Nystrom kernel): a new point x is not a node of the graph, so
``f_j(x) = (1 / (mu_j d_x)) sum_i K(x, x_i) f_ij`` with ``K(x, X) ~ c(x) N N^T C^T``: ``f_j(x) = c(x) G_j /
(mu_j c(x) z)``, ``G = N N^T C^T F`` (m, k), ``z = N N^T C^T 1`` computed once at fit. A query at distance 0
from a training point IS that node and gets its training row (found by an exact kNN index over the training
points), so ``transform(X_train)`` reproduces the fit. Memory: ``Phi`` (n, r) at fit; transform costs one
kernel block (rows, m) per chunk and one index query.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral._validation import check_state_kind
from eigenflow.spectral.eigen import eigensolve, sign_flip
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.neighbours.index import KNNIndex
from eigenflow.spectral.operators.linear import DiagonalOperator, LowRankOperator, ScaledSum
from eigenflow.spectral.operators.nystrom_features import DEFAULT_LANDMARKS, NystromFeatures

STATE_KIND = "laplacian_eigenmaps_nystrom"
STATE_VERSION = 2

#: Rows of X per kernel block when accumulating ``C^T F`` and in ``transform``.
CHUNK_ROWS = 4096


def nystrom_eigenmaps(X: np.ndarray, n_components: int, sigma: float, *, tol=None, random_state=None,
                      n_landmarks: int | None = None, index: KNNIndex | None = None):
    """Fit the Nystrom Laplacian eigenmap of X (n, d) -> (embedding (n, k), eigenvalues (k,), model, info).

    ``index``: a :class:`spectral.neighbours.index.KNNIndex` over X (e.g. the one that gave sigma), kept by the model to
    recognise training points in ``transform``; None builds an exact one.
    """
    n = X.shape[0]
    m = min(n, DEFAULT_LANDMARKS) if n_landmarks is None else n_landmarks
    features = NystromFeatures("rbf", m, gamma=1.0 / sigma**2, random_state=random_state).fit(X)
    Phi = features.transform(X)  # (n, r): K ~ Phi Phi^T
    Pt1 = Phi.sum(axis=0)
    self_loops = np.einsum("ij,ij->i", Phi, Phi)  # (n,) diagonal of Phi Phi^T
    degrees = Phi @ Pt1 - self_loops  # row sums of W = Phi Phi^T - S
    if np.any(degrees <= 0):
        raise InputDataError(
            f"{int(np.sum(degrees <= 0))} points have no positive weight to the others in the Nystrom heat "
            f"kernel (sigma = {sigma:.3g}): isolated points; use more n_neighbors (a larger sigma) or more landmarks"
        )
    op = ScaledSum([LowRankOperator(Phi / np.sqrt(degrees)[:, None]), DiagonalOperator(self_loops / degrees)],
                   [1.0, -1.0])
    res = eigensolve(op, n_components + 1, which="largest", solver="auto", tol=tol, random_state=random_state)
    F = sign_flip(res.vectors / np.sqrt(degrees)[:, None])[:, 1:]
    mu = res.values[1:]
    N = features.normalization_
    if index is None:
        index = KNNIndex.build(X, 1, method="exact")
    model = NystromEigenmapsModel(features, N @ (Phi.T @ F), N @ Pt1, mu, embedding=F, index=index)
    info = {"eigen_solver": "nystrom", "operator_solver": res.solver, "residuals": res.residuals[1:],
            "converged": res.converged, "n_iter": res.n_iter, "n_landmarks": int(features.landmarks_.shape[0]),
            "degrees": degrees}
    return F, 1.0 - mu, model, info


class NystromEigenmapsModel:
    """Out-of-sample map ``f(x) = c(x) G / (mu c(x) z)`` of a Nystrom Laplacian eigenmap (module docstring).

    ``features`` (NystromFeatures), ``G`` (m, k), ``z`` (m,), ``mu`` (k,), ``embedding`` (n, k) the training
    rows given to queries equal to a training point (found with ``index``, a KNNIndex over the training
    points: not stored, :meth:`rebuild_index` recreates it); storable with ``to_state``.
    """

    def __init__(self, features: NystromFeatures, G: np.ndarray, z: np.ndarray, mu: np.ndarray,
                 embedding: np.ndarray, index: KNNIndex | None = None):
        self.features, self.G, self.z, self.mu = features, G, z, mu
        self.embedding, self.index = embedding, index

    def rebuild_index(self, X_train) -> None:
        """Rebuild the exact training index from the training X (the same rows, in the same order, as at fit)."""
        if len(X_train) != self.embedding.shape[0]:
            raise InputDataError(f"X_train has {len(X_train)} rows; the model was fitted on {self.embedding.shape[0]}")
        self.index = KNNIndex.build(np.asarray(X_train), 1, method="exact")

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Embed X (rows, d) -> (rows, k); rows equal to a training point get its training row."""
        if self.index is None:
            raise ParameterError("the model has no training index: call rebuild_index(X_train) first")
        out = self._extend(X)
        ind, dist = self.index.query(X, 1)
        exact = dist[:, 0] == 0
        out[exact] = self.embedding[ind[exact, 0]]
        return out

    def _extend(self, X: np.ndarray) -> np.ndarray:
        """The out-of-sample formula for points that are not graph nodes, (rows, k)."""
        blocks = []
        for i in range(0, X.shape[0], CHUNK_ROWS):
            C = self.features.kernel_block(np.asarray(X[i : i + CHUNK_ROWS], dtype=np.float64))
            d = C @ self.z
            if np.any(d <= 0):
                raise InputDataError(
                    f"Nystrom degree c(x) z is not positive for {int(np.sum(d <= 0))} points (far from every "
                    "landmark for this sigma): the extension is undefined there"
                )
            blocks.append((C @ self.G) / (d[:, None] * self.mu[None, :]))
        return np.vstack(blocks)

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` without pickle; the NystromFeatures state is nested under ``features/``."""
        f_arrays, f_attrs = self.features.to_state()
        arrays = {"G": self.G, "z": self.z, "mu": self.mu, "embedding": self.embedding,
                  **{f"features/{k}": v for k, v in f_arrays.items()}}
        return arrays, {"kind": STATE_KIND, "version": STATE_VERSION, "features": f_attrs}

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> NystromEigenmapsModel:
        """Inverse of :meth:`to_state`; call :meth:`rebuild_index` before ``transform``."""
        check_state_kind(attrs, STATE_KIND, STATE_VERSION)
        f_arrays = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("features/")}
        features = NystromFeatures.from_state(f_arrays, attrs["features"])
        return cls(features, np.asarray(arrays["G"]), np.asarray(arrays["z"]), np.asarray(arrays["mu"]),
                   np.asarray(arrays["embedding"]))
