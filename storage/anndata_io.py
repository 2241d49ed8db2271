"""AnnData (``.h5ad``, AnnData's zarr layout) and plain HDF5 sources, read in row chunks.

An AnnData source gives X from one representation of its cells: ``X`` itself or a key of ``obsm`` (``x_key``,
the CLI's ``--use-rep``), and labels from one ``obs`` column (``labels_key``, the CLI's ``--labels-obs``): a
categorical column gives its integer codes (missing values: ``-1``, unlabeled) and its category names; a string
column gives codes into its sorted distinct values (the empty string is missing). The obs names and the category
names are kept in the store (:func:`write_cells`) so that every export can line up with the file and name the
labels. Only row slices are read (h5py / zarr slicing): memory is one chunk of rows plus, for a string label
column, its distinct values.

A sparse ``X`` (``csr_matrix``) is densified chunk by chunk when it has at most :data:`MAX_DENSIFIED_COLUMNS`
columns, and refused otherwise with an error that lists the dense representations the file has.

Files written by anndata before 0.7 keep ``obs`` and ``obsm`` as one structured HDF5 dataset each instead of a group:
they are read as anndata reads them (:class:`_Field`): the fields of ``obsm`` are its representations, the first
field of ``obs`` is the obs names and the others its columns, a column with ``uns/<column>_categories`` being
categorical (its values the codes).

A plain HDF5 dataset ``file.h5:/group/dataset`` (``.h5`` / ``.hdf5`` / ``.he5``) is a 2-D array source; labels
may come from another 1-D dataset of the file (``labels_key="/group/labels"``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import layout
from .errors import IngestError
from .source import Source, check_label_count, check_shape_2d

#: Suffix of an AnnData HDF5 file.
H5AD_SUFFIX = ".h5ad"
#: Widest sparse ``X`` densified chunk by chunk: at 1024 float32 columns a chunk of 2**16 rows is 256 MiB dense,
#: four times the store's chunk budget (``layout.MAX_CHUNK_BYTES``); wider counts matrices belong in a reduced
#: representation (PCA), which is also what the kNN graph should be built on.
MAX_DENSIFIED_COLUMNS = 1024
#: ``obs`` column encodings that ``labels_key`` accepts.
LABEL_ENCODINGS = ("categorical", "string-array")
_HDF5_PATH = re.compile(r"^(?P<file>.+\.(?:h5|hdf5|he5))(?::(?P<dataset>/.*))?$", re.IGNORECASE)


# ---- recognizing the sources --------------------------------------------------------------------------------
def split_hdf5_path(path: str) -> tuple[str, str | None] | None:
    """``"f.h5:/g/d"`` -> ``("f.h5", "/g/d")``, ``"f.h5"`` -> ``("f.h5", None)``; None if not an HDF5 path."""
    match = _HDF5_PATH.match(os.fspath(path))
    return None if match is None else (match["file"], match["dataset"])


def is_anndata_zarr(path: str) -> bool:
    """True if ``path`` is a local zarr group (v2 or v3) whose root attributes say ``encoding-type: anndata``."""
    for name, key in (("zarr.json", "attributes"), (".zattrs", None)):
        meta_path = os.path.join(os.fspath(path), name)
        if os.path.isfile(meta_path):
            with open(meta_path, encoding="utf-8") as fh:
                try:
                    meta = json.load(fh)
                except ValueError:
                    return False
            attrs = meta.get(key) or {} if key else meta
            return isinstance(attrs, dict) and attrs.get("encoding-type") == "anndata"
    return False


def _open_container(path: str) -> Any:
    """The file read-only: an ``h5py.File`` or a ``zarr.Group`` (both sliced the same way)."""
    if os.path.isdir(path):
        import zarr

        return zarr.open_group(path, mode="r")
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise IngestError(f"cannot read {path} as HDF5: {exc}") from exc


def _encoding(node: Any) -> str:
    value = node.attrs.get("encoding-type", "")
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_array(node: Any) -> bool:
    return hasattr(node, "shape") and hasattr(node, "dtype")


def _strings(node: Any, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a string dataset as a numpy ``str`` array (h5py bytes and zarr strings alike; the
    values of a numeric dataset, e.g. integer categories, as their decimal strings)."""
    if node.dtype.kind in "biuf":
        return np.array([str(v) for v in np.asarray(node[start:stop]).tolist()], dtype=str)
    if hasattr(node, "asstr"):  # h5py
        return np.asarray(node.asstr()[start:stop], dtype=str)
    return np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s)
                     for s in np.asarray(node[start:stop]).tolist()], dtype=str)


class _Field:
    """One field of a structured HDF5 dataset (anndata < 0.7's ``obs`` / ``obsm``) read as a dataset of its own:
    ``shape`` (n,) or (n, width), ``dtype`` the field's base dtype, row slices read through h5py's field access."""

    def __init__(self, dataset: Any, name: str) -> None:
        self.dataset, self.name = dataset, name
        sub = dataset.dtype.fields[name][0]
        self.dtype, self.shape = sub.base, (int(dataset.shape[0]), *sub.shape)
        self.attrs: dict = {}

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self.dataset.fields(self.name)[rows])


def _is_structured(node: Any) -> bool:
    """Whether ``node`` is a structured dataset (anndata < 0.7's ``obs`` and ``obsm``)."""
    return _is_array(node) and getattr(node.dtype, "names", None) is not None


def _obsm_keys(root: Any) -> list[str]:
    if "obsm" not in root:
        return []
    obsm = root["obsm"]
    return list(obsm.dtype.names) if _is_structured(obsm) else list(obsm.keys())


def _obsm_node(root: Any, key: str) -> Any:
    obsm = root["obsm"]
    return _Field(obsm, key) if _is_structured(obsm) else obsm[key]


# ---- the cells: names and labels ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Cells:
    """What an AnnData source keeps besides X: where X and the labels came from and the cells' names.

    Attributes
    ----------
    file : str
        The source file (or AnnData zarr directory).
    x_key : str
        ``"X"`` or the ``obsm`` key X was read from.
    labels_key : str or None
        The ``obs`` column of the labels.
    categories : tuple of str or None
        Name of label code ``i`` at position ``i``.
    n : int
        Number of cells.
    """

    file: str
    x_key: str
    labels_key: str | None
    categories: tuple[str, ...] | None
    n: int

    def names(self, rows: int) -> Iterator[np.ndarray]:
        """The obs names, ``rows`` at a time (str arrays)."""
        with _closing(_open_container(self.file)) as root:
            obs = root["obs"]
            index = _Field(obs, obs.dtype.names[0]) if _is_structured(obs) else obs[_attr_str(obs, "_index", "_index")]
            for start in range(0, self.n, rows):
                yield _strings(index, start, min(start + rows, self.n))


class _closing:
    """Close an h5py file at the end of a ``with`` (a zarr group has nothing to close)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def __enter__(self) -> Any:
        return self.root

    def __exit__(self, *exc: Any) -> None:
        if hasattr(self.root, "close"):
            self.root.close()


def _attr_str(node: Any, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _obs_columns(obs: Any) -> list[str]:
    if _is_structured(obs):
        return list(obs.dtype.names[1:])  # the first field is the obs names
    order = obs.attrs.get("column-order", [])
    return [c.decode() if isinstance(c, bytes) else str(c) for c in np.atleast_1d(np.asarray(order, dtype=object))]


def _label_node(path: str, obs: Any, column: str) -> tuple[Any, str]:
    """The node of the ``obs`` column ``column`` and its encoding (one of :data:`LABEL_ENCODINGS`)."""
    columns = _obs_columns(obs)
    if column not in columns or not (_is_structured(obs) or column in obs):
        raise IngestError(f"{path}: labels_obs (--labels-obs) {column!r} is not a column of obs; columns are {columns}")
    if _is_structured(obs):
        node = _Field(obs, column)
        return node, "categorical" if f"uns/{column}_categories" in obs.file else "string-array"
    node = obs[column]
    encoding = _encoding(node)
    if encoding not in LABEL_ENCODINGS:
        raise IngestError(f"{path}: obs column {column!r} is encoded as {encoding or type(node).__name__!r}; "
                          f"labels_obs (--labels-obs) takes one of {list(LABEL_ENCODINGS)}")
    return node, encoding


def check_anndata_keys(path: str, x_key: str = "X", labels_key: str | None = None) -> None:
    """Raise :class:`IngestError` unless the AnnData file ``path`` has the representation ``x_key`` (dense, or a
    narrow csr_matrix) and, when given, the ``obs`` column ``labels_key`` in a label encoding; reads the file's
    metadata only (the checks a run makes before it starts)."""
    if not os.path.exists(path):
        raise IngestError(f"source file {path} does not exist")
    with _closing(_open_container(path)) as root:
        if _encoding(root) not in ("anndata", "") or "obs" not in root:
            raise IngestError(f"{path} is not an AnnData file (no obs / encoding-type {_encoding(root)!r})")
        _x_node(path, root, x_key)
        if labels_key is not None:
            _label_node(path, root["obs"], labels_key)


def _label_reader(path: str, obs: Any, column: str) -> tuple[tuple[str, ...], Any]:
    """``(category names, codes(node, start, stop))`` for the ``obs`` column ``column``."""
    node, encoding = _label_node(path, obs, column)
    if encoding == "categorical" and isinstance(node, _Field):  # anndata < 0.7: the codes, categories in uns
        names = obs.file[f"uns/{column}_categories"]
        categories = tuple(str(c) for c in _strings(names, 0, names.shape[0]))
        return categories, lambda start, stop: np.asarray(node[start:stop], dtype=np.int64)
    if encoding == "categorical":
        categories = tuple(str(c) for c in _strings(node["categories"], 0, node["categories"].shape[0]))
        return categories, lambda start, stop: np.asarray(node["codes"][start:stop], dtype=np.int64)
    # "string-array": the distinct non-empty strings, sorted, are the categories
    n = int(node.shape[0])
    step = layout.DEFAULT_CHUNK_ROWS
    distinct = set()
    for start in range(0, n, step):
        distinct.update(np.unique(_strings(node, start, min(start + step, n))).tolist())
    distinct.discard("")
    categories = tuple(sorted(distinct))
    lookup = {name: code for code, name in enumerate(categories)}

    def codes(start: int, stop: int) -> np.ndarray:
        return np.array([lookup.get(s, -1) for s in _strings(node, start, stop)], dtype=np.int64)

    return categories, codes


# ---- X: a dense array or a narrow csr_matrix ----------------------------------------------------------------
def _representations(root: Any) -> list[str]:
    """The dense 2-D representations of the file: ``X`` (when dense) and the ``obsm`` keys."""
    reps = ["X"] if "X" in root and _is_array(root["X"]) else []
    nodes = [(k, _obsm_node(root, k)) for k in _obsm_keys(root)]
    return reps + [k for k, node in nodes if _is_array(node) and len(node.shape) == 2]


def _x_node(path: str, root: Any, x_key: str) -> tuple[Any, int, int]:
    """The node of X (``X`` or ``obsm/<x_key>``) and its shape; refuses a wide sparse or unknown encoding."""
    obsm = _obsm_keys(root)
    if x_key == "X":
        if "X" not in root:
            raise IngestError(f"{path}: use_rep (--use-rep) 'X' is not in the file (it has no X); obsm keys are {obsm}")
        node = root["X"]
    elif x_key in obsm:
        node = _obsm_node(root, x_key)
    else:
        raise IngestError(f"{path}: use_rep (--use-rep) {x_key!r} is neither 'X' nor a key of obsm; obsm keys are "
                          f"{obsm}")
    if _is_array(node):
        check_shape_2d(tuple(node.shape), f"{path}: {x_key}")
        return node, int(node.shape[0]), int(node.shape[1])
    encoding = _encoding(node)
    shape = tuple(int(s) for s in node.attrs.get("shape", (0, 0)))
    if encoding == "csr_matrix" and len(shape) == 2 and shape[1] <= MAX_DENSIFIED_COLUMNS:
        return node, shape[0], shape[1]
    dense = [r for r in _representations(root) if r != x_key]
    if encoding in ("csr_matrix", "csc_matrix"):
        why = (f"more than {MAX_DENSIFIED_COLUMNS} columns are not densified chunk by chunk" if encoding ==
               "csr_matrix" else "a csc_matrix cannot be read by rows")
        raise IngestError(f"{path}: {x_key} is a sparse {encoding} of shape {shape} ({why}); use_rep (--use-rep) "
                          f"takes a dense representation, the file has {dense or 'none'}: make one, e.g. "
                          "sc.pp.pca(adata) then adata.write_h5ad(...), and pass --use-rep X_pca")
    raise IngestError(f"{path}: {x_key} is encoded as {encoding!r}; use_rep (--use-rep) takes a dense array or a "
                      f"csr_matrix; the file's dense representations are {dense or 'none'}")


def _read_x(node: Any, n_columns: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of X as a dense ``(stop - start, n_columns)`` array."""
    if _is_array(node):
        return np.asarray(node[start:stop])
    import scipy.sparse as sp

    indptr = np.asarray(node["indptr"][start:stop + 1], dtype=np.int64)
    lo, hi = int(indptr[0]), int(indptr[-1])
    rows = sp.csr_matrix((np.asarray(node["data"][lo:hi]), np.asarray(node["indices"][lo:hi]), indptr - lo),
                         shape=(stop - start, n_columns))
    return rows.toarray()


def anndata_source(path: str, x_key: str = "X", labels_key: str | None = "auto") -> Source:
    """An ``.h5ad`` file or AnnData zarr directory: X from ``x_key`` (``"X"`` or an ``obsm`` key), labels from
    the ``obs`` column ``labels_key`` (``"auto"`` and None: no labels). ``Source.cells`` holds the obs names'
    reader and the category names."""
    path = os.fspath(path)
    labels_key = None if labels_key == "auto" else labels_key
    if not os.path.exists(path):
        raise IngestError(f"source file {path} does not exist")
    with _closing(_open_container(path)) as root:
        if _encoding(root) not in ("anndata", "") or "obs" not in root:
            raise IngestError(f"{path} is not an AnnData file (no obs / encoding-type {_encoding(root)!r})")
        _, n, d = _x_node(path, root, x_key)
        categories = None
        if labels_key is not None:
            categories, _ = _label_reader(path, root["obs"], labels_key)
            check_label_count(int(_label_length(root["obs"][labels_key])), n)

    def blocks(rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        with _closing(_open_container(path)) as root:
            node, _, _ = _x_node(path, root, x_key)
            codes = _label_reader(path, root["obs"], labels_key)[1] if labels_key is not None else None
            for start in range(0, n, rows):
                stop = min(start + rows, n)
                yield _read_x(node, d, start, stop), (None if codes is None else codes(start, stop))

    src = Source("anndata", path, n, d, labels_key is not None, blocks)
    src.cells = Cells(path, x_key, labels_key, categories, n)
    return src


def _label_length(node: Any) -> int:
    return int(node["codes"].shape[0]) if not _is_array(node) else int(node.shape[0])


def hdf5_source(path: str, labels_key: str | None = "auto") -> Source:
    """A 2-D dataset of a plain HDF5 file named as ``file.h5:/group/dataset``; labels from the 1-D dataset
    ``labels_key`` of the same file (``"auto"`` and None: no labels)."""
    split = split_hdf5_path(path)
    file, dataset = split if split else (os.fspath(path), None)
    labels_key = None if labels_key == "auto" else labels_key
    if not os.path.isfile(file):
        raise IngestError(f"source file {file} does not exist")
    with _closing(_open_container(file)) as root:
        found = _datasets(root)
        if dataset is None or dataset not in root or not _is_array(root[dataset]):
            what = "names no dataset" if dataset is None else f"has no dataset {dataset!r}"
            raise IngestError(f"{file} {what}; name one as {file}:/group/dataset; its datasets are {found}")
        shape = tuple(root[dataset].shape)
        check_shape_2d(shape, f"{file}:{dataset}")
        if labels_key is not None:
            if labels_key not in root or not _is_array(root[labels_key]):
                raise IngestError(f"{file}: labels_key {labels_key!r} is not a dataset of the file; its datasets "
                                  f"are {found}")
            check_label_count(int(root[labels_key].shape[0]), shape[0])

    def blocks(rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        with _closing(_open_container(file)) as root:
            x, y = root[dataset], (root[labels_key] if labels_key is not None else None)
            for start in range(0, shape[0], rows):
                stop = min(start + rows, shape[0])
                yield np.asarray(x[start:stop]), (None if y is None else np.asarray(y[start:stop]))

    return Source("hdf5", f"{file}:{dataset}", int(shape[0]), int(shape[1]), labels_key is not None, blocks)


def _datasets(root: Any) -> list[str]:
    """Paths (``/a/b``) of the datasets of an HDF5 file, for error messages."""
    found: list[str] = []
    root.visititems(lambda name, node: found.append("/" + name) if _is_array(node) else None)
    return found


# ---- the store side -----------------------------------------------------------------------------------------
#: Obs names read from the source at once when they are written into the store (memory: these names, whatever
#: the store's chunks).
NAME_BLOCK_ROWS = 4096


def write_cells(group: Any, cells: Cells, chunk_rows: int) -> dict[str, Any]:
    """Write the obs names of ``cells`` into the store ``group`` (UTF-8 bytes + offsets, no string dtype);
    return the root attributes that record X's and the labels' origin and the category names.

    The names are read :data:`NAME_BLOCK_ROWS` at a time; the offsets and the bytes are assembled one chunk each
    and written chunk by chunk (:class:`storage.chunk_files.ChunkAppender`)."""
    from .chunk_files import ChunkAppender

    offsets = group.create_array(layout.OBS_NAME_OFFSETS, shape=(cells.n + 1,), chunks=(chunk_rows,),
                                 dtype="int64", fill_value=0, compressors=layout.compressors())
    data = group.create_array(layout.OBS_NAME_BYTES, shape=(0,), chunks=(layout.CSR_CHUNK_ENTRIES,), dtype="uint8",
                              fill_value=0, compressors=layout.compressors())
    offset_rows, name_bytes = ChunkAppender(offsets), ChunkAppender(data, grow=True)
    offset_rows.append(np.zeros(1, dtype=np.int64))
    end = 0
    for names in cells.names(NAME_BLOCK_ROWS):
        encoded = [s.encode("utf-8") for s in names.tolist()]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        offset_rows.append(end + np.cumsum(lengths))
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        name_bytes.append(blob)
        end += blob.size
    offset_rows.flush()
    name_bytes.flush()
    attrs = {layout.ATTR_CELLS_FILE: os.path.abspath(cells.file), layout.ATTR_CELLS_X_KEY: cells.x_key,
             layout.ATTR_CELLS_LABELS_KEY: cells.labels_key}
    if cells.categories is not None:
        attrs[layout.ATTR_LABEL_CATEGORIES] = list(cells.categories)
    return attrs


def read_obs_names(group: Any, start: int, stop: int) -> np.ndarray | None:
    """Obs names of rows ``start:stop`` kept in the store ``group`` (a str array), None if it has none."""
    if layout.OBS_NAME_OFFSETS not in group:
        return None
    offsets = np.asarray(group[layout.OBS_NAME_OFFSETS][start:stop + 1])
    blob = bytes(np.asarray(group[layout.OBS_NAME_BYTES][int(offsets[0]):int(offsets[-1])]))
    rel = offsets - offsets[0]
    return np.array([blob[a:b].decode("utf-8") for a, b in zip(rel[:-1], rel[1:])], dtype=str)
