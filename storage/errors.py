"""Exception hierarchy of the storage layer (kept separate from :mod:`spectral`: the layers never import each other)."""

from __future__ import annotations


class StorageError(ValueError):
    """Base class of every deliberate error of :mod:`storage`."""


class IngestError(StorageError):
    """The source data cannot be ingested (NaN/inf, wrong shape or dtype, label mismatch, unreadable file)."""


class StoreFormatError(StorageError):
    """A store is missing, incomplete, of an unknown schema version, or uses a forbidden dtype/codec."""
