"""Generic model state (spectral.methods.estimator_state): plain arrays + JSON and back, bit-identical transform, no pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from eigenflow.spectral import LNEG, MultiGraphKPCA
from eigenflow.spectral.methods.estimator_state import estimator_state, restore_estimator
from eigenflow.spectral.errors import InputDataError


@pytest.mark.parametrize("est", [LNEG(2), LNEG(2, gamma=0.5, l1=0.01), MultiGraphKPCA(2),
                                 MultiGraphKPCA(2, n_landmarks=60)], ids=["lneg", "lneg-graph-l1", "mgkpca",
                                                                          "mgkpca-nystrom"])
def test_roundtrip_gives_the_same_transform(est):
    rng = np.random.default_rng(0)
    X, X_new = rng.normal(size=(150, 5)), rng.normal(size=(25, 5))
    est.fit(X)
    arrays, attrs = est.to_state()
    attrs = json.loads(json.dumps(attrs))  # what the store holds: JSON
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "biuf" for a in arrays.values())
    back = type(est).from_state(arrays, attrs)
    np.testing.assert_array_equal(back.transform(X_new), est.transform(X_new))
    assert back.get_params() == est.get_params()


class _Holder:
    def __init__(self, value=None):
        self.value = value

    def get_params(self):
        return {"value": self.value}


def test_values_are_encoded_by_type_and_unknown_objects_refused():
    h = _Holder()
    h.fitted_ = {"a": np.arange(3), "b": [1.5, "x", None, (2, 3)], "W": sp.random(4, 4, density=0.5, format="csr")}
    arrays, attrs = estimator_state(h)
    back = restore_estimator(_Holder, arrays, json.loads(json.dumps(attrs)))
    np.testing.assert_array_equal(back.fitted_["a"], np.arange(3))
    assert back.fitted_["b"] == [1.5, "x", None, (2, 3)]
    assert (back.fitted_["W"] != h.fitted_["W"]).nnz == 0
    h.fitted_ = object()
    with pytest.raises(InputDataError, match="attributes.fitted_: a builtins.object cannot be stored"):
        estimator_state(h)
    with pytest.raises(InputDataError, match="this state holds a"):
        restore_estimator(LNEG, arrays, attrs)


def test_a_state_may_not_name_foreign_classes():
    h = _Holder()
    arrays, attrs = estimator_state(h)
    attrs["fitted"] = {"$dict": {"x": {"$state": "os:system", "prefix": "x__", "attrs": {}}}}
    with pytest.raises(InputDataError, match="only name eigenflow classes"):
        restore_estimator(_Holder, arrays, attrs)
