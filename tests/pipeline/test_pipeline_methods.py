"""Every registered method through the one pipeline: embed with a hold-out, then extend the same points.

For each method of :data:`tasks.registry.REGISTRY`, on 400 USPS digits (classes 0-3, half of the labels
hidden): ``embed`` with ``holdout=0.2`` writes every point (fit rows: fitted results; held-out rows: the
out-of-sample map); ``extend`` of the same points with the stored model writes them again into a new store.
The held-out rows of both stores must be equal (same model, same map), and the held-out 1-NN accuracy (the
labeled fit points as references, true labels) must reach the floor each method reaches on this data
(reference: 1-NN on the raw pixels gets 0.96 here).
"""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral.metrics import one_nn_accuracy
from eigenflow.storage.embedding_io import read_embedding, read_output
from eigenflow.storage.manifest import read_manifest
from eigenflow.tasks.registry import LABELS, REGISTRY, SCORES

from tests.helpers import usps_digits

#: Held-out 1-NN accuracy each method reaches here with the parameters below (measured, minus a margin); for a
#: classifier its label accuracy, for a clusterer the NMI of its labels (spectral_clustering: 0.943 measured).
FLOORS = {
    "laplacian_eigenmaps": 0.85, "dne": 0.90, "mfa": 0.85, "lfda": 0.90, "nsse": 0.85, "suplap": 0.85,
    "tsk": 0.90, "rsk": 0.80, "graph_kpca": 0.90, "multi_graph_kpca": 0.85, "lneg": 0.85,
    "spectral_clustering": 0.85,  # a clusterer (its ids are not class codes): held-out NMI against the classes
}
#: Parameters different from the defaults, with the reason (everything else: the estimator's defaults).
PARAMS = {
    "laplacian_eigenmaps": {"n_components": 4},
    "graph_kpca": {"n_components": 4},
    "multi_graph_kpca": {"n_components": 4},
    "lneg": {"n_components": 4},
    "spectral_clustering": {"n_clusters": 4},
}


def test_every_registered_method_has_a_floor():
    assert set(FLOORS) == set(REGISTRY)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    X, y, hidden = usps_digits()
    d = tmp_path_factory.mktemp("methods")
    np.save(d / "X.npy", X)
    np.save(d / "y.npy", hidden)
    return d, X, y, hidden


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_embed_with_holdout_then_extend_same_points(method, digits, cluster, prefect_api):
    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend

    d, X, y, hidden = digits
    store, out = str(d / f"{method}.zarr"), str(d / f"{method}-ext.zarr")
    s = embed(str(d / "X.npy"), store, method=method, params=PARAMS.get(method), labels=str(d / "y.npy"),
              holdout=0.2, chunk_rows=128, random_state=0, scheduler=cluster)
    assert s["status"] == "completed" and s["results"]["method"] == method
    held = read_output(store, s["run"], "held_out").astype(bool)
    assert held.sum() == 80
    Z = read_embedding(store, s["run"]).astype(np.float64)
    assert np.isfinite(Z).all()

    e = extend(store, str(d / "X.npy"), out, chunk_rows=128, scheduler=cluster)
    assert e["results"]["model_run"] == s["run"] and read_manifest(out, e["run"]).status == "completed"
    Z_ext = read_embedding(out, e["run"]).astype(np.float64)
    np.testing.assert_array_equal(Z_ext[held], Z[held])  # same model, same out-of-sample map

    _check_against_estimator(method, store, s["run"], X, hidden, Z, held)

    if LABELS in REGISTRY[method].outputs:  # a classifier or a clusterer: its quality is that of its labels
        labels, labels_ext = read_output(store, s["run"], LABELS), read_output(out, e["run"], LABELS)
        np.testing.assert_array_equal(labels_ext[held], labels[held])
        if SCORES not in REGISTRY[method].outputs:
            from sklearn.metrics import normalized_mutual_info_score

            nmi = normalized_mutual_info_score(y[held], labels[held])
            print(f"{method}: held-out NMI {nmi:.3f}")
            assert nmi >= FLOORS[method], nmi
            return
        accuracy = float(np.mean(labels[held] == y[held]))
        print(f"{method}: held-out label accuracy {accuracy:.3f}")
    else:
        references = ~held & (hidden >= 0)
        accuracy = one_nn_accuracy(Z[references], y[references], Z[held], y[held])
        print(f"{method}: held-out 1-NN accuracy {accuracy:.3f}")
    assert accuracy >= FLOORS[method], accuracy


def _check_against_estimator(method, store, run, X, hidden, Z, held):
    """Reference: the estimator itself fitted in memory on the run's fit rows (same parameters and seed)
    maps the held-out points to the stored rows (float32 in the store). Laplacian eigenmaps and the
    at-scale DNE / MFA / LFDA fit are compared with their estimators in their own tests."""
    from eigenflow.tasks.registry import make_estimator

    entry = REGISTRY[method]
    if entry.fit not in ("in_memory", "labeled_subset"):
        return
    in_fit = read_output(store, run, "in_fit").astype(bool)
    params = {**entry.parameters, **PARAMS.get(method, {}), "random_state": 0}
    est = make_estimator(entry, params)
    X64 = X.astype(np.float64)
    est.fit(X64[in_fit], hidden[in_fit])
    mapped = est.transform(X64[held]) if hasattr(est, "transform") else est.kernel_features(X64[held])
    scale = np.abs(mapped).max()
    np.testing.assert_allclose(Z[held], mapped, atol=1e-5 * scale, rtol=1e-4)
