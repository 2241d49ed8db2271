"""Laplacian eigenmaps with ``eigen_solver="nystrom"``: the fully connected heat-kernel graph, Nystrom-solved.

The one-shot Nystrom solver (:mod:`spectral.eigen.nystrom`, CK08 Sect. 4, Fowlkes et al.) works on
the data and a kernel, not on a sparse graph. So with ``eigen_solver="nystrom"`` the affinity is the fully
connected heat kernel ``K(x, y) = exp(-||x - y||^2 / sigma^2)`` (CK08 eq. 14) with ``sigma`` the mean
kNN distance of the data's kNN graph (the heat default of :mod:`spectral.weights`); ``weighting`` and
``symmetrize`` do not apply and the normalization must be "symmetric" or "random_walk". With ``C = K(X, Z)``
for m landmarks ``Z`` and ``K_mm^+ = N N^T`` (:class:`spectral.nystrom.NystromFeatures`), ``K ~ C N N^T C^T``,
degrees ``d = C z`` with ``z = N N^T C^T 1``, and the solver returns the top eigenpairs ``(mu_j, u_j)`` of
``D^-1/2 C N N^T C^T D^-1/2``. Embedding (the sklearn convention of :mod:`spectral.embedding`):
``f_j = D^-1/2 u_j`` for j = 1..k, eigenvalues ``lambda_j = 1 - mu_j``.

Out of sample (Bengio et al. 2004 with the Nystrom kernel): ``f_j(x) = (1 / (mu_j d_x)) sum_i K(x, x_i) f_ij``
with ``K(x, X) ~ c(x) N N^T C^T``: ``f_j(x) = c(x) G_j / (mu_j c(x) z)``, ``G = N N^T C^T F`` (m, k) computed
once at fit. Because the ``u_j`` are exact eigenvectors of the approximated matrix, ``f(x_i) = f_i`` for every
training point up to rounding. Cost: the solver's passes over X plus one more for ``C^T F``; transform
costs one kernel block (rows, m) per chunk, no kNN index.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_state_kind
from .eigen import eigensolve, sign_flip
from .errors import InputDataError
from .nystrom import DEFAULT_LANDMARKS, NystromFeatures

STATE_KIND = "laplacian_eigenmaps_nystrom"
STATE_VERSION = 1

#: Rows of X per kernel block when accumulating ``C^T F`` and in ``transform``.
CHUNK_ROWS = 4096


def nystrom_eigenmaps(X: np.ndarray, n_components: int, sigma: float, *, tol=None, random_state=None,
                      n_landmarks: int | None = None):
    """Fit the Nystrom Laplacian eigenmap of X (n, d) -> (embedding (n, k), eigenvalues (k,), model, info)."""
    n = X.shape[0]
    m = min(n, DEFAULT_LANDMARKS) if n_landmarks is None else n_landmarks
    features = NystromFeatures("rbf", m, gamma=1.0 / sigma**2, random_state=random_state).fit(X)
    res = eigensolve(X, n_components + 1, solver="nystrom", which="largest", normalized=True, features=features,
                     tol=tol, random_state=random_state)
    degrees = res.info["degrees"]
    F = res.vectors / np.sqrt(degrees)[:, None]
    F = sign_flip(F)[:, 1:]
    mu = res.values[1:]
    N = features.normalization_
    CtF = np.zeros((N.shape[0], F.shape[1]))
    Ct1 = np.zeros(N.shape[0])
    for i in range(0, n, CHUNK_ROWS):
        C = features.kernel_block(X[i : i + CHUNK_ROWS])
        CtF += C.T @ F[i : i + CHUNK_ROWS]
        Ct1 += C.sum(axis=0)
    model = NystromEigenmapsModel(features, N @ (N.T @ CtF), N @ (N.T @ Ct1), mu)
    info = {"eigen_solver": res.solver, "residuals": res.residuals[1:], "converged": res.converged,
            "n_iter": res.n_iter, "n_landmarks": int(res.info["n_landmarks"]), "degrees": degrees}
    return F, 1.0 - mu, model, info


class NystromEigenmapsModel:
    """Out-of-sample map ``f(x) = c(x) G / (mu c(x) z)`` of a Nystrom Laplacian eigenmap (module docstring).

    ``features`` (NystromFeatures), ``G`` (m, k), ``z`` (m,), ``mu`` (k,); storable with ``to_state``.
    """

    def __init__(self, features: NystromFeatures, G: np.ndarray, z: np.ndarray, mu: np.ndarray):
        self.features, self.G, self.z, self.mu = features, G, z, mu

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Embed X (rows, d) -> (rows, k)."""
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
        arrays = {"G": self.G, "z": self.z, "mu": self.mu, **{f"features/{k}": v for k, v in f_arrays.items()}}
        return arrays, {"kind": STATE_KIND, "version": STATE_VERSION, "features": f_attrs}

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> NystromEigenmapsModel:
        """Inverse of :meth:`to_state`."""
        check_state_kind(attrs, STATE_KIND, STATE_VERSION)
        f_arrays = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("features/")}
        features = NystromFeatures.from_state(f_arrays, attrs["features"])
        return cls(features, np.asarray(arrays["G"]), np.asarray(arrays["z"]), np.asarray(arrays["mu"]))
