"""What a run wrote into a store besides its manifest, dropped as a whole when the run is started again.

``models/<run>``, ``embeddings/<run>``, ``outputs/<run>/...`` with their checksum records, and ``reports/<run>/``.
A run started again under its old name from nothing (``embed(..., overwrite_run=True)``, e.g. over a manifest that
cannot be read) drops them first: its write-back keeps every chunk that has an intact checksum record, which must
never be a chunk of the run it replaces.
"""

from __future__ import annotations

import posixpath

import zarr

from . import layout
from .checksums import forget_records
from .errors import writing
from .reports import REPORTS
from .store import StoreRef, as_group, delete_node, describe, filesystem, has_node


def run_node_paths(run: str) -> tuple[str, ...]:
    """The zarr nodes a run writes: its model group, its embedding and its group of other per-point outputs."""
    return layout.model_path(run), layout.embedding_path(run), f"{layout.OUTPUTS}/{layout.check_name('run', run)}"


def _arrays_under(group: zarr.Group, path: str) -> list[str]:
    """Paths of the arrays at or below ``path`` in ``group``."""
    node = group[path]
    if isinstance(node, zarr.Array):
        return [path]
    return [f"{path}/{name}" for name, member in node.members(max_depth=None) if isinstance(member, zarr.Array)]


def drop_run_outputs(store: StoreRef, run: str) -> list[str]:
    """Remove what ``run`` wrote into ``store`` (its manifest excepted); returns the removed node paths.

    Checksum records go first: a drop that is interrupted leaves arrays without records (rewritten by the next
    attempt), never records of arrays that are gone.
    """
    group = as_group(store, "r+")
    dropped = []
    for path in run_node_paths(run):
        if not has_node(group, path):
            continue
        with writing(f"{describe(store)}/{path}"):
            for array in _arrays_under(group, path):
                forget_records(group, array)
            delete_node(group, path)
        dropped.append(path)
    fs, root = filesystem(store)
    reports = posixpath.join(root, REPORTS, layout.check_name("run", run))
    if fs.exists(reports):
        with writing(reports):
            fs.rm(reports, recursive=True)
        dropped.append(f"{REPORTS}/{run}")
    return dropped
