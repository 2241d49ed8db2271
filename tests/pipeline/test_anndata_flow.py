"""An .h5ad file through the pipeline and back: embed with ``use_rep`` / ``labels_obs`` and a hold-out, then
``eigenflow export STORE cells.h5ad``.

400 USPS digits (classes 0-3) stand in for cells: ``X`` the 256 pixels, ``obsm["X_pca"]`` their 30 principal
components, ``obs["cell_type"]`` a categorical with the digits' names and 90 % of the values missing. TSK and
RSK carry the labels to every cell; the exported ``obs`` column's accuracy on the cells whose label was hidden
is printed next to a k-nearest-neighbours classifier fitted on the labeled cells of the same representation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

anndata = pytest.importorskip("anndata")

from storage import layout  # noqa: E402
from storage.arrays import read_labels  # noqa: E402
from storage.store import read_attrs  # noqa: E402

from tests.helpers import usps_digits  # noqa: E402

NAMES = ["zero", "one", "two", "three"]
#: Accuracy on the 353 hidden labels each method reaches here (measured: TSK 0.912, RSK 0.943; the 5-NN classifier
#: on X_pca 0.907), minus a margin.
FLOORS = {"tsk": 0.87, "rsk": 0.90}


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from sklearn.decomposition import PCA

    X, y, hidden = usps_digits(hidden_fraction=0.9, seed=1)
    kind = pd.Categorical.from_codes(hidden, categories=NAMES)  # code -1: missing
    obs = pd.DataFrame({"cell_type": kind, "n_counts": X.sum(axis=1)}, index=[f"AAAC{i:04d}-1" for i in range(y.size)])
    adata = anndata.AnnData(X=X, obs=obs, obsm={"X_pca": PCA(30, random_state=0).fit_transform(X).astype(np.float32)},
                            uns={"note": "digits as cells"})
    d = tmp_path_factory.mktemp("h5ad")
    adata.write_h5ad(d / "cells.h5ad")
    return d, adata, y, hidden


def _knn_accuracy(Z: np.ndarray, hidden: np.ndarray, y: np.ndarray) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    labeled = hidden >= 0
    knn = KNeighborsClassifier(n_neighbors=5).fit(Z[labeled], hidden[labeled])
    return float(np.mean(knn.predict(Z[~labeled]) == y[~labeled]))


def test_h5ad_round_trip_with_label_transfer(cells, cluster, prefect_harness, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.embed import embed

    d, adata, y, hidden = cells
    path, store = d / "cells.h5ad", str(tmp_path / "cells.zarr")
    runs = {}
    for method in ("tsk", "rsk"):
        s = embed(str(path), store, method=method, use_rep="X_pca", labels_obs="cell_type", holdout=0.2,
                  chunk_rows=128, random_state=0, scheduler=cluster, run_name=f"{method}-run")
        assert s["status"] == "completed"
        runs[method] = s["run"]
    np.testing.assert_array_equal(read_labels(store), hidden)
    assert read_attrs(store)[layout.ATTR_LABEL_CATEGORIES] == NAMES

    runner = CliRunner()
    for method, run in runs.items():
        result = runner.invoke(app, ["export", store, str(path), "--run", run, "--obsm", f"X_{method}"])
        assert result.exit_code == 0, result.output
        result = runner.invoke(app, ["export", store, str(tmp_path / f"{method}.npy"), "--run", run])
        assert result.exit_code == 0, result.output

    back = anndata.read_h5ad(path)
    assert set(back.obsm) == {"X_pca", "X_tsk", "X_tsk_scores", "X_rsk", "X_rsk_scores"}
    np.testing.assert_array_equal(back.X, adata.X)  # the file's own elements are unchanged
    np.testing.assert_array_equal(back.obsm["X_pca"], adata.obsm["X_pca"])
    pd.testing.assert_frame_equal(back.obs[["cell_type", "n_counts"]], adata.obs)
    assert back.uns["note"] == "digits as cells"
    unlabeled = hidden < 0
    baseline = _knn_accuracy(adata.obsm["X_pca"], hidden, y)
    for method, run in runs.items():
        np.testing.assert_array_equal(back.obsm[f"X_{method}"], np.load(tmp_path / f"{method}.npy"))
        column = back.obs[f"X_{method}_labels"]
        assert list(column.cat.categories) == NAMES and column.notna().all()
        assert list(back.uns[f"X_{method}"]["scores_columns"]) == NAMES
        accuracy = float(np.mean(column.cat.codes.to_numpy()[unlabeled] == y[unlabeled]))
        print(f"{method}: accuracy on the {unlabeled.sum()} hidden labels {accuracy:.3f}; 5-NN on X_pca "
              f"{baseline:.3f}")
        assert accuracy >= FLOORS[method], accuracy


def test_new_cells_mapped_with_a_stored_model_and_exported_into_their_file(cells, cluster, prefect_harness,
                                                                           tmp_path):
    from flows.embed import embed, extend
    from storage.anndata_export import export_to_anndata
    from storage.embedding_io import read_embedding, read_output

    d, adata, _, _ = cells
    new = adata[::3].copy()  # "another sample": every third cell, with its own obs names
    new.write_h5ad(tmp_path / "new.h5ad")
    store, out = str(tmp_path / "ref.zarr"), str(tmp_path / "new.zarr")
    s = embed(str(d / "cells.h5ad"), store, method="rsk", use_rep="X_pca", labels_obs="cell_type", holdout=0.2,
              chunk_rows=128, random_state=0, scheduler=cluster)
    e = extend(store, str(tmp_path / "new.h5ad"), out, use_rep="X_pca", chunk_rows=64, scheduler=cluster)
    assert e["status"] == "completed"
    export_to_anndata(out, str(tmp_path / "new.h5ad"), run=e["run"], key="X_rsk")
    back = anndata.read_h5ad(tmp_path / "new.h5ad")
    held = read_output(store, s["run"], "held_out").astype(bool)[::3]  # the reference's held-out cells among them
    np.testing.assert_array_equal(back.obsm["X_rsk"][held], read_embedding(store, s["run"])[::3][held])
    labels = back.obs["X_rsk_labels"]  # named with the categories of the model's store
    assert list(labels.cat.categories) == NAMES and list(back.uns["X_rsk"]["scores_columns"]) == NAMES
    np.testing.assert_array_equal(labels.cat.codes.to_numpy()[held], read_output(store, s["run"], "labels")[::3][held])


def test_anndata_options_are_refused_for_other_sources(tmp_path):
    from flows.embed import check_embed_arguments
    from spectral.errors import ParameterError

    np.save(tmp_path / "X.npy", np.zeros((10, 2)))
    with pytest.raises(ParameterError, match=r"use_rep selects part of an AnnData source .* \(got use_rep='X_pca'\)"):
        check_embed_arguments(str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"), "laplacian_eigenmaps", None,
                              labels=None, holdout=0.0, n_workers=1, random_state=0, use_rep="X_pca")
