"""The NSSE flow (paper 001) on a small store: the written embedding equals the estimator's."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_dataset


@pytest.mark.slow  # Prefect harness + a Dask cluster: 20 s when the machine is quiet, minutes under load
def test_nsse_flow_writes_interpolated_embedding(tmp_path, prefect_harness):
    from flows.paper001 import nsse
    from spectral.nsse import NSSE
    from storage.arrays import read_X
    from storage.embedding_io import read_embedding
    from storage.models import read_model
    from tasks.paper001 import training_rows

    X, y = load_dataset("coil20")
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), 300, replace=False)
    X, y = (X[idx] / X.max()).astype(np.float32), y[idx]
    y_store = y.copy()
    y_store[::3] = -1  # unlabeled points: never trained on, embedded by the interpolator
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y_store)
    out = nsse(str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"), labels=str(tmp_path / "y.npy"), n_train=120,
               n_components=4, chunk_rows=64, n_workers=1, random_state=3)
    assert out["status"] == "completed"
    store = str(tmp_path / "s.zarr")
    Z = read_embedding(store, out["run"])
    arrays, _ = read_model(store, out["run"])
    rows = arrays["fit_rows"]
    np.testing.assert_array_equal(rows, training_rows(y_store, 120, 3))
    assert np.all(y_store[rows] >= 0)
    Xs = read_X(store).astype(np.float64)
    ref = NSSE(4, mu1=0.01, mu2=0.01, mu3=100.0, n_neighbors=5, max_iter=10).fit(Xs[rows], y_store[rows])
    np.testing.assert_allclose(Z[rows], ref.embedding_, atol=1e-6)  # float32 store
    rest = np.setdiff1d(np.arange(len(X)), rows)
    np.testing.assert_allclose(Z[rest], ref.transform(Xs[rest]), atol=1e-5)
    assert out["results"]["sigma"] == pytest.approx(ref.sigma_)


def test_training_rows_bad_n_train():
    from spectral.errors import InputDataError
    from tasks.paper001 import training_rows

    with pytest.raises(InputDataError, match=r"n_train must be <= the number of labeled points \(3\); got 5"):
        training_rows(np.array([0, 1, 1, -1]), 5, 0)
