"""The zarr v3 store layout of eigenflow: the single source of truth for names, chunking and the schema version.

Layout::

    <name>.zarr/
      zarr.json            root attrs: schema_version, n, d, dtype, source, fingerprint, chunk_rows,
                           has_labels, status ("incomplete" while an ingest runs, "complete" written LAST);
                           partitions (a folder source's records), appending (while an update appends rows)
      X                    (n, d) float32 (float64 on request), row chunks of ``chunk_rows`` rows, C order
      y                    (n,) int32, -1 = unlabeled (optional), same row chunks as X
      constraints/         must_link (p, 2) int64, cannot_link (q, 2) int64 (optional, STG18)
      graph/knn/           indices (n, k) int64, distances (n, k) float32, row chunks aligned with X;
                           attrs k, n_index (rows the indices point into), metric, method, recall, ...
      graph/weights/       CSR group: indptr int64, indices int32 (int64 if n_cols >= 2**31), data float32|float64
      models/<run>/        arrays of ``to_state()`` + JSON attrs (never pickle)
      embeddings/<run>     (n, n_components) float32, row chunks aligned with X
      outputs/<run>/<name> other per-point outputs (predicted labels, scores), row chunks aligned with X
      obs/                 the cells' names of an AnnData source (:mod:`storage.anndata_io`): name_offsets
                           (n + 1,) int64 into name_bytes (total,) uint8, UTF-8 (no string dtype in a store)
      runs/<run>.json      run manifest (JSON file, not a zarr node)

Every other module of :mod:`storage` takes its names from here.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

from .errors import StorageError

#: Version of this layout; :func:`storage.store.open_store` refuses any other value.
SCHEMA_VERSION = 1
#: Versions this code can read.
SUPPORTED_SCHEMA_VERSIONS = (1,)

#: Default row chunk: 2**16 rows, a power of two so that chunk boundaries of X, embeddings and per-point
#: outputs coincide; capped by :data:`MAX_CHUNK_BYTES` for wide data (see :func:`default_chunk_rows`).
DEFAULT_CHUNK_ROWS = 2**16
#: Upper bound for one X chunk in memory (64 MiB): a worker holds a few chunks at a time.
MAX_CHUNK_BYTES = 64 * 2**20
#: Smallest default chunk (so that very wide data still gets reasonably sized chunks).
MIN_DEFAULT_CHUNK_ROWS = 2**10
#: Entries per chunk of the 1-D CSR arrays (indices, data): 2**20 entries = 4-8 MiB.
CSR_CHUNK_ENTRIES = 2**20


def compressors() -> list:
    """Compressor of every array the store writes: Blosc LZ4 with byte shuffle (a fresh codec list per array).

    LZ4 compresses and decompresses several times faster than zarr's default zstd, and with the byte shuffle
    the kNN graph and the weights compress at least as well, so writes and reads stay far cheaper than the stages
    around them (``benchmarks/results/embed_1e6.md`` compares the codecs). Stores written with other codecs
    stay readable (zarr reads the codecs from each array's metadata).
    """
    from zarr.codecs import BloscCodec

    return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]

# ---- names -----------------------------------------------------------------------------------------
X = "X"
Y = "y"
CONSTRAINTS = "constraints"
MUST_LINK = "constraints/must_link"
CANNOT_LINK = "constraints/cannot_link"
GRAPH = "graph"
KNN = "graph/knn"
KNN_INDICES = "graph/knn/indices"
KNN_DISTANCES = "graph/knn/distances"
WEIGHTS = "graph/weights"
MODELS = "models"
EMBEDDINGS = "embeddings"
OUTPUTS = "outputs"
RUNS = "runs"
OBS = "obs"
OBS_NAME_OFFSETS = "obs/name_offsets"
OBS_NAME_BYTES = "obs/name_bytes"
CSR_INDPTR = "indptr"
CSR_INDICES = "indices"
CSR_DATA = "data"

# ---- root attributes -------------------------------------------------------------------------------
ATTR_SCHEMA_VERSION = "schema_version"
ATTR_STATUS = "status"
ATTR_N = "n"
ATTR_D = "d"
ATTR_DTYPE = "dtype"
ATTR_SOURCE = "source"
ATTR_FINGERPRINT = "fingerprint"
ATTR_CHUNK_ROWS = "chunk_rows"
ATTR_HAS_LABELS = "has_labels"
#: Root attribute of a store ingested from a folder of partitions: one record per partition
#: (:mod:`storage.partitions`).
ATTR_PARTITIONS = "partitions"
#: Root attribute present while an update appends rows (:mod:`storage.append`): ``{"n", "n_new"}``.
ATTR_APPENDING = "appending"
#: Root attributes of a store ingested from AnnData: the source file, the representation X was read from, the
#: ``obs`` column of the labels and the category names (label code ``i`` is ``label_categories[i]``).
ATTR_CELLS_FILE = "cells_file"
ATTR_CELLS_X_KEY = "cells_x_key"
ATTR_CELLS_LABELS_KEY = "cells_labels_key"
ATTR_LABEL_CATEGORIES = "label_categories"
#: Attribute of a run's ``labels`` output: ``"clusters"`` when its codes are cluster ids (a clustering method),
#: not codes of the store's label categories (a classifier's predictions).
ATTR_LABELS_ARE = "labels_are"
STATUS_INCOMPLETE = "incomplete"
STATUS_COMPLETE = "complete"
#: Attribute marking a model group whose arrays are all written (set last by ``write_model``).
ATTR_MODEL_COMPLETE = "eigenflow_model_complete"
#: CSR group attributes (the anndata convention, so that anndata reads the group as a sparse matrix).
ATTR_ENCODING = "encoding-type"
ATTR_ENCODING_VERSION = "encoding-version"
ATTR_SHAPE = "shape"
CSR_ENCODING = "csr_matrix"
CSR_ENCODING_VERSION = "0.1.0"

#: Stored dtypes allowed for X.
X_DTYPES = ("float32", "float64")
DEFAULT_X_DTYPE = "float32"
Y_DTYPE = "int32"
KNN_INDICES_DTYPE = "int64"
KNN_DISTANCES_DTYPE = "float32"
EMBEDDING_DTYPE = "float32"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(kind: str, name: object) -> str:
    """Return ``name`` if it is a safe single path component (run id, array name), else raise.

    Allowed: 1-128 characters from ``[A-Za-z0-9._-]``, starting with a letter or digit (no ``/``, no ``..``).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise StorageError(
            f"{kind} must be 1-128 characters from [A-Za-z0-9._-] starting with a letter or digit; got {name!r}"
        )
    return name


def check_path(kind: str, path: object) -> str:
    """Return a ``/``-separated group path whose every component passes :func:`check_name`."""
    if not isinstance(path, str) or not path:
        raise StorageError(f"{kind} must be a non-empty '/'-separated path; got {path!r}")
    for part in path.split("/"):
        check_name(kind, part)
    return path


def model_path(run: str) -> str:
    """Group path of the model of ``run``: ``models/<run>``."""
    return f"{MODELS}/{check_name('run', run)}"


def embedding_path(run: str) -> str:
    """Array path of the embedding of ``run``: ``embeddings/<run>``."""
    return f"{EMBEDDINGS}/{check_name('run', run)}"


def output_path(run: str, name: str) -> str:
    """Array path of a per-point output ``name`` of ``run``: ``outputs/<run>/<name>``."""
    return f"{OUTPUTS}/{check_name('run', run)}/{check_name('output name', name)}"


def manifest_key(run: str) -> str:
    """Key (relative to the store root) of the manifest of ``run``: ``runs/<run>.json``."""
    return f"{RUNS}/{check_name('run', run)}.json"


def new_run_id(prefix: str = "run") -> str:
    """A fresh run id ``<prefix>-<UTC timestamp>-<6 hex>``, e.g. ``embed-20261129T190102Z-3fa9c1``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return check_name("run", f"{check_name('prefix', prefix)}-{stamp}-{secrets.token_hex(3)}")


def default_chunk_rows(n_columns: int, itemsize: int = 4) -> int:
    """Default rows per chunk for ``n_columns`` columns of ``itemsize`` bytes.

    :data:`DEFAULT_CHUNK_ROWS` (2**16) unless one chunk would exceed :data:`MAX_CHUNK_BYTES`; then the
    largest power of two that fits, at least :data:`MIN_DEFAULT_CHUNK_ROWS`.
    """
    row_bytes = max(1, int(n_columns)) * int(itemsize)
    rows = DEFAULT_CHUNK_ROWS
    while rows > MIN_DEFAULT_CHUNK_ROWS and rows * row_bytes > MAX_CHUNK_BYTES:
        rows //= 2
    return rows


def check_chunk_rows(chunk_rows: object) -> int:
    """Validate a user-given ``chunk_rows`` (an integer >= 1)."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise StorageError(f"chunk_rows must be an integer >= 1; got {chunk_rows!r}")
    return chunk_rows


def row_chunk_bounds(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the row chunks of an ``n``-row array chunked by ``chunk_rows``."""
    return [(s, min(s + chunk_rows, n)) for s in range(0, n, chunk_rows)]
