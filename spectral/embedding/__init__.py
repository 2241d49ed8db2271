"""Laplacian eigenmaps: :mod:`.eigenmaps` (the estimator and :func:`laplacian_eigenmaps_from_graph`),
:mod:`.out_of_sample` (the out-of-sample model of a fitted eigenmap), :mod:`.nystrom_eigenmaps` (the
``eigen_solver="nystrom"`` variant on the fully connected heat kernel) and :mod:`.alignment` (a refit's embedding
aligned to the previous model's on the rows both hold).
"""

from eigenflow.spectral.embedding.alignment import AlignedEmbedding, align_embedding
from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps, laplacian_eigenmaps_from_graph

__all__ = ["AlignedEmbedding", "LaplacianEigenmaps", "align_embedding", "laplacian_eigenmaps_from_graph"]
