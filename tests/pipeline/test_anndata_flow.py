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

from eigenflow.storage import layout  # noqa: E402
from eigenflow.storage.arrays import read_labels  # noqa: E402
from eigenflow.storage.store import read_attrs  # noqa: E402

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


def test_h5ad_round_trip_with_label_transfer(cells, cluster, prefect_api, tmp_path):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app
    from eigenflow.flows.embed import embed

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


def test_new_cells_mapped_with_a_stored_model_and_exported_into_their_file(cells, cluster, prefect_api,
                                                                           tmp_path, monkeypatch):
    """Stores named relative to the directory of the runs; the export, from another directory, still finds the
    model store (its categories name the labels)."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend
    from eigenflow.storage.anndata_export import export_to_anndata
    from eigenflow.storage.embedding_io import read_embedding, read_output
    from eigenflow.storage.manifest import read_manifest

    d, adata, _, _ = cells
    new = adata[::3].copy()  # "another sample": every third cell, with its own obs names
    (tmp_path / "models").mkdir()
    (tmp_path / "sample").mkdir()
    new.write_h5ad(tmp_path / "sample" / "new.h5ad")
    monkeypatch.chdir(tmp_path)
    store, out = "models/ref.zarr", "sample/new.zarr"  # relative: as typed on a command line
    s = embed(str(d / "cells.h5ad"), store, method="rsk", use_rep="X_pca", labels_obs="cell_type", holdout=0.2,
              chunk_rows=128, random_state=0, scheduler=cluster)
    e = extend(store, "sample/new.h5ad", out, use_rep="X_pca", chunk_rows=64, scheduler=cluster)
    assert e["status"] == "completed"
    assert read_manifest(out, e["run"]).parameters["store"] == str(tmp_path / "models" / "ref.zarr")
    monkeypatch.chdir(tmp_path / "sample")  # elsewhere: "models/ref.zarr" names nothing from here
    export_to_anndata(str(tmp_path / "sample" / "new.zarr"), "new.h5ad", run=e["run"], key="X_rsk")
    store = str(tmp_path / "models" / "ref.zarr")
    back = anndata.read_h5ad(tmp_path / "sample" / "new.h5ad")
    held = read_output(store, s["run"], "held_out").astype(bool)[::3]  # the reference's held-out cells among them
    np.testing.assert_array_equal(back.obsm["X_rsk"][held], read_embedding(store, s["run"])[::3][held])
    labels = back.obs["X_rsk_labels"]  # named with the categories of the model's store
    assert list(labels.cat.categories) == NAMES and list(back.uns["X_rsk"]["scores_columns"]) == NAMES
    np.testing.assert_array_equal(labels.cat.codes.to_numpy()[held], read_output(store, s["run"], "labels")[::3][held])


def test_anndata_options_are_refused_for_other_sources(tmp_path):
    from eigenflow.tasks.checks import check_embed_arguments
    from eigenflow.spectral.errors import ParameterError

    np.save(tmp_path / "X.npy", np.zeros((10, 2)))
    with pytest.raises(ParameterError, match=r"use_rep selects part of an AnnData source .* \(got use_rep='X_pca'\)"):
        check_embed_arguments(str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"), "laplacian_eigenmaps", None,
                              labels=None, holdout=0.0, n_workers=1, random_state=0, use_rep="X_pca")


def test_served_embed_runs_carry_use_rep_and_labels_obs(cells, tmp_path):
    """``eigenflow serve cells.h5ad STORE --use-rep X_pca --labels-obs cell_type``: every scheduled embed run gets
    both, as ``eigenflow embed`` passes them; the on-demand extend deployment keeps its own parameters."""
    from eigenflow.flows.serve import deployments

    d, _, _, _ = cells
    embed_deployment, extend_deployment = deployments(
        str(d / "cells.h5ad"), str(tmp_path / "served.zarr"), name="nightly", method="tsk", params={}, labels=None,
        holdout=0.2, interval=3600, cron=None, scheduler=None, n_workers=1, use_rep="X_pca", labels_obs="cell_type",
        flow="embed")
    assert embed_deployment.parameters["use_rep"] == "X_pca"
    assert embed_deployment.parameters["labels_obs"] == "cell_type"
    assert embed_deployment.parameters["source"] == str(d / "cells.h5ad")
    assert embed_deployment.parameters["labels"] is None
    assert "use_rep" not in extend_deployment.parameters
    update_deployment, _ = deployments(
        str(d / "cells.h5ad"), str(tmp_path / "served.zarr"), name="nightly", method="tsk", params={}, labels=None,
        holdout=0.2, interval=3600, cron=None, scheduler=None, n_workers=1, use_rep="X_pca", labels_obs="cell_type")
    assert update_deployment.flow_name == "update"  # the default: scheduled updates of the growing source
    assert update_deployment.parameters["use_rep"] == "X_pca" and update_deployment.parameters["refit"] == "auto"
    with pytest.raises(Exception, match=r"labels_obs \(--labels-obs\) 'cell_kind' is not a column of obs; columns "
                                        r"are \['cell_type', 'n_counts'"):
        deployments(str(d / "cells.h5ad"), str(tmp_path / "served.zarr"), name="nightly", method="tsk", params={},
                    labels=None, holdout=0.2, interval=3600, cron=None, scheduler=None, n_workers=1,
                    use_rep="X_pca", labels_obs="cell_kind")


def test_serve_refuses_use_rep_for_a_source_that_is_not_anndata_in_one_line(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    np.save(tmp_path / "X.npy", np.zeros((10, 2)))
    t = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "eigenflow"), "serve", "X.npy", "served.zarr",
                           "--use-rep", "X_pca", "--interval", "60"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    print(f"refused after {time.perf_counter() - t:.1f} s")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert ("error: use_rep selects part of an AnnData source (.h5ad or AnnData zarr); source 'X.npy' is not one "
            "(got use_rep='X_pca')") in lines[0]
    assert not (tmp_path / "served.zarr").exists()
