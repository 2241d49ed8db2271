"""Summary of a store for ``eigenflow info``: root attributes, every array, every run with its status."""

from __future__ import annotations

import posixpath
from typing import Any

from . import layout
from .errors import DamagedManifestError
from .manifest import effective_status, list_runs, read_manifest
from .store import StoreRef, check_root, check_shapes, describe, filesystem, node_metadata, _read_json

_ROOT_KEYS = (layout.ATTR_SCHEMA_VERSION, layout.ATTR_STATUS, layout.ATTR_N, layout.ATTR_D, layout.ATTR_DTYPE,
              layout.ATTR_CHUNK_ROWS, layout.ATTR_HAS_LABELS, layout.ATTR_SOURCE, layout.ATTR_FINGERPRINT)


def info(store_url: StoreRef) -> dict[str, Any]:
    """JSON-able summary of a store (incomplete stores are described, not refused).

    Returns
    -------
    dict
        ``{"store", <root attrs: schema_version, status, n, d, dtype, chunk_rows, has_labels, source,
        fingerprint>, "arrays": [{"path", "shape", "dtype", "chunks"}], "groups": [{"path", "attrs"}],
        "runs": [{"run_id", "flow", "status", "error", "started", "ended", "seconds",
        "stages": [{"name", "status", "seconds", "error"}], and for an update "rows" and "drift"}], "partitions"}``
        (the number of a folder source's partitions, else None); a run whose manifest cannot be read has status
        ``damaged`` and the reason as its error.

    Raises
    ------
    StoreFormatError
        Not an eigenflow store, or a forbidden dtype / codec (same checks as ``open_store``).
    """
    fs, root = filesystem(store_url)
    attrs = check_root(_read_json(fs, posixpath.join(root, "zarr.json")), describe(store_url), allow_incomplete=True)
    nodes = node_metadata(fs, root)
    out: dict[str, Any] = {"store": describe(store_url)}
    out.update({key: attrs.get(key) for key in _ROOT_KEYS})
    out["arrays"], out["groups"] = [], []
    for path, meta in sorted(nodes.items()):
        if not path:
            continue
        if meta.get("node_type") == "array":
            chunks = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape")
            out["arrays"].append({"path": path, "shape": list(meta["shape"]), "dtype": meta["data_type"],
                                  "chunks": list(chunks) if chunks else None})
        else:
            out["groups"].append({"path": path, "attrs": meta.get("attributes") or {}})
    out["problems"] = check_shapes(attrs, nodes, describe(store_url))
    if out["problems"]:
        out[layout.ATTR_STATUS] = "damaged"
    out["runs"] = [_run_summary(store_url, run) for run in list_runs(store_url)]
    out["partitions"] = len(attrs.get(layout.ATTR_PARTITIONS) or []) or None
    return out


def _run_summary(store: StoreRef, run: str) -> dict[str, Any]:
    """One run of :func:`info`; a manifest that cannot be read is a run of status ``damaged`` whose error says
    why."""
    try:
        m = read_manifest(store, run)
    except DamagedManifestError as exc:
        return {"run_id": run, "flow": None, "status": "damaged", "error": exc.reason, "started": None,
                "ended": None, "seconds": None, "stages": []}
    return {"run_id": m.run_id, "flow": m.flow, "status": effective_status(m), "error": m.error, "started": m.started,
            "ended": m.ended, "seconds": m.seconds,
            "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds, "error": s.error}
                       for s in m.stages],
            **{key: m.results[key] for key in ("rows", "drift") if key in m.results}}
