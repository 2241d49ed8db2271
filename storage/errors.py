"""Exception hierarchy of the storage layer (kept separate from :mod:`spectral`: the layers never import each other)."""

from __future__ import annotations

import contextlib
import errno
from typing import Any, Iterator


class StorageError(ValueError):
    """Base class of every deliberate error of :mod:`storage`."""


class IngestError(StorageError):
    """The source data cannot be ingested (NaN/inf, wrong shape or dtype, label mismatch, unreadable file)."""


class StoreFormatError(StorageError):
    """A store is missing, incomplete, of an unknown schema version, or uses a forbidden dtype/codec."""


class StorageWriteError(OSError):
    """A write into a store or to an output file failed (full disk, no permission, read-only filesystem).

    An :class:`OSError` (not a :class:`StorageError`: nothing the caller passed is wrong) built as
    ``StorageWriteError(errno, strerror, path)``; ``filename`` is what was being written. Its message is one line,
    ``cannot write <path>: <reason> (<errno name>)``; the filesystem's own error is its ``__cause__``.
    """

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno) if isinstance(self.errno, int) else None
        reason = self.strerror or "write failed"
        return f"cannot write {self.filename}: {reason}" + (f" ({code})" if code else "")


@contextlib.contextmanager
def writing(target: Any) -> Iterator[None]:
    """Re-raise an :class:`OSError` of the block as a :class:`StorageWriteError` naming ``target`` (the store
    node or file being written); one raised by an inner ``writing`` block, which names a more precise target,
    passes unchanged."""
    try:
        yield
    except StorageWriteError:
        raise
    except OSError as exc:
        raise StorageWriteError(exc.errno, exc.strerror or str(exc) or type(exc).__name__, str(target)) from exc


class DamagedManifestError(StoreFormatError):
    """A run manifest (``runs/<run>.json``) that exists but cannot be read: ``path`` is the file, ``reason`` a
    short phrase (``not valid JSON (Unterminated string..., line 40)``, ``empty file``, ...)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"manifest {path} is not a valid run manifest: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.reason)


class DamagedManifestWarning(UserWarning):
    """A run was skipped because its manifest cannot be read (see :class:`DamagedManifestError`)."""
