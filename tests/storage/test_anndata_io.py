"""AnnData (.h5ad, AnnData zarr) and HDF5 dataset sources: files written by anndata / h5py, ingested in row chunks.

The store's X must equal the chosen representation, its labels the categorical's codes (missing: -1), its
attributes the category names, and its kept obs names the file's; bad selections end in one-line errors naming
the file and the key.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

anndata = pytest.importorskip("anndata")
h5py = pytest.importorskip("h5py")

from eigenflow.storage import layout  # noqa: E402
from eigenflow.storage.anndata_io import MAX_DENSIFIED_COLUMNS, read_obs_names  # noqa: E402
from eigenflow.storage.arrays import read_labels, read_X  # noqa: E402
from eigenflow.storage.errors import IngestError  # noqa: E402
from eigenflow.storage.ingest import ingest  # noqa: E402
from eigenflow.storage.store import open_store, read_attrs  # noqa: E402

N = 53  # not a multiple of the chunk below: the last chunk is short
CATEGORIES = ["B cell", "T cell", "monocyte"]


def _cells(seed: int = 0) -> anndata.AnnData:
    """Dense X (N, 7), obsm X_pca (N, 4), a categorical obs column with missing values, a string column."""
    rng = np.random.default_rng(seed)
    kind = pd.Categorical(np.array(CATEGORIES)[rng.integers(0, 3, N)], categories=CATEGORIES)
    kind[rng.random(N) < 0.3] = np.nan
    obs = pd.DataFrame({"cell_type": kind, "batch": rng.integers(0, 2, N)},
                       index=[f"cell-{i:03d}" for i in range(N)])
    return anndata.AnnData(X=rng.standard_normal((N, 7)).astype(np.float32), obs=obs,
                           obsm={"X_pca": rng.standard_normal((N, 4)).astype(np.float32)})


@pytest.fixture
def h5ad(tmp_path):
    adata = _cells()
    path = tmp_path / "cells.h5ad"
    adata.write_h5ad(path)
    return path, adata


def _expected_codes(adata: anndata.AnnData, column: str) -> np.ndarray:
    return np.asarray(adata.obs[column].cat.codes, dtype=np.int32)


def test_h5ad_obsm_representation_and_categorical_labels_in_row_chunks(h5ad, tmp_path):
    path, adata = h5ad
    info = ingest(str(path), tmp_path / "s.zarr", x_key="X_pca", labels_key="cell_type", chunk_rows=8)
    assert (info.n, info.d, info.has_labels) == (N, 4, True)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), adata.obsm["X_pca"])
    y = read_labels(tmp_path / "s.zarr")
    np.testing.assert_array_equal(y, _expected_codes(adata, "cell_type"))
    assert (y == -1).sum() == adata.obs["cell_type"].isna().sum() > 0
    attrs = read_attrs(tmp_path / "s.zarr")
    assert attrs[layout.ATTR_LABEL_CATEGORIES] == CATEGORIES
    assert (attrs[layout.ATTR_CELLS_X_KEY], attrs[layout.ATTR_CELLS_LABELS_KEY]) == ("X_pca", "cell_type")
    group = open_store(tmp_path / "s.zarr")
    assert read_obs_names(group, 0, N).tolist() == adata.obs_names.tolist()
    assert read_obs_names(group, 9, 17).tolist() == adata.obs_names[9:17].tolist()


def test_h5ad_dense_x_and_a_string_obs_column(tmp_path):
    adata = _cells()
    adata.obs["donor"] = np.where(np.arange(N) % 3 == 0, "", np.where(np.arange(N) % 2 == 0, "d2", "d1"))
    path = tmp_path / "cells.h5ad"
    with anndata.settings.override(allow_write_nullable_strings=False):
        adata.strings_to_categoricals = lambda *a, **k: None  # keep the column a plain string array
        adata.write_h5ad(path)
    with h5py.File(path) as f:
        assert f["obs/donor"].attrs["encoding-type"] == "string-array"
    ingest(str(path), tmp_path / "s.zarr", labels_key="donor", chunk_rows=10)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), adata.X)
    expected = np.where(np.arange(N) % 3 == 0, -1, np.where(np.arange(N) % 2 == 0, 1, 0))
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), expected)
    assert read_attrs(tmp_path / "s.zarr")[layout.ATTR_LABEL_CATEGORIES] == ["d1", "d2"]


def test_integer_categories_are_named_by_their_values(tmp_path):
    adata = _cells()
    clusters = np.arange(N) % 4 * 10
    adata.obs["leiden"] = pd.Categorical(clusters)  # categories 0, 10, 20, 30 stored as integers
    adata.write_h5ad(tmp_path / "cells.h5ad")
    ingest(str(tmp_path / "cells.h5ad"), tmp_path / "s.zarr", labels_key="leiden")
    assert read_attrs(tmp_path / "s.zarr")[layout.ATTR_LABEL_CATEGORIES] == ["0", "10", "20", "30"]
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), clusters // 10)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_anndata_zarr_layout(tmp_path, zarr_format):
    adata = _cells(1)
    with warnings.catch_warnings(), anndata.settings.override(zarr_write_format=zarr_format):
        warnings.simplefilter("ignore", UserWarning)  # anndata's note on the zarr format version it writes
        adata.write_zarr(tmp_path / "cells.zarr")
    ingest(str(tmp_path / "cells.zarr"), tmp_path / "s.zarr", x_key="X_pca", labels_key="cell_type", chunk_rows=16)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), adata.obsm["X_pca"])
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), _expected_codes(adata, "cell_type"))
    assert read_obs_names(open_store(tmp_path / "s.zarr"), 0, N).tolist() == adata.obs_names.tolist()


def test_hdf5_dataset_source_with_labels_dataset(tmp_path):
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((N, 5)), rng.integers(-1, 3, N)
    with h5py.File(tmp_path / "data.h5", "w") as f:
        f.create_dataset("/group/points", data=X, chunks=(8, 5))
        f.create_dataset("/group/labels", data=y)
    info = ingest(f"{tmp_path / 'data.h5'}:/group/points", tmp_path / "s.zarr", labels_key="/group/labels",
                  chunk_rows=16, dtype="float64")
    assert (info.n, info.d) == (N, 5)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X)
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), y)
    with pytest.raises(IngestError, match=r"data\.h5 names no dataset; .*\['/group/labels', '/group/points'\]"):
        ingest(str(tmp_path / "data.h5"), tmp_path / "t.zarr")


def test_narrow_sparse_x_is_densified_chunk_by_chunk(tmp_path):
    import scipy.sparse as sp

    X = sp.random(N, 30, density=0.2, format="csr", dtype=np.float32, random_state=3)
    anndata.AnnData(X=X).write_h5ad(tmp_path / "sparse.h5ad")
    ingest(str(tmp_path / "sparse.h5ad"), tmp_path / "s.zarr", chunk_rows=7)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), X.toarray())


def test_wide_sparse_x_without_a_dense_representation_is_refused(tmp_path):
    import scipy.sparse as sp

    X = sp.random(20, MAX_DENSIFIED_COLUMNS + 1, density=0.01, format="csr", dtype=np.float32, random_state=4)
    anndata.AnnData(X=X, obsm={"X_umap": np.zeros((20, 2), np.float32)}).write_h5ad(tmp_path / "counts.h5ad")
    with pytest.raises(IngestError) as caught:
        ingest(str(tmp_path / "counts.h5ad"), tmp_path / "s.zarr")
    message = str(caught.value)
    assert "\n" not in message and "counts.h5ad" in message and "sparse csr_matrix" in message
    assert f"more than {MAX_DENSIFIED_COLUMNS} columns" in message and "['X_umap']" in message
    assert "sc.pp.pca" in message and "--use-rep" in message
    assert not (tmp_path / "s.zarr").exists()


def test_missing_representation_and_missing_obs_column_are_one_line_errors(h5ad, tmp_path):
    path, _ = h5ad
    with pytest.raises(IngestError, match=r"cells\.h5ad: use_rep \(--use-rep\) 'X_scvi' is neither 'X' nor a key "
                                          r"of obsm; obsm keys are \['X_pca'\]$"):
        ingest(str(path), tmp_path / "s.zarr", x_key="X_scvi")
    with pytest.raises(IngestError, match=r"cells\.h5ad: labels_obs \(--labels-obs\) 'celltype' is not a column of "
                                          r"obs; columns are \['cell_type', 'batch'\]$"):
        ingest(str(path), tmp_path / "s.zarr", labels_key="celltype")
    with pytest.raises(IngestError, match=r"obs column 'batch' is encoded as 'array'; labels_obs"):
        ingest(str(path), tmp_path / "s.zarr", labels_key="batch")
    assert not (tmp_path / "s.zarr").exists()


def test_cli_ingest_takes_use_rep_and_labels_obs_and_ends_a_bad_key_in_one_line(h5ad, tmp_path):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    path, adata = h5ad
    runner = CliRunner()
    bad = runner.invoke(app, ["ingest", str(path), str(tmp_path / "s.zarr"), "--use-rep", "X_scvi"])
    assert bad.exit_code == 1
    assert bad.output.strip().splitlines() == [f"error: {path}: use_rep (--use-rep) 'X_scvi' is neither 'X' nor a "
                                               "key of obsm; obsm keys are ['X_pca']"]
    done = runner.invoke(app, ["ingest", str(path), str(tmp_path / "s.zarr"), "--use-rep", "X_pca",
                               "--labels-obs", "cell_type"])
    assert done.exit_code == 0, done.output
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), _expected_codes(adata, "cell_type"))


@pytest.mark.parametrize("array", [layout.OBS_NAME_BYTES, layout.OBS_NAME_OFFSETS])
def test_the_kept_obs_names_are_covered_by_the_checksums(h5ad, tmp_path, array):
    """A chunk of the kept names rewritten with other (valid, decodable) content is found by ``verify`` and
    ``eigenflow verify``, and the export refuses to compare cells against it."""
    import zarr
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app
    from eigenflow.storage.anndata_export import export_to_anndata
    from eigenflow.storage.checksums import verify
    from eigenflow.storage.embedding_io import write_embedding
    from eigenflow.storage.errors import StoreFormatError

    path, _ = h5ad
    store = tmp_path / "s.zarr"
    ingest(str(path), store, x_key="X_pca", chunk_rows=16)
    report = verify(str(store))
    assert report["bad"] == [] and report["arrays"][array] >= 1
    write_embedding(store, "embed-x", np.zeros((N, 2), np.float32))
    node = zarr.open_group(str(store), mode="r+")[array]
    values = node[0:4]
    node[0:4] = values + 1 if array == layout.OBS_NAME_BYTES else values * 0 + values[0]  # another name, same length
    assert read_obs_names(zarr.open_group(str(store), mode="r"), 0, 4).tolist() != ["cell-000", "cell-001",
                                                                                   "cell-002", "cell-003"]
    assert verify(str(store))["bad"] == [{"array": array, "chunk": "c/0", "problem": "changed"}]
    r = CliRunner().invoke(app, ["verify", str(store)])
    assert r.exit_code == 1 and f"{array}" in r.output
    with pytest.raises(StoreFormatError, match=rf"is damaged: {array}/c/0 \(changed\)"):
        export_to_anndata(store, str(path), run="embed-x")


def _write_pre_07_h5ad(path, seed: int = 0) -> None:
    """An .h5ad laid out as anndata < 0.7 wrote it (scanpy's bundled pbmc68k_reduced.h5ad is one): obs, var and
    obsm one structured dataset each; a categorical obs column as integer codes with its categories in
    ``uns/<column>_categories``."""
    rng = np.random.default_rng(seed)
    obs = np.zeros(N, dtype=[("index", "S10"), ("cell_type", "i1"), ("batch", "S3")])
    obs["index"] = [f"cell-{i:03d}".encode() for i in range(N)]
    obs["cell_type"] = rng.integers(-1, 3, N)
    obs["batch"] = [b"b" + str(i % 2).encode() for i in range(N)]
    obsm = np.zeros(N, dtype=[("X_pca", "<f4", (4,)), ("X_umap", "<f4", (2,))])
    obsm["X_pca"] = rng.standard_normal((N, 4))
    obsm["X_umap"] = rng.standard_normal((N, 2))
    var = np.zeros(7, dtype=[("index", "S6")])
    var["index"] = [f"gene{j}".encode() for j in range(7)]
    with h5py.File(path, "w") as f:
        f["X"] = rng.standard_normal((N, 7)).astype(np.float32)
        f["obs"], f["obsm"], f["var"] = obs, obsm, var
        f["uns/cell_type_categories"] = np.array([c.encode() for c in CATEGORIES])


def test_pre_07_h5ad_with_structured_obs_and_obsm_reads_as_anndata_reads_it(tmp_path):
    """Representations from the fields of the structured obsm, labels from a legacy categorical column, obs names
    from the first obs field: the same values as anndata's own reader gives, read in row chunks."""
    path = tmp_path / "old.h5ad"
    _write_pre_07_h5ad(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's OldFormatWarning
        reference = anndata.read_h5ad(path)
    info = ingest(str(path), tmp_path / "s.zarr", x_key="X_pca", labels_key="cell_type", chunk_rows=8)
    assert (info.n, info.d, info.has_labels) == (N, 4, True)
    np.testing.assert_array_equal(read_X(tmp_path / "s.zarr"), reference.obsm["X_pca"])
    np.testing.assert_array_equal(read_labels(tmp_path / "s.zarr"), _expected_codes(reference, "cell_type"))
    assert read_attrs(tmp_path / "s.zarr")[layout.ATTR_LABEL_CATEGORIES] == list(reference.obs["cell_type"].cat.categories)
    assert read_obs_names(open_store(tmp_path / "s.zarr"), 0, N).tolist() == reference.obs_names.tolist()
    ingest(str(path), tmp_path / "b.zarr", x_key="X_umap", labels_key="batch")  # a string column
    np.testing.assert_array_equal(read_X(tmp_path / "b.zarr"), reference.obsm["X_umap"])
    np.testing.assert_array_equal(read_labels(tmp_path / "b.zarr"), (reference.obs["batch"] == "b1").astype(int))
    with pytest.raises(IngestError, match=r"'X_tsne' is neither 'X' nor a key of obsm; obsm keys are \['X_pca', "
                                          r"'X_umap'\]"):
        ingest(str(path), tmp_path / "c.zarr", x_key="X_tsne")


def test_export_into_a_pre_07_h5ad_is_refused_in_one_line(tmp_path):
    from eigenflow.storage.anndata_export import export_to_anndata
    from eigenflow.storage.errors import StorageError

    path = tmp_path / "old.h5ad"
    _write_pre_07_h5ad(path)
    ingest(str(path), tmp_path / "s.zarr", x_key="X_pca")
    before = path.read_bytes()
    with pytest.raises(StorageError, match=r"written by anndata before 0\.7 .* rewrite it with anndata"):
        export_to_anndata(tmp_path / "s.zarr", str(path), run="any")
    assert path.read_bytes() == before
