"""eigenflow storage: every read and write of the project (zarr v3 stores, ingest readers, graph, model,
embedding and manifest I/O). Never imports :mod:`spectral`. The layout lives in :mod:`storage.layout`."""

from __future__ import annotations

from . import layout
from .arrays import X_as_dask, chunk_rows, has_labels, iter_row_chunks, read_labels, read_rows, read_X, row_chunks, x_shape
from .embedding_io import (
    create_embedding,
    create_output,
    create_point_array,
    read_embedding,
    read_output,
    write_embedding,
    write_embedding_block,
    write_output_block,
    write_point_array,
    write_point_block,
)
from .errors import IngestError, StorageError, StorageWriteError, StoreFormatError
from .graph_io import (
    create_knn,
    read_csr,
    read_constraints,
    read_csr_attrs,
    read_knn,
    read_knn_attrs,
    write_constraints,
    write_csr,
    write_knn,
    write_knn_block,
)
from .info import info
from .ingest import IngestInfo, ingest
from .manifest import RunManifest, StageRecord, list_runs, read_manifest, run_context, stage, write_manifest
from .models import list_models, read_model, write_model
from .store import Store, open_store, read_attrs, validate_store

__all__ = [
    "IngestError", "IngestInfo", "RunManifest", "StageRecord", "StorageError", "StorageWriteError",
    "Store", "StoreFormatError", "X_as_dask",
    "chunk_rows", "create_embedding", "create_knn", "create_output", "create_point_array", "has_labels", "info",
    "ingest", "iter_row_chunks", "layout", "list_models", "list_runs", "open_store", "read_X", "read_attrs",
    "read_constraints", "read_csr", "read_csr_attrs", "read_embedding", "read_knn", "read_knn_attrs", "read_labels", "read_manifest",
    "read_model", "read_output", "read_rows", "row_chunks", "run_context", "stage", "validate_store",
    "write_constraints", "write_csr", "write_embedding", "write_embedding_block", "write_knn", "write_knn_block", "write_manifest",
    "write_model", "write_output_block", "write_point_array", "write_point_block", "x_shape",
]
