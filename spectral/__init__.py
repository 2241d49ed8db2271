"""eigenflow's mathematical core: graphs, Laplacians, kernels, eigensolvers and spectral embeddings.

Pure numpy / scipy / dask / pynndescent / scikit-learn: no file I/O and no Prefect (see ARCHITECTURE.md).
Public names are resolved lazily (PEP 562), so ``import eigenflow.spectral`` stays cheap and does not pay numba's
compile time until a kNN routine is actually used.

>>> from eigenflow.spectral import LaplacianEigenmaps          # doctest: +SKIP
>>> Z = LaplacianEigenmaps(n_components=2, random_state=0).fit_transform(X)  # doctest: +SKIP

The docstrings cite the methods' papers by key, with their section and equation numbers (full references in
docs/methods.md):

- CK08: R. Chatpatanasiri, B. Kijsirikul, A unified semi-supervised dimensionality reduction framework for
  manifold learning, arXiv:0804.0924, 2008 (DNE, MFA, LFDA: :mod:`spectral.methods.discriminant`);
- OV19: C. Örnek, E. Vural, Nonlinear supervised dimensionality reduction via smooth regular embeddings,
  Pattern Recognition 87, 2019 (NSSE, SUPLAP: :mod:`spectral.methods.nsse`);
- LQCL09: W. Liu, B. Qian, J. Cui, J. Liu, Spectral kernel learning for semi-supervised classification, IJCAI
  2009 (TSK, RSK: :mod:`spectral.methods.spectral_kernels`);
- STG18: Y. Shen, P. A. Traganitis, G. B. Giannakis, Graph-adaptive nonlinear dimensionality reduction,
  arXiv:1801.09390, 2018 (GraphKPCA, MultiGraphKPCA, LNEG: :mod:`spectral.methods.graph_kpca`).
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it. Only the public API: estimators, the functional pipeline
# (kNN -> weights -> Laplacian -> eigensolve), kernels and the errors; internals (operators, landmark
# selection, seeds, metrics) are imported from their submodules.
_EXPORTS: dict[str, str] = {
    # errors
    "EigenflowError": "eigenflow.spectral.errors",
    "ParameterError": "eigenflow.spectral.errors",
    "InputDataError": "eigenflow.spectral.errors",
    "InputTypeError": "eigenflow.spectral.errors",
    "ParameterAdjustedWarning": "eigenflow.spectral.errors",
    "KernelFallbackWarning": "eigenflow.spectral.errors",
    "DisconnectedGraphError": "eigenflow.spectral.errors",
    "ConvergenceError": "eigenflow.spectral.errors",
    "NotPositiveDefiniteError": "eigenflow.spectral.errors",
    # graphs and Laplacians (the spine)
    "knn_graph": "eigenflow.spectral.neighbours.knn",
    "KNNIndex": "eigenflow.spectral.neighbours.index",
    "knn_weights": "eigenflow.spectral.graph.weights",
    "laplacian": "eigenflow.spectral.graph.laplacian",
    "dense_laplacian": "eigenflow.spectral.graph.laplacian",
    "connected_components": "eigenflow.spectral.graph.laplacian",
    "check_connected": "eigenflow.spectral.graph.laplacian",
    "laplacian_eigenmaps_from_graph": "eigenflow.spectral.embedding.eigenmaps",
    # eigensolvers, kernels, Nystrom
    "eigensolve": "eigenflow.spectral.eigen",
    "EigenResult": "eigenflow.spectral.eigen",
    "pairwise_kernel": "eigenflow.spectral.operators.kernels",
    "NystromFeatures": "eigenflow.spectral.operators.nystrom_features",
    # estimators
    "LaplacianEigenmaps": "eigenflow.spectral.embedding.eigenmaps",
    "DNE": "eigenflow.spectral.methods.discriminant",
    "MFA": "eigenflow.spectral.methods.discriminant",
    "LFDA": "eigenflow.spectral.methods.discriminant",
    "NSSE": "eigenflow.spectral.methods.nsse",
    "SupervisedLaplacianEigenmaps": "eigenflow.spectral.methods.nsse",
    "TSK": "eigenflow.spectral.methods.spectral_kernels",
    "RSK": "eigenflow.spectral.methods.spectral_kernels",
    "GraphKPCA": "eigenflow.spectral.methods.graph_kpca",
    "MultiGraphKPCA": "eigenflow.spectral.methods.graph_kpca",
    "LNEG": "eigenflow.spectral.methods.graph_kpca",
    "SpectralClustering": "eigenflow.spectral.clustering",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'spectral' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
