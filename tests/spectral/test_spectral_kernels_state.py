"""LQCL09 model state: TSK / RSK -> (arrays, JSON attrs) -> zarr (storage.models) -> restored model.

A restored model (``from_state`` + ``rebuild_index`` on the training points) must give the same eq. 19 scores,
eq. 5 labels and learned kernel for new points as the fitted one, bit for bit; the state holds only numeric
arrays and JSON (no pickle). ``fit_basis`` (the flows' at-scale entry point) equals ``fit`` on the same basis.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from tests.helpers import load_dataset

from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.methods.spectral_kernels import RSK, TSK, GraphParams, spectral_basis
from eigenflow.spectral.graph.weights import fit_weight_params, knn_weights, weights_from_params
from eigenflow.spectral.neighbours.index import KNNIndex


def minmax(X):
    return (X - X.min(0)) / (X.max(0) - X.min(0))


def semi_labels(y, n_labeled, seed):
    rng = np.random.default_rng(seed)
    out = -np.ones_like(y)
    for c in np.unique(y):
        out[rng.choice(np.flatnonzero(y == c), n_labeled // 2, replace=False)] = c
    return out


@pytest.fixture(scope="module")
def sonar():
    X, y = load_dataset("sonar")
    X = minmax(X)
    rng = np.random.default_rng(7)
    X_new = np.clip(X[rng.choice(len(X), 40)] + rng.normal(scale=0.03, size=(40, X.shape[1])), 0, 1)
    return X, semi_labels(y, 20, 0), X_new


def round_trip(est, tmp_path):
    """Through the real store code: write_model / read_model of a zarr group (numeric arrays, JSON attrs)."""
    from eigenflow.storage.models import read_model, write_model

    arrays, attrs = est.to_state()
    assert all(np.asarray(a).dtype.kind in "biuf" for a in arrays.values())
    json.dumps(attrs)  # plain JSON, no pickle
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="w")
    write_model(group, "r", arrays, attrs)
    return read_model(group, "r")


def assert_same_model(a, b, X, X_new):
    for name in ("eigenvalues_", "eigenvectors_", "degrees_", "mu_", "classes_", "labeled_indices_",
                 "class_matrix_", "scores_", "transduction_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.predict(X_new), b.predict(X_new))
    np.testing.assert_array_equal(a.decision_function(X_new), b.decision_function(X_new))
    np.testing.assert_array_equal(a.kernel(X_new), b.kernel(X_new))  # (s, n) against the training points
    np.testing.assert_array_equal(a.kernel(X_new, X_new), b.kernel(X_new, X_new))
    np.testing.assert_array_equal(a.predict(X), a.transduction_)  # training points: their own rows
    np.testing.assert_array_equal(b.predict(X), b.transduction_)


@pytest.mark.parametrize("params", [dict(n_components=10, constraint="decay"),
                                    dict(n_components=12, constraint="none", include_trivial=False,
                                         class_weight="balanced")])
def test_tsk_restored_from_store_predicts_identically(sonar, tmp_path, params):
    X, yy, X_new = sonar
    est = TSK(random_state=0, knn_method="exact", **params).fit(X, yy)
    arrays, attrs = round_trip(est, tmp_path)
    restored = TSK.from_state(arrays, attrs)
    with pytest.raises(ParameterError, match=r"call rebuild_index\(X_train\)"):
        restored.predict(X_new)
    restored.rebuild_index(X)
    assert_same_model(est, restored, X, X_new)
    assert restored.get_params() == est.get_params()
    assert (restored.beta_, restored.lp_objective_) == (est.beta_, est.lp_objective_)
    np.testing.assert_array_equal(restored.xi_, est.xi_)
    assert restored.n_features_in_ == X.shape[1] and restored.basis_info_["eigen_solver"] == "dense"


@pytest.mark.parametrize("n_components", [None, 15])
def test_rsk_restored_from_store_predicts_identically(sonar, tmp_path, n_components):
    X, yy, X_new = sonar
    est = RSK(alpha=0.9, n_components=n_components, random_state=0).fit(X, yy)
    restored = RSK.from_state(*round_trip(est, tmp_path))
    restored.rebuild_index(X)
    assert_same_model(est, restored, X, X_new)


def test_restored_model_can_share_an_index(sonar):
    X, yy, X_new = sonar
    est = TSK(10, random_state=0).fit(X, yy)
    restored = TSK.from_state(*est.to_state())
    restored.attach_index(KNNIndex.build(X, 6, method="exact", random_state=0))
    np.testing.assert_array_equal(restored.predict(X_new), est.predict(X_new))
    with pytest.raises(InputDataError, match="the index has 100 points; the model was fitted on 208"):
        restored.attach_index(KNNIndex.build(X[:100], 6, method="exact"))


def test_bad_states_are_refused(sonar):
    X, yy, _ = sonar
    arrays, attrs = TSK(10, random_state=0).fit(X, yy).to_state()
    with pytest.raises(InputDataError, match="holds a 'TSK' model, not 'RSK'"):
        RSK.from_state(arrays, attrs)
    with pytest.raises(InputDataError, match="kind='paper002_spectral_kernel' version=1; got kind='x'"):
        TSK.from_state(arrays, {**attrs, "kind": "x"})
    with pytest.raises(InputDataError, match=r"lacks the arrays \['mu'\]"):
        TSK.from_state({k: v for k, v in arrays.items() if k != "mu"}, attrs)


def test_graph_fitted_model_state_has_no_out_of_sample(sonar):
    X, yy, _ = sonar
    W = knn_weights(*KNNIndex.build(X, 6, method="exact").neighbor_graph(), weighting="hein_maier")
    est = TSK(10).fit_graph(W, yy)
    arrays, attrs = est.to_state()
    assert "scales" not in arrays and "knn_params" not in attrs
    restored = TSK.from_state(arrays, attrs)
    np.testing.assert_array_equal(restored.transduction_, est.transduction_)
    with pytest.raises(ParameterError, match="fitted from a graph"):
        restored.rebuild_index(X)


def test_fit_basis_equals_fit(sonar):
    """The flows' path (basis computed outside, then fit_basis) gives the estimator's model."""
    X, yy, X_new = sonar
    ref = TSK(10, constraint="none", knn_method="exact", random_state=0).fit(X, yy)
    index = KNNIndex.build(X, 6, method="exact", random_state=0)
    idx, dist = index.neighbor_graph()
    wparams, scales, radii = fit_weight_params(dist, weighting="hein_maier", symmetrize="or")
    basis = spectral_basis(weights_from_params(idx, dist, wparams, scales), 10, random_state=0)  # as fit does
    est = TSK(10, constraint="none").fit_basis(basis, yy, graph=GraphParams(wparams, scales, radii, index.params),
                                               n_features_in=X.shape[1])
    est.attach_index(index)
    np.testing.assert_allclose(est.mu_, ref.mu_, rtol=1e-9)
    np.testing.assert_array_equal(est.predict(X_new), ref.predict(X_new))
    np.testing.assert_allclose(est.decision_function(X_new), ref.decision_function(X_new), rtol=1e-9, atol=1e-12)
    with pytest.raises(InputDataError, match="basis must hold 12 eigenpairs"):
        TSK(12).fit_basis(basis, yy)
