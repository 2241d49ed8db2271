"""A run's results written back into an .h5ad file (storage level: the run's arrays written with storage's own
writers into a store ingested from the file). The pipeline round trip is in
``tests/pipeline/test_anndata_flow.py``."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
h5py = pytest.importorskip("h5py")

from eigenflow.storage import layout  # noqa: E402
from eigenflow.storage.anndata_export import PARTIAL_GROUP, export_to_anndata  # noqa: E402
from eigenflow.storage.embedding_io import write_embedding, write_point_array  # noqa: E402
from eigenflow.storage.errors import StorageError  # noqa: E402
from eigenflow.storage.ingest import ingest  # noqa: E402

from tests.storage.test_anndata_io import CATEGORIES, N, _cells  # noqa: E402

RUN = "embed-test-1"


@pytest.fixture
def written(tmp_path):
    """``(file, store, adata, Z, labels, scores)``: a store ingested from the file, with a run's outputs."""
    adata = _cells(5)
    path = tmp_path / "cells.h5ad"
    adata.write_h5ad(path)
    return (path, *_store_with_outputs(path, tmp_path / "s.zarr", seed=0, adata=adata))


def _store_with_outputs(path, store, *, seed: int, adata) -> tuple:
    """``(store, adata, Z, labels, scores)``: ``store`` ingested from the AnnData ``path`` (X_pca, cell_type) and a
    run's embedding, labels and scores written into it."""
    ingest(str(path), store, x_key="X_pca", labels_key="cell_type", chunk_rows=16)
    rng = np.random.default_rng(seed)
    Z, scores = rng.standard_normal((N, 3)).astype(np.float32), rng.standard_normal((N, 3))
    labels = rng.integers(0, 3, N)
    write_embedding(store, RUN, Z)
    write_point_array(store, layout.output_path(RUN, "labels"), labels, dtype="int32")
    write_point_array(store, layout.output_path(RUN, "scores"), scores, dtype="float32")
    return store, adata, Z, labels, scores


def _assert_exported(back, adata, Z, labels, scores) -> None:
    """The exported file ``back`` holds the run's outputs under ``X_eigenflow`` and the file's own elements as they
    were (``adata``)."""
    np.testing.assert_array_equal(back.obsm["X_eigenflow"], Z)
    np.testing.assert_allclose(back.obsm["X_eigenflow_scores"], scores.astype(np.float32))
    column = back.obs["X_eigenflow_labels"]
    assert list(column.cat.categories) == CATEGORIES
    np.testing.assert_array_equal(column.cat.codes.to_numpy(), labels)
    assert back.uns["X_eigenflow"]["run"] == RUN
    np.testing.assert_array_equal(back.X, adata.X)
    np.testing.assert_array_equal(back.obsm["X_pca"], adata.obsm["X_pca"])
    assert back.obs_names.tolist() == adata.obs_names.tolist()
    assert back.obs["cell_type"].equals(adata.obs["cell_type"])


def test_results_go_into_obsm_obs_uns_and_nothing_else_changes(written):
    path, store, adata, Z, labels, scores = written
    done = export_to_anndata(store, str(path), run=RUN)
    assert done["written"] == ["obsm/X_eigenflow", "obs/X_eigenflow_labels", "obsm/X_eigenflow_scores",
                               "uns/X_eigenflow"]
    _assert_exported(anndata.read_h5ad(path), adata, Z, labels, scores)
    with h5py.File(path) as f:
        assert not any(name.startswith(PARTIAL_GROUP) for name in f)


def test_existing_key_is_refused_unless_overwrite_and_a_copy_leaves_the_file_alone(written, tmp_path):
    path, store, _, Z, _, _ = written
    export_to_anndata(store, str(path), run=RUN)
    with pytest.raises(StorageError, match=r"cells\.h5ad already has \['obsm/X_eigenflow', .*choose another key"):
        export_to_anndata(store, str(path), run=RUN)
    before = path.read_bytes()
    export_to_anndata(store, str(path), run=RUN, key="X_second", out=str(tmp_path / "copy.h5ad"))
    assert path.read_bytes() == before
    copy = anndata.read_h5ad(tmp_path / "copy.h5ad")
    np.testing.assert_array_equal(copy.obsm["X_second"], Z)
    np.testing.assert_array_equal(copy.obsm["X_eigenflow"], Z)


def test_a_file_of_other_cells_is_refused_and_left_unchanged(written, tmp_path):
    _, store, adata, _, _, _ = written
    renamed = adata.copy()
    renamed.obs_names = [f"x{i}" if i == 7 else name for i, name in enumerate(adata.obs_names)]
    renamed.write_h5ad(tmp_path / "renamed.h5ad")
    before = (tmp_path / "renamed.h5ad").read_bytes()
    with pytest.raises(StorageError, match=r"renamed\.h5ad: cell 7 is named 'x7' in the file and 'cell-007' in "
                                           r"store .*s\.zarr: the file's cells are not the store's$"):
        export_to_anndata(store, str(tmp_path / "renamed.h5ad"), run=RUN)
    assert (tmp_path / "renamed.h5ad").read_bytes() == before
    adata[:-1].copy().write_h5ad(tmp_path / "fewer.h5ad")
    with pytest.raises(StorageError, match=rf"fewer\.h5ad has {N - 1} cells and store .*s\.zarr has {N}: the file's "
                                           "cells are not the store's$"):
        export_to_anndata(store, str(tmp_path / "fewer.h5ad"), run=RUN)


def test_a_failed_write_leaves_no_element_behind(written):
    path, store, _, _, _, _ = written
    with h5py.File(path, "r+") as f:
        del f["uns"]
        f["uns"] = np.zeros(1)  # uns is a dataset: the elements are written, but uns/X_eigenflow cannot be placed
    with pytest.raises(StorageError, match=r"cells\.h5ad: uns is a Dataset, not a group"):
        export_to_anndata(store, str(path), run=RUN)
    with h5py.File(path) as f:
        assert "X_eigenflow" not in f["obsm"] and "X_eigenflow_labels" not in f["obs"]
        assert not any(name.startswith(PARTIAL_GROUP) for name in f)


# ---- AnnData zarr directories -------------------------------------------------------------------------------------
def _tree(root):
    """``{relative path: bytes}`` of every file under ``root``."""
    import os

    found = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = open(path, "rb").read()
    return found


@pytest.fixture(params=[2, 3], ids=["zarr-v2", "zarr-v3"])
def zarr_written(request, tmp_path):
    """``(directory, store, adata, Z, labels, scores)``: an AnnData zarr directory written by anndata (format 2 or 3,
    consolidated metadata) and a store ingested from it with a run's outputs."""
    adata = _cells(6)
    path = tmp_path / "cells.zarr"
    with anndata.settings.override(zarr_write_format=request.param):
        adata.write_zarr(path)
    return (path, *_store_with_outputs(path, tmp_path / "s.zarr", seed=1, adata=adata))


def test_results_go_into_an_anndata_zarr_directory_and_nothing_else_changes(zarr_written):
    path, store, adata, Z, labels, scores = zarr_written
    before = _tree(path)
    done = export_to_anndata(store, str(path), run=RUN)
    assert done["written"] == ["obsm/X_eigenflow", "obs/X_eigenflow_labels", "obsm/X_eigenflow_scores",
                               "uns/X_eigenflow"]
    _assert_exported(anndata.read_zarr(path), adata, Z, labels, scores)  # through the consolidated metadata
    after = _tree(path)
    metadata = {".zmetadata", "zarr.json", "obs/.zattrs", "obs/zarr.json"}  # the consolidated metadata, obs's columns
    assert {k: v for k, v in after.items() if k in before and k not in metadata} == \
        {k: v for k, v in before.items() if k not in metadata}  # every other file byte for byte
    new = {k.split("/")[0] + "/" + k.split("/")[1] for k in after if k not in before}
    assert new == {"obsm/X_eigenflow", "obs/X_eigenflow_labels", "obsm/X_eigenflow_scores", "uns/X_eigenflow"}


def test_zarr_directory_existing_key_copy_and_other_cells(zarr_written, tmp_path):
    path, store, adata, Z, _, _ = zarr_written
    export_to_anndata(store, str(path), run=RUN)
    with pytest.raises(StorageError, match=r"cells\.zarr already has \['obsm/X_eigenflow', .*choose another key"):
        export_to_anndata(store, str(path), run=RUN)
    export_to_anndata(store, str(path), run=RUN, overwrite=True)  # replaced in place, the rest as it was
    np.testing.assert_array_equal(anndata.read_zarr(path).obsm["X_eigenflow"], Z)
    before = _tree(path)
    copy = tmp_path / "copy.zarr"
    export_to_anndata(store, str(path), run=RUN, key="X_second", out=str(copy))
    assert _tree(path) == before
    back = anndata.read_zarr(copy)
    np.testing.assert_array_equal(back.obsm["X_second"], Z)
    np.testing.assert_array_equal(back.obsm["X_eigenflow"], Z)
    with pytest.raises(StorageError, match=r"copy\.zarr already exists: pass overwrite=True"):
        export_to_anndata(store, str(path), run=RUN, key="X_third", out=str(copy))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "mine.txt").write_text("keep")
    with pytest.raises(StorageError, match=r"out \(--out\) '.*plain' must be a directory name ending in \.zarr"):
        export_to_anndata(store, str(path), run=RUN, out=str(tmp_path / "plain"), overwrite=True)
    assert (tmp_path / "plain" / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no partial copies
    renamed = adata.copy()
    renamed.obs_names = [f"x{i}" if i == 7 else name for i, name in enumerate(adata.obs_names)]
    renamed.write_zarr(tmp_path / "renamed.zarr")
    before = _tree(tmp_path / "renamed.zarr")
    with pytest.raises(StorageError, match=r"renamed\.zarr: cell 7 is named 'x7' in the file and 'cell-007' in "
                                           r"store .*s\.zarr: the file's cells are not the store's$"):
        export_to_anndata(store, str(tmp_path / "renamed.zarr"), run=RUN)
    assert _tree(tmp_path / "renamed.zarr") == before


def test_a_failed_zarr_write_leaves_no_element_behind(zarr_written):
    import shutil

    import zarr

    path, store, _, _, _, _ = zarr_written
    shutil.rmtree(path / "uns")
    zarr.open_group(str(path), mode="r+", use_consolidated=False).create_array("uns", shape=(1,), dtype="f4")
    with pytest.raises(StorageError, match=r"cells\.zarr: uns is an array, not a group"):
        export_to_anndata(store, str(path), run=RUN)
    assert not (path / "obsm" / "X_eigenflow").exists() and not (path / "obs" / "X_eigenflow_labels").exists()
    assert not any(p.name.startswith(PARTIAL_GROUP) for p in path.iterdir())


def test_cli_exports_into_an_anndata_zarr_directory(zarr_written, tmp_path):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    path, store, _, Z, _, _ = zarr_written
    r = CliRunner().invoke(app, ["export", str(store), str(path), "--run", RUN, "--obsm", "X_cli",
                                 "--out", str(tmp_path / "with_results.zarr")])
    assert r.exit_code == 0, r.output
    assert "obsm/X_cli" in r.output
    np.testing.assert_array_equal(anndata.read_zarr(tmp_path / "with_results.zarr").obsm["X_cli"], Z)


def test_a_relative_model_store_recorded_by_an_extend_run_is_found_beside_the_store(written, tmp_path,
                                                                                      monkeypatch):
    """Manifests of extend runs recorded the model store as given; a relative one is resolved from the current
    directory, then beside the store, and named in the error when it is neither."""
    import shutil

    from eigenflow.storage.manifest import RunManifest, write_manifest

    path, store, _, _, labels, _ = written
    (tmp_path / "runs").mkdir()
    shutil.copytree(store, tmp_path / "runs" / "ref.zarr")  # the model's store: the same cells, their categories
    shutil.move(store, tmp_path / "runs" / "out.zarr")
    out = tmp_path / "runs" / "out.zarr"
    manifest = RunManifest.start("extend-old", flow="extend", parameters={"store": "ref.zarr", "model_run": RUN,
                                                                          "method": "tsk"}, seed=None)
    manifest.finish("completed")
    write_manifest(str(out), manifest)
    write_embedding(out, "extend-old", np.zeros((N, 2), np.float32))
    write_point_array(out, layout.output_path("extend-old", "labels"), labels, dtype="int32")
    monkeypatch.chdir(tmp_path)  # "ref.zarr" is nothing here; it is beside out.zarr
    export_to_anndata(out, str(path), run="extend-old", key="X_old")
    assert list(anndata.read_h5ad(path).obs["X_old_labels"].cat.categories) == CATEGORIES
    shutil.rmtree(tmp_path / "runs" / "ref.zarr")
    with pytest.raises(StorageError, match=r"run 'extend-old' of store .*out\.zarr names its model store as "
                                           r"'ref\.zarr', a relative path that is not a directory from here nor "
                                           r"beside the store \(tried \["):
        export_to_anndata(out, str(path), run="extend-old", key="X_older")
