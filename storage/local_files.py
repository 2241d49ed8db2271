"""The local filesystem: recognizing it, naming its files in messages, and replacing a file atomically.

Stores on a local disk use what object stores lack (atomic renames, exclusive creation, direct reads); every module
of the storage layer asks :func:`is_local` the same way.
"""

from __future__ import annotations

import os
import secrets
from typing import Any


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is the local filesystem: where atomic renames, exclusive creation and direct file reads are
    used instead of the object-store calls."""
    return getattr(fs, "protocol", None) in ("file", ("file", "local")) or fs.__class__.__name__ == "LocalFileSystem"


def file_location(fs: Any, path: str) -> str:
    """``path`` on ``fs`` for messages: as it is on a local disk, with its protocol elsewhere."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def replace_local_file(path: str, payload: bytes) -> None:
    """Write ``payload`` to a temporary file beside ``path``, synced, then renamed over it; a failed write
    removes the temporary file and leaves ``path`` as it was (stop signals are held meanwhile:
    :func:`storage.signals.signals_held`)."""
    from .signals import signals_held

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{secrets.token_hex(4)}.tmp"
    with signals_held():  # a Ctrl-C cannot leave the temporary file behind
        try:
            with open(tmp, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
