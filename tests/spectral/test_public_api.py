"""The top-level namespace of :mod:`spectral`: what it exports, and that each export is the real thing."""

import inspect
import subprocess
import sys

import pytest
from sklearn.base import BaseEstimator, clone

from eigenflow import spectral
from eigenflow.spectral.errors import EigenflowError

ESTIMATORS = ["LaplacianEigenmaps", "DNE", "MFA", "LFDA", "NSSE", "SupervisedLaplacianEigenmaps", "TSK", "RSK",
              "GraphKPCA", "MultiGraphKPCA", "LNEG", "SpectralClustering"]
ERRORS = ["EigenflowError", "ParameterError", "InputDataError", "InputTypeError", "DisconnectedGraphError",
          "ConvergenceError", "NotPositiveDefiniteError"]
WARNINGS = ["ParameterAdjustedWarning", "KernelFallbackWarning"]
FUNCTIONS = ["knn_graph", "knn_weights", "laplacian", "dense_laplacian", "connected_components", "check_connected",
             "laplacian_eigenmaps_from_graph", "eigensolve", "pairwise_kernel"]


def test_exports_are_exactly_the_public_api():
    assert set(spectral.__all__) == set(ESTIMATORS) | set(ERRORS) | set(WARNINGS) | set(FUNCTIONS) | {
        "KNNIndex", "EigenResult", "NystromFeatures"}
    assert not [name for name in spectral.__all__ if name.startswith("_")]
    assert set(spectral.__all__) <= set(dir(spectral))


@pytest.mark.parametrize("name", sorted(spectral.__all__))
def test_export_is_defined_in_a_public_module(name):
    """Each export is the object its defining module holds under that name (no alias, no wrapper), defined in
    a public module or in a private file of a public package (``spectral.eigen._result``)."""
    obj = getattr(spectral, name)
    module = sys.modules[obj.__module__]
    assert getattr(module, obj.__name__) is obj
    assert obj.__name__ == name
    package = obj.__module__.rsplit(".", 1)[0] if obj.__module__.split(".")[-1].startswith("_") else obj.__module__
    assert not any(part.startswith("_") for part in package.split("."))
    assert getattr(sys.modules[package], name) is obj


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimators_are_scikit_learn_estimators(name):
    cls = getattr(spectral, name)
    assert issubclass(cls, BaseEstimator)
    est = cls()
    params = est.get_params()
    assert set(params) == set(inspect.signature(cls.__init__).parameters) - {"self"}
    assert clone(est).get_params() == params


@pytest.mark.parametrize("name", ERRORS)
def test_errors_share_one_hierarchy(name):
    cls = getattr(spectral, name)
    assert issubclass(cls, EigenflowError) and issubclass(cls, ValueError)


@pytest.mark.parametrize("name", WARNINGS)
def test_warnings_are_user_warnings(name):
    assert issubclass(getattr(spectral, name), UserWarning)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_are_functions(name):
    assert inspect.isfunction(getattr(spectral, name))


def test_laplacian_is_the_function_not_a_submodule():
    from eigenflow.spectral.graph.laplacian import laplacian

    assert spectral.laplacian is laplacian
    L, degrees = spectral.laplacian([[0.0, 1.0], [1.0, 0.0]])
    assert L.toarray().tolist() == [[1.0, -1.0], [-1.0, 1.0]] and degrees.tolist() == [1.0, 1.0]


def test_private_helpers_are_not_exported():
    for name in ("check_random_state", "gap_matrix", "LPResult", "select_landmarks", "SparseOperator"):
        assert name not in spectral.__all__
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(spectral, name)
    import eigenflow.spectral.methods.spectral_kernels as sk

    assert "gap_matrix" not in sk.__all__ and "LPResult" not in sk.__all__


def test_import_is_lazy():
    """``import eigenflow.spectral`` does not import numba / pynndescent / the estimators (PEP 562 exports)."""
    code = ("import sys, eigenflow.spectral; mods = [m for m in ('numba', 'pynndescent', 'eigenflow.spectral.neighbours.knn', "
            "'eigenflow.spectral.methods.graph_kpca') if m in sys.modules]; print(mods)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
