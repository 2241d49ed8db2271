"""eigenflow's mathematical core: graphs, Laplacians, kernels, eigensolvers and spectral embeddings.

Pure numpy / scipy / dask / pynndescent / scikit-learn: no file I/O and no Prefect (see ARCHITECTURE.md).
Public names are resolved lazily (PEP 562), so ``import spectral`` stays cheap and does not pay numba's
compile time until a kNN routine is actually used.

>>> from spectral import LaplacianEigenmaps          # doctest: +SKIP
>>> Z = LaplacianEigenmaps(n_components=2, random_state=0).fit_transform(X)  # doctest: +SKIP

The docstrings cite the methods' papers by key, with their section and equation numbers (full references in
docs/methods.md):

- CK08: R. Chatpatanasiri, B. Kijsirikul, A unified semi-supervised dimensionality reduction framework for
  manifold learning, arXiv:0804.0924, 2008 (DNE, MFA, LFDA: :mod:`spectral.discriminant`);
- OV19: C. Örnek, E. Vural, Nonlinear supervised dimensionality reduction via smooth regular embeddings,
  Pattern Recognition 87, 2019 (NSSE, SUPLAP: :mod:`spectral.nsse`);
- LQCL09: W. Liu, B. Qian, J. Cui, J. Liu, Spectral kernel learning for semi-supervised classification, IJCAI
  2009 (TSK, RSK: :mod:`spectral.spectral_kernels`);
- STG18: Y. Shen, P. A. Traganitis, G. B. Giannakis, Graph-adaptive nonlinear dimensionality reduction,
  arXiv:1801.09390, 2018 (GraphKPCA, MultiGraphKPCA, LNEG: :mod:`spectral.graph_kpca`).
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it. Only the public API: estimators, the functional pipeline
# (kNN -> weights -> Laplacian -> eigensolve), kernels and the errors; internals (operators, landmark
# selection, seeds, metrics) are imported from their submodules.
_EXPORTS: dict[str, str] = {
    # errors
    "EigenflowError": "spectral.errors",
    "ParameterError": "spectral.errors",
    "InputDataError": "spectral.errors",
    "InputTypeError": "spectral.errors",
    "ParameterAdjustedWarning": "spectral.errors",
    "KernelFallbackWarning": "spectral.errors",
    "DisconnectedGraphError": "spectral.errors",
    "ConvergenceError": "spectral.errors",
    "NotPositiveDefiniteError": "spectral.errors",
    # graphs and Laplacians (the spine)
    "knn_graph": "spectral.knn",
    "KNNIndex": "spectral.knn",
    "knn_weights": "spectral.weights",
    "laplacian": "spectral.graph_laplacian",
    "dense_laplacian": "spectral.graph_laplacian",
    "connected_components": "spectral.graph_laplacian",
    "check_connected": "spectral.graph_laplacian",
    "laplacian_eigenmaps_from_graph": "spectral.embedding",
    # eigensolvers, kernels, Nystrom
    "eigensolve": "spectral.eigen",
    "EigenResult": "spectral.eigen",
    "pairwise_kernel": "spectral.kernels",
    "NystromFeatures": "spectral.nystrom",
    # estimators
    "LaplacianEigenmaps": "spectral.embedding",
    "DNE": "spectral.discriminant",
    "MFA": "spectral.discriminant",
    "LFDA": "spectral.discriminant",
    "NSSE": "spectral.nsse",
    "SupervisedLaplacianEigenmaps": "spectral.nsse",
    "TSK": "spectral.spectral_kernels",
    "RSK": "spectral.spectral_kernels",
    "GraphKPCA": "spectral.graph_kpca",
    "MultiGraphKPCA": "spectral.graph_kpca",
    "LNEG": "spectral.graph_kpca",
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
