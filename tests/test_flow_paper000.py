"""The paper 000 flow on a small labeled store: the written embedding equals the estimator's."""

from __future__ import annotations

import numpy as np
import pytest


def _data(tmp_path):
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=2.0, size=(3, 6))
    y = rng.integers(0, 3, 400)
    X = (centers[y] + rng.normal(size=(400, 6))).astype(np.float32)
    y_store = np.where(rng.random(400) < 0.25, y, -1)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y_store)
    return y_store


def test_discriminant_flow_writes_ss_lfda_embedding(tmp_path, prefect_harness):
    from flows.paper000 import paper000
    from spectral.discriminant import LFDA
    from storage.arrays import read_X
    from storage.embedding_io import read_embedding

    y = _data(tmp_path)
    store = str(tmp_path / "s.zarr")
    out = paper000(str(tmp_path / "X.npy"), store, labels=str(tmp_path / "y.npy"), algorithm="lfda", gamma=0.5,
                   knn_method="exact", chunk_rows=64, n_workers=1, random_state=3)
    assert out["status"] == "completed"
    Z = read_embedding(store, out["run"])
    Xs = read_X(store).astype(np.float64)
    dense = LFDA(gamma=0.5).fit(Xs, y)  # dense estimator: W^(2) from its own exact kNN graph
    assert Z.shape == (len(Xs), 3) and out["results"]["n_components"] == 3
    for a, b in zip(Z.T, dense.transform(Xs).T):
        np.testing.assert_allclose(a, np.sign(a @ b) * b, atol=1e-4 * np.abs(b).max())


@pytest.mark.slow
def test_discriminant_flow_nystrom_kernel(tmp_path, prefect_harness):
    from flows.paper000 import paper000
    from spectral.discriminant import DNE
    from spectral.discriminant.scale import fit_at_scale
    from storage.arrays import read_X
    from storage.embedding_io import read_embedding

    y = _data(tmp_path)
    store = str(tmp_path / "s.zarr")
    out_k = paper000(str(tmp_path / "X.npy"), store, labels=str(tmp_path / "y.npy"), chunk_rows=64,
                     algorithm="dne", mode="kernel", n_landmarks=50, gamma=0.5, knn_method="exact", n_components=2,
                     n_workers=1, random_state=3)
    Zk = read_embedding(store, out_k["run"])
    Xs = read_X(store).astype(np.float64)
    ref = fit_at_scale(DNE(mode="kernel", n_landmarks=50, gamma=0.5, n_components=2),
                       Xs, y, knn_method="exact", random_state=3)
    np.testing.assert_allclose(Zk, ref.transform(Xs), rtol=1e-6, atol=1e-8)


def test_discriminant_flow_rejects_exact_kernel(tmp_path):
    from flows.paper000 import paper000
    from spectral.errors import ParameterError

    with pytest.raises(ParameterError, match="n_landmarks"):
        paper000.fn(str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"), mode="kernel")
