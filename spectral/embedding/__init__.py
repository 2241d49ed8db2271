"""Laplacian eigenmaps: :mod:`.eigenmaps` (the estimator and :func:`laplacian_eigenmaps_from_graph`),
:mod:`.out_of_sample` (the out-of-sample model of a fitted eigenmap) and :mod:`.nystrom_eigenmaps` (the
``eigen_solver="nystrom"`` variant on the fully connected heat kernel).
"""

from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps, laplacian_eigenmaps_from_graph

__all__ = ["LaplacianEigenmaps", "laplacian_eigenmaps_from_graph"]
