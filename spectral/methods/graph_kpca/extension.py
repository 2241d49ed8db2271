"""Out-of-sample map of a fitted GraphKPCA whose new points find their kNN rows in a :class:`KNNIndex`.

A stored GraphKPCA (``solver="nystrom"``, rebuilt by :meth:`GraphKPCA.from_state`) keeps no copy of its
training points, so :meth:`GraphKPCA.transform` cannot search their neighbours. :class:`IndexedGraphKPCA`
pairs the model with a :class:`spectral.neighbours.index.KNNIndex` built over the fit points, in the order of the
model's rows (index position i = row i of ``eigenvectors_``): each block of new points is queried for its
``n_neighbors_`` nearest fit points and mapped by :meth:`GraphKPCA.transform_with_neighbors` (the
out-of-sample map of STG18 eq. 13 / 14 derived in :mod:`spectral.methods.graph_kpca.gkpca`) -- the same map the fit
flow applies to held-out points with their stored kNN rows.

The object follows the per-chunk protocol of the flows' write-back (an ``index`` attribute set per chunk,
``transform(X, return_info=True) -> (Z, info)``), so that the index travels to the workers once.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.methods.graph_kpca.gkpca import GraphKPCA


class IndexedGraphKPCA:
    """A fitted :class:`GraphKPCA` plus a kNN index over its fit points.

    Parameters
    ----------
    model : GraphKPCA
        Fitted (or rebuilt from its state) model.
    index : spectral.neighbours.index.KNNIndex or None
        Index over the model's n fit points, positions = model rows; required when the model has a kNN
        data graph with ``gamma > 0`` (otherwise new points are isolated nodes and need no neighbours).
    """

    def __init__(self, model: GraphKPCA, index=None):
        if not isinstance(model, GraphKPCA):
            raise InputDataError(f"model must be a fitted GraphKPCA; got {type(model).__name__}")
        self.model = model
        self.index = index

    @property
    def needs_neighbors(self) -> bool:
        """True when the out-of-sample map uses the new points' kNN rows (kNN data graph, gamma > 0)."""
        return self.model._kind == "knn" and self.model.gamma > 0

    def check_index(self) -> None:
        """Refuse an index whose size is not the model's number of fit points (or a missing one)."""
        if not self.needs_neighbors:
            return
        n_fit = self.model.eigenvectors_.shape[0]
        if self.index is None:
            raise InputDataError("index is required: the model has a kNN data graph (gamma > 0)")
        if self.index.n_samples != n_fit:
            raise InputDataError(f"index must be built over the model's {n_fit} fit points; got "
                                 f"{self.index.n_samples} points")

    def transform(self, X, return_info: bool = False):
        """Embed ``X (m, D)`` -> ``(m, d)``; with ``return_info`` also ``{"n_queried": m or 0}``."""
        self.check_index()
        X = np.asarray(X, dtype=np.float64)
        ind = dist = None
        if self.needs_neighbors:
            ind, dist = self.index.query(X, self.model.n_neighbors_)  # (m, k) fit positions, distances
        Z = self.model.transform_with_neighbors(X, ind, dist)
        if return_info:
            return Z, {"n_queried": int(X.shape[0]) if self.needs_neighbors else 0}
        return Z
