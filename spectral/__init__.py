"""eigenflow's mathematical core: graphs, Laplacians, kernels, eigensolvers and spectral embeddings.

Pure numpy / scipy / dask / pynndescent / scikit-learn: no file I/O and no Prefect (see ARCHITECTURE.md).
Public names are resolved lazily (PEP 562), so ``import spectral`` stays cheap and does not pay numba's
compile time until a kNN routine is actually used.

>>> from spectral import LaplacianEigenmaps          # doctest: +SKIP
>>> Z = LaplacianEigenmaps(n_components=2, random_state=0).fit_transform(X)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # errors and seeds
    "EigenflowError": "spectral.errors",
    "ParameterError": "spectral.errors",
    "InputDataError": "spectral.errors",
    "InputTypeError": "spectral.errors",
    "ParameterAdjustedWarning": "spectral.errors",
    "DisconnectedGraphError": "spectral.errors",
    "ConvergenceError": "spectral.errors",
    "NotPositiveDefiniteError": "spectral.errors",
    "check_random_state": "spectral._validation",
    # graphs and Laplacians (the spine); the function `laplacian` is `spectral.laplacian.laplacian`
    # (its name is taken by the submodule)
    "knn_graph": "spectral.knn",
    "KNNIndex": "spectral.knn",
    "knn_weights": "spectral.weights",
    "connected_components": "spectral.laplacian",
    "check_connected": "spectral.laplacian",
    "LaplacianEigenmaps": "spectral.embedding",
    "laplacian_eigenmaps_from_graph": "spectral.embedding",
    "one_nn_accuracy": "spectral.metrics",
    # eigensolvers, operators, kernels, Nystrom
    "eigensolve": "spectral.eigen",
    "EigenResult": "spectral.eigen",
    "SparseOperator": "spectral.operators",
    "LowRankOperator": "spectral.operators",
    "ScaledSum": "spectral.operators",
    "DaskRowBlockOperator": "spectral.operators",
    "pairwise_kernel": "spectral.kernels",
    "NystromFeatures": "spectral.nystrom",
    "select_landmarks": "spectral.nystrom",
    "nystrom_eigh": "spectral.nystrom",
    # paper 000: DNE / MFA / LFDA
    "DNE": "spectral.discriminant",
    "MFA": "spectral.discriminant",
    "LFDA": "spectral.discriminant",
    # paper 001: NSSE
    "NSSE": "spectral.nsse",
    "SupervisedLaplacianEigenmaps": "spectral.nsse",
    # paper 002: TSK / RSK
    "TSK": "spectral.spectral_kernels",
    "RSK": "spectral.spectral_kernels",
    # paper 003: GRAD
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
