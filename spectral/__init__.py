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
    "DisconnectedGraphError": "spectral.errors",
    "ConvergenceError": "spectral.errors",
    "NotPositiveDefiniteError": "spectral.errors",
    "check_random_state": "spectral._validation",
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
