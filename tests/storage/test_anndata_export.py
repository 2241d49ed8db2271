"""A run's results written back into an .h5ad file (storage level: the run's arrays written with storage's own
writers into a store ingested from the file). The pipeline round trip is in
``tests/pipeline/test_anndata_flow.py``."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
h5py = pytest.importorskip("h5py")

from storage import layout  # noqa: E402
from storage.anndata_export import PARTIAL_GROUP, export_to_anndata  # noqa: E402
from storage.embedding_io import write_embedding, write_point_array  # noqa: E402
from storage.errors import StorageError  # noqa: E402
from storage.ingest import ingest  # noqa: E402

from tests.storage.test_anndata_io import CATEGORIES, N, _cells  # noqa: E402

RUN = "embed-test-1"


@pytest.fixture
def written(tmp_path):
    """``(file, store, adata, Z, labels, scores)``: a store ingested from the file, with a run's outputs."""
    adata = _cells(5)
    path = tmp_path / "cells.h5ad"
    adata.write_h5ad(path)
    store = tmp_path / "s.zarr"
    ingest(str(path), store, x_key="X_pca", labels_key="cell_type", chunk_rows=16)
    rng = np.random.default_rng(0)
    Z, scores = rng.standard_normal((N, 3)).astype(np.float32), rng.standard_normal((N, 3))
    labels = rng.integers(0, 3, N)
    write_embedding(store, RUN, Z)
    write_point_array(store, layout.output_path(RUN, "labels"), labels, dtype="int32")
    write_point_array(store, layout.output_path(RUN, "scores"), scores, dtype="float32")
    return path, store, adata, Z, labels, scores


def test_results_go_into_obsm_obs_uns_and_nothing_else_changes(written):
    path, store, adata, Z, labels, scores = written
    done = export_to_anndata(store, str(path), run=RUN)
    assert done["written"] == ["obsm/X_eigenflow", "obs/X_eigenflow_labels", "obsm/X_eigenflow_scores",
                               "uns/X_eigenflow"]
    back = anndata.read_h5ad(path)
    np.testing.assert_array_equal(back.obsm["X_eigenflow"], Z)
    np.testing.assert_allclose(back.obsm["X_eigenflow_scores"], scores.astype(np.float32))
    column = back.obs["X_eigenflow_labels"]
    assert list(column.cat.categories) == CATEGORIES
    np.testing.assert_array_equal(column.cat.codes.to_numpy(), labels)
    assert back.uns["X_eigenflow"]["run"] == RUN
    # the file's own elements are as they were
    np.testing.assert_array_equal(back.X, adata.X)
    np.testing.assert_array_equal(back.obsm["X_pca"], adata.obsm["X_pca"])
    assert back.obs_names.tolist() == adata.obs_names.tolist()
    assert back.obs["cell_type"].equals(adata.obs["cell_type"])
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
