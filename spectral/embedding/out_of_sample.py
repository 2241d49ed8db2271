"""The out-of-sample map of a fitted Laplacian eigenmap: :class:`LaplacianEigenmapsModel` (Nystrom, Bengio et al.
2004), storable without pickle and applied chunk by chunk; the eigenproblem and the estimator are in
:mod:`spectral.embedding.eigenmaps`."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._validation import check_state_kind
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph.weights import WeightParams, query_weights
from eigenflow.spectral.neighbours.index import KNNIndex, check_knn_graph

#: A new point is weighted against its CANDIDATE_FACTOR * k nearest training points: its own k neighbours
#: plus the training points whose k-th-neighbour radius it falls into (see spectral.graph.weights.query_weights).
CANDIDATE_FACTOR = 3


def candidate_count(n_train: int, n_neighbors: int) -> int:
    """Candidate training neighbours the out-of-sample map weighs a new point against:
    ``min(n_train, CANDIDATE_FACTOR * n_neighbors)`` (what :meth:`LaplacianEigenmapsModel.transform` queries, and
    what a caller that finds the candidates itself must pass to :meth:`~LaplacianEigenmapsModel.transform_candidates`)."""
    return min(int(n_train), CANDIDATE_FACTOR * int(n_neighbors))

#: Nystrom divides by mu_j = 1 - lambda_j (normalized) or d_x - lambda_j (unnormalized): refuse below this.
NYSTROM_DENOMINATOR_MIN = 1e-10

STATE_KIND = "laplacian_eigenmaps"
STATE_VERSION = 1


class LaplacianEigenmapsModel:
    """Out-of-sample map of a fitted Laplacian eigenmap (Nystrom, Bengio et al. 2004).

    For a new point ``x`` with weight row ``W(x, .)`` against the training points (the row it would get if
    added to the graph, :func:`spectral.graph.weights.query_weights`) and degree ``d_x = sum_i W(x, x_i)``:

    - normalized (symmetric / random walk): with ``M = D^-1/2 W D^-1/2``, ``M u_j = mu_j u_j``,
      ``mu_j = 1 - lambda_j``, Nystrom gives ``u_j(x) = (1/mu_j) sum_i W(x, x_i) / sqrt(d_x d_i) u_ij``; dividing
      by ``sqrt(d_x)`` as in the fit (``f_ij = u_ij / sqrt(d_i)``):
      ``f_j(x) = (1 / (mu_j d_x)) sum_i W(x, x_i) f_ij`` (LQCL09 eq. 17-19 in this convention). It needs only
      row ratios, computed without underflow (:func:`query_weights` with ``return_log_scale``).
    - unnormalized: from ``(D - W) f_j = lambda_j f_j``: ``f_j(x) = sum_i W(x, x_i) f_ij / (d_x - lambda_j)``.

    For a training point with its training row both give back ``f_ij`` (``D^-1 W f = mu f``), up to the
    eigensolver's residual. Rule for exact matches: a query at distance exactly 0 (float32 kNN distance)
    from a training point IS that training point and gets its stored embedding row (so ``transform(X_train) ==
    embedding_`` bitwise; with duplicated training points, the row of the first duplicate the kNN query returns). With
    several graph components, a new point is extended within the component that carries most of its weight (on the
    component's untranslated rows, then translated by its ``component_offsets`` row). A new point with no edge (all
    weights 0, possible with ``symmetrize="and"``) is isolated and gets zeros, like isolated training
    points; ``transform(..., return_info=True)`` counts them.

    The state (``to_state``) holds embedding, eigenvalues, component labels, degrees, per-point scales and
    radii, and parameters; the kNN index is not stored: :meth:`rebuild_index` recreates it from the stored
    training X (one index construction, see :class:`spectral.neighbours.index.KNNIndex`).
    """

    def __init__(self, embedding, component_eigenvalues, component_labels, degrees, scales, radii,
                 weight_params: WeightParams, normalization: str, knn_params: dict, index=None,
                 component_offsets=None):
        self.embedding = embedding
        # (C, k) translation of each component ("per_component" mode); the extension maps the untranslated rows
        self.component_offsets = (np.zeros_like(np.asarray(component_eigenvalues, dtype=np.float64))
                                  if component_offsets is None else np.asarray(component_offsets, dtype=np.float64))
        self.component_eigenvalues = component_eigenvalues
        self.component_labels = component_labels
        self.degrees = degrees
        self.scales = scales
        self.radii = radii
        self.weight_params = weight_params
        self.normalization = normalization
        self.knn_params = dict(knn_params)
        self.index = index

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)``: numeric arrays and JSON-able attributes (no pickle needed)."""
        arrays = {
            "embedding": self.embedding,
            "component_eigenvalues": self.component_eigenvalues,
            "component_labels": self.component_labels,
            "degrees": self.degrees,
            "scales": self.scales,
            "radii": self.radii,
            "component_offsets": self.component_offsets,
        }
        attrs = self.state_attrs(self.normalization, self.weight_params, self.knn_params)
        return {k: np.asarray(v) for k, v in arrays.items()}, attrs

    @staticmethod
    def state_attrs(normalization: str, weight_params: WeightParams, knn_params: dict) -> dict:
        """The attributes of :meth:`to_state` (for a writer that never holds the whole model)."""
        return {"kind": STATE_KIND, "version": STATE_VERSION, "normalization": normalization,
                "weight_params": weight_params.to_attrs(), "knn_params": dict(knn_params)}

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> LaplacianEigenmapsModel:
        """Inverse of :meth:`to_state`; call :meth:`rebuild_index` (or :meth:`attach_index`) before use."""
        check_state_kind(attrs, STATE_KIND, STATE_VERSION)
        a = {k: np.asarray(v) for k, v in arrays.items()}
        return cls(a["embedding"], a["component_eigenvalues"], a["component_labels"].astype(np.int64),
                   a["degrees"], a["scales"], a["radii"], WeightParams.from_attrs(attrs["weight_params"]),
                   attrs["normalization"], attrs["knn_params"], component_offsets=a.get("component_offsets"))

    def attach_index(self, index: KNNIndex) -> None:
        """Use an already built index of the training points."""
        if index.n_samples != self.embedding.shape[0]:
            raise InputDataError(
                f"the index has {index.n_samples} points; the model was fitted on {self.embedding.shape[0]}"
            )
        self.index = index

    def rebuild_index(self, X_train: Any) -> None:
        """Rebuild the kNN index from the training X (the same rows, in the same order, as at fit)."""
        self.attach_index(KNNIndex.rebuild(X_train, self.knn_params))

    @property
    def n_candidates(self) -> int:
        """Candidate training neighbours per new point (:func:`candidate_count`)."""
        return candidate_count(self.embedding.shape[0], self.weight_params.n_neighbors)

    def transform(self, X: Any, *, return_info: bool = False):
        """Embed new points ``X`` (m, d) -> (m, k) (see the class docstring): their :attr:`n_candidates` nearest
        training points from the index, then :meth:`transform_candidates`."""
        if self.index is None:
            raise ParameterError("the model has no kNN index: call rebuild_index(X_train) first")
        idx, dist = self.index.query(X, self.n_candidates)
        return self.transform_candidates(idx, dist, return_info=return_info)

    def transform_candidates(self, indices: Any, distances: Any, *, return_info: bool = False):
        """Embed new points known by their candidate training neighbours -> (m, k) (the Nystrom map of the class
        docstring; :meth:`transform` finds the candidates with the index, a sharded fit finds them per shard).

        Parameters
        ----------
        indices : array of int, shape (m, kc)
            Training points (rows of :attr:`embedding`) nearest to each new point, sorted by distance; ``kc``
            should be :attr:`n_candidates` (at least ``n_neighbors``; fewer candidates miss reverse neighbours).
        distances : array of float, shape (m, kc)
            Their distances, as :meth:`spectral.neighbours.index.KNNIndex.query` returns them (computed in float64 from
            the coordinates, :func:`spectral.neighbours._refine.refine`); 0 in the first column marks an exact match.

        Returns
        -------
        ndarray, shape (m, n_components); with ``return_info`` also ``{"n_exact", "n_isolated"}``
        """
        idx, dist = check_knn_graph(indices, distances, n_samples=self.embedding.shape[0])
        if idx.shape[1] < self.weight_params.n_neighbors:
            raise InputDataError(f"indices must hold at least n_neighbors={self.weight_params.n_neighbors} candidates "
                                 f"per row (n_candidates={self.n_candidates}); got {idx.shape[1]}")
        out = np.zeros((idx.shape[0], self.embedding.shape[1]))
        exact = dist[:, 0] == 0.0
        out[exact] = self.embedding[idx[exact, 0]]
        rest = np.flatnonzero(~exact)
        n_isolated = 0
        if rest.size:
            out[rest], n_isolated = self._extend(idx[rest], dist[rest])
        if return_info:
            return out, {"n_exact": int(exact.sum()), "n_isolated": n_isolated}
        return out

    def _extend(self, idx: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, int]:
        sym = self.normalization != "unnormalized"
        Wq, shift = query_weights(idx, dist, self.weight_params, self.scales, self.radii,
                                  return_log_scale=True)
        comp = self._assign_components(Wq)
        Wq = Wq.tocoo()
        same = self.component_labels[Wq.col] == comp[Wq.row]
        Wq = sp.csr_matrix((Wq.data * same, (Wq.row, Wq.col)), shape=Wq.shape)
        row_sum = np.asarray(Wq.sum(axis=1)).ravel()
        isolated = row_sum == 0
        lam = self.component_eigenvalues[comp]  # (m, k)
        if sym:
            denom = row_sum[:, None] * (1.0 - lam)  # d_x * mu_j, both in the shifted scale
            bad = (1.0 - lam) < NYSTROM_DENOMINATOR_MIN
        else:
            d_x = row_sum * np.exp(shift)
            Wq = sp.diags(np.exp(shift)) @ Wq
            denom = d_x[:, None] - lam
            bad = denom < NYSTROM_DENOMINATOR_MIN
        bad &= ~isolated[:, None] & np.any(self.embedding != 0, axis=0)[None, :]
        if bad.any():
            raise InputDataError(
                f"Nystrom extension undefined for {int(bad.any(axis=1).sum())} points: a denominator "
                f"({'1 - lambda_j' if sym else 'd_x - lambda_j'}) is below {NYSTROM_DENOMINATOR_MIN}"
            )
        offsets = self.component_offsets
        translated = bool(np.any(offsets))
        base = self.embedding - offsets[self.component_labels] if translated else self.embedding
        numer = np.asarray(Wq @ base)
        out = np.where(isolated[:, None], 0.0, numer / np.where(isolated[:, None], 1.0, denom))
        if translated:
            out[~isolated] += offsets[comp[~isolated]]
        return out, int(isolated.sum())

    def _assign_components(self, Wq: sp.csr_matrix) -> np.ndarray:
        n_comp = self.component_eigenvalues.shape[0]
        if n_comp == 1:
            return np.zeros(Wq.shape[0], dtype=np.int64)
        onehot = sp.csr_matrix(
            (np.ones(self.component_labels.size), (np.arange(self.component_labels.size), self.component_labels)),
            shape=(self.component_labels.size, n_comp),
        )
        return np.asarray((Wq @ onehot).toarray().argmax(axis=1)).ravel().astype(np.int64)
