"""JSON-able attributes: numpy scalars become Python numbers, tuples become lists, anything else is refused."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .errors import StorageError


def to_jsonable(value: Any, where: str = "attrs") -> Any:
    """Return ``value`` as plain JSON types; raise :class:`StorageError` naming the offending key.

    Accepted: None, bool, int, finite float, str, numpy scalars of those kinds, and (nested) lists, tuples
    and dicts with string keys. NaN / inf floats are refused (JSON has no representation for them).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StorageError(f"{where} must be a finite number to be stored as JSON; got {value!r}")
        return float(value)
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise StorageError(f"keys of {where} must be strings; got {key!r}")
            out[key] = to_jsonable(v, f"{where}[{key!r}]")
        return out
    raise StorageError(
        f"{where} must be JSON-able (None, bool, int, float, str, list, dict); got {type(value).__name__}: "
        "store arrays as arrays, never pickle"
    )


def check_attrs(attrs: Any, where: str = "attrs") -> dict:
    """Validate a dict of attributes (see :func:`to_jsonable`); returns a JSON-able copy."""
    if not isinstance(attrs, dict):
        raise StorageError(f"{where} must be a dict; got {type(attrs).__name__}")
    out = to_jsonable(attrs, where)
    json.dumps(out, allow_nan=False)
    return out
