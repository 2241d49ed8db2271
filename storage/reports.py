"""Report files of a run inside the store (``reports/<run>/<name>``: e.g. the embedding plot), written atomically."""

from __future__ import annotations

import posixpath

from . import layout
from .errors import writing
from .local_files import file_location, is_local, replace_local_file
from .store import StoreRef, filesystem, is_url

#: Folder of the report files (not a zarr node: the store's validation does not descend into it).
REPORTS = "reports"


def write_report_file(store: StoreRef, run: str, name: str, payload: bytes) -> str:
    """Write ``payload`` to ``reports/<run>/<name>``; returns its URL (``file://`` on a local disk)."""
    layout.check_name("run", run)
    layout.check_name("report name", name)
    fs, root = filesystem(store)
    path = posixpath.join(root, REPORTS, run, name)
    if is_local(fs):
        with writing(path):
            replace_local_file(path, payload)
        return f"file://{path}"
    with writing(file_location(fs, path)):
        fs.pipe_file(path, payload)  # one PUT: atomic on object stores
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return f"{protocol}://{path}" if not is_url(path) else path

