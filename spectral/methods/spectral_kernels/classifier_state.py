"""Model state of the LQCL09 classifiers: plain arrays + JSON-able attributes (the ``to_state`` protocol).

A fitted :class:`~spectral.methods.spectral_kernels.TSK` / :class:`~spectral.methods.spectral_kernels.RSK` is the basis
of eq. 9 (``eigenvalues`` (m,), ``eigenvectors`` (n, m), ``degrees`` (n,)), the spectrum ``mu`` (m,), the eq. 5 class
matrix ``P = U V_l^T C`` (m, c), the classes and labeled rows, and what the eq. 17-18 extension needs of the
training graph (:class:`GraphParams`: the eq. 2 weight parameters, per-point scales ``h_i`` and k-th
neighbour radii, the kNN index parameters). The kNN index itself is not stored (as for
:class:`spectral.embedding.out_of_sample.LaplacianEigenmapsModel`): ``rebuild_index(X_train)`` recreates it from the
training points (the same rows in the same order as at fit), or ``attach_index(index)`` reuses one.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.graph.weights import WeightParams

STATE_KIND = "paper002_spectral_kernel"
STATE_VERSION = 1
#: Fitted arrays of the state: attribute name on the estimator -> array name in the state.
ARRAYS = {"eigenvalues_": "eigenvalues", "eigenvectors_": "eigenvectors", "degrees_": "degrees", "mu_": "mu",
          "classes_": "classes", "labeled_indices_": "labeled_indices", "class_matrix_": "class_matrix"}
#: Optional fitted arrays / scalars (TSK's LP outputs); absent for RSK.
OPTIONAL_ARRAYS = {"xi_": "xi"}
OPTIONAL_SCALARS = ("beta_", "lp_objective_")


@dataclass(frozen=True)
class GraphParams:
    """What eq. 17-18 needs of the training graph besides the basis.

    Attributes
    ----------
    weight_params : WeightParams
        Resolved eq. 2 weighting (Hein & Maier, "or").
    scales : ndarray (n,)
        Per-point scales ``h_i`` (distance to the k-th neighbour, floored).
    radii : ndarray (n,)
        Distance of each training point to its k-th neighbour (reverse-neighbour test for new points).
    knn_params : dict
        :attr:`spectral.neighbours.index.KNNIndex.params` of the training index (to rebuild it).
    """

    weight_params: WeightParams
    scales: np.ndarray
    radii: np.ndarray
    knn_params: dict


def _jsonable_param(name: str, value):
    """A constructor parameter as JSON (a Generator ``random_state`` only seeded the fit: stored as None)."""
    if name == "random_state" and not (value is None or isinstance(value, numbers.Integral)):
        return None
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


def estimator_state(est) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, attrs)`` of a fitted TSK / RSK (see the module docstring); no pickle, no kNN index."""
    arrays = {key: np.asarray(getattr(est, attr)) for attr, key in ARRAYS.items()}
    arrays.update({key: np.asarray(getattr(est, attr)) for attr, key in OPTIONAL_ARRAYS.items() if hasattr(est, attr)})
    info = {k: v for k, v in est.basis_info_.items() if k != "residuals"}
    arrays["residuals"] = np.asarray(est.basis_info_["residuals"], dtype=np.float64)
    attrs = {"kind": STATE_KIND, "version": STATE_VERSION, "estimator": type(est).__name__,
             "params": {k: _jsonable_param(k, v) for k, v in est.get_params().items()},
             "basis_info": info, "n_features_in": getattr(est, "n_features_in_", None),
             **({"fallback_kernel": est.fallback_kernel_} if hasattr(est, "fallback_kernel_") else {}),
             **{name: float(getattr(est, name)) for name in OPTIONAL_SCALARS if hasattr(est, name)}}
    graph = est._graph
    if graph is not None:
        arrays["scales"], arrays["radii"] = np.asarray(graph.scales), np.asarray(graph.radii)
        attrs["weight_params"] = graph.weight_params.to_attrs()
        attrs["knn_params"] = dict(graph.knn_params)
    return arrays, attrs


def restore_estimator(cls, arrays: dict, attrs: dict):
    """Inverse of :func:`estimator_state`: a fitted ``cls`` without kNN index (``rebuild_index`` before
    ``predict``). ``transduction_`` and ``scores_`` are recomputed from the stored basis (eq. 5)."""
    if attrs.get("kind") != STATE_KIND or attrs.get("version") != STATE_VERSION:
        raise InputDataError(f"model state must have kind={STATE_KIND!r} version={STATE_VERSION}; got "
                             f"kind={attrs.get('kind')!r} version={attrs.get('version')!r}")
    if attrs.get("estimator") != cls.__name__:
        raise InputDataError(f"model state holds a {attrs.get('estimator')!r} model, not {cls.__name__!r}")
    missing = [key for key in ARRAYS.values() if key not in arrays]
    if missing:
        raise InputDataError(f"model state lacks the arrays {missing}")
    est = cls(**attrs["params"])
    for attr, key in {**ARRAYS, **OPTIONAL_ARRAYS}.items():
        if key in arrays:
            setattr(est, attr, np.asarray(arrays[key]))
    est.classes_ = est.classes_.astype(np.int64)
    est.labeled_indices_ = est.labeled_indices_.astype(np.int64)
    for name in OPTIONAL_SCALARS:
        if name in attrs:
            setattr(est, name, float(attrs[name]))
    est.basis_info_ = {**attrs["basis_info"], "residuals": np.asarray(arrays.get("residuals", []))}
    if "fallback_kernel" in attrs:
        est.fallback_kernel_ = attrs["fallback_kernel"]
    if attrs.get("n_features_in") is not None:
        est.n_features_in_ = int(attrs["n_features_in"])
    est._graph = None
    if attrs.get("weight_params") is not None:
        est._graph = GraphParams(WeightParams.from_attrs(attrs["weight_params"]), np.asarray(arrays["scales"]),
                                 np.asarray(arrays["radii"]), dict(attrs["knn_params"]))
    est._index = None
    est._set_transductive_outputs()
    return est
