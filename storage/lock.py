"""One writer per store: a lock file in the store, released on completion or failure, stale when its owner died.

``with store_lock(store, run): ...`` creates ``runs/.lock.json`` (exclusively on a local disk: ``O_CREAT |
O_EXCL``) holding the owner: run id, host, pid and the pid's start time. A second run on the same store
fails at once with :class:`StoreLockedError` naming the first, before any of its stages. The lock is removed
when the block ends, by success or exception. A process killed hard (SIGKILL) leaves its lock behind; such a
lock is *stale* and is taken over:

- owner on this host: stale when no process with that pid and start time exists (pid reuse is detected);
- owner on another host: stale :data:`STALE_LOCK_SECONDS` after it was taken (it cannot be probed from here).

A run may take the lock of a store that does not exist yet, before its ingest: the store's path then holds nothing
but the lock (:func:`claimed_here`), which the ingest treats as a new store and carries into the store it writes
(:func:`carry_lock`); a claim released without an ingest leaves nothing behind.

The same liveness rule tells whether a ``running`` manifest belongs to a live process (:func:`owner_alive`),
so ``info`` shows a killed run as ``crashed``. On object stores the create is not exclusive (no
compare-and-swap through fsspec): there the lock detects a concurrent run but two runs started within the
same second may both pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from . import layout
from .errors import StorageError, writing
from .signals import signals_held
from .local_files import file_location, is_local
from .store import StoreRef, filesystem

#: The lock file, next to the run manifests.
LOCK_KEY = f"{layout.RUNS}/.lock.json"
#: Age after which a lock taken on another host is considered stale (its process cannot be probed from here).
STALE_LOCK_SECONDS = 6 * 3600


class StoreLockedError(StorageError):
    """Another live run holds the store."""


def process_identity() -> dict[str, Any]:
    """``{"host", "pid", "process_start"}`` of this process (start time from psutil: detects pid reuse)."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(),
            "process_start": round(psutil.Process().create_time(), 3)}


def owner_alive(owner: dict[str, Any], *, taken: float | None = None) -> bool:
    """Whether the process described by ``owner`` (see :func:`process_identity`) is still running.

    On another host this cannot be probed: alive while ``taken`` (epoch seconds) is less than
    :data:`STALE_LOCK_SECONDS` ago (or always, when ``taken`` is unknown).
    """
    import psutil

    if owner.get("host") != socket.gethostname():
        return taken is None or time.time() - taken < STALE_LOCK_SECONDS
    pid = owner.get("pid")
    if not isinstance(pid, int) or not psutil.pid_exists(pid):
        return False
    try:
        started = round(psutil.Process(pid).create_time(), 3)
    except psutil.Error:
        return False
    return owner.get("process_start") is None or abs(started - owner["process_start"]) < 0.01


def read_lock(store: StoreRef) -> dict[str, Any] | None:
    """The current lock's owner record, or None."""
    fs, root = filesystem(store)
    path = posixpath.join(root, LOCK_KEY)
    try:
        return json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {"run": "?", "unreadable": True, "taken": 0}


def check_unlocked(store: StoreRef, run: str | None = None) -> None:
    """Raise :class:`StoreLockedError` now if a live run holds ``store`` (a pre-check before any work; the
    lock itself is taken later, by :func:`store_lock`), other than ``run`` of this process (:func:`held_here`)."""
    holder = read_lock(store)
    if holder and not holder.get("unreadable") and owner_alive(holder, taken=holder.get("taken")) \
            and not held_here(holder, run):
        raise StoreLockedError(_locked_message(store, holder))


def held_here(holder: dict[str, Any] | None, run: str | None) -> bool:
    """Whether the lock record ``holder`` is this process's, for ``run``."""
    return bool(holder) and run is not None and holder.get("run") == run and _this_process(holder)


def _this_process(holder: dict[str, Any]) -> bool:
    return all(holder.get(key) == value for key, value in process_identity().items())


def claimed_here(fs: Any, root: str) -> bool:
    """Whether the store at ``root`` of ``fs`` holds nothing but a lock this process took: a new store claimed
    before its ingest."""
    path = posixpath.join(root, LOCK_KEY)
    if [posixpath.normpath(f) for f in fs.find(root)] != [posixpath.normpath(path)]:
        return False
    try:
        return _this_process(json.loads(fs.cat_file(path)))
    except (OSError, ValueError):
        return False


def carry_lock(fs: Any, root: str, new_root: str) -> None:
    """Copy the lock of the store at ``root`` into the store being written at ``new_root`` when this process holds
    it, so that the store that replaces ``root`` is locked from its first moment."""
    path = posixpath.join(root, LOCK_KEY)
    try:
        payload = fs.cat_file(path)
    except FileNotFoundError:
        return
    with contextlib.suppress(ValueError):
        if _this_process(json.loads(payload)):
            target = posixpath.join(new_root, LOCK_KEY)
            fs.makedirs(posixpath.dirname(target), exist_ok=True)
            fs.pipe_file(target, payload)


def _locked_message(store: StoreRef, holder: dict) -> str:
    return (f"store {store} is in use by run {holder.get('run')!r} (pid {holder.get('pid')} on {holder.get('host')}, "
            f"since {holder.get('taken_utc')}); wait for it to finish or use another store")


@contextlib.contextmanager
def store_lock(store: StoreRef, run: str) -> Iterator[dict[str, Any]]:
    """Hold the store's lock for ``run`` during the block (see the module docstring). Nested in a block of this
    process that holds it for the same run (the CLI's, around its flow), it yields that block's record and leaves
    the release to it."""
    held = read_lock(store)
    if held_here(held, run):
        yield held
        return
    record = {"run": run, **process_identity(), "taken": time.time(),
              "taken_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    fs, root = filesystem(store)
    path = posixpath.join(root, LOCK_KEY)
    claim = not fs.exists(root)  # a new store: its path holds only the lock until the ingest writes it
    runs = posixpath.dirname(path)
    made_runs = claim or not fs.exists(runs)
    _acquire(fs, path, record, store)
    try:
        yield record
    finally:
        with signals_held():  # a second Ctrl-C cannot keep the lock
            with contextlib.suppress(FileNotFoundError):
                current = json.loads(fs.cat_file(path))
                if current.get("run") == run and current.get("pid") == record["pid"]:
                    fs.rm_file(path)
            for made, folder in ((made_runs, runs), (claim, root)):  # folders the lock made, left empty: removed
                if made and fs.exists(folder) and not fs.find(folder):
                    fs.rm(folder, recursive=True)


def _acquire(fs: Any, path: str, record: dict, store: StoreRef) -> None:
    payload = json.dumps(record).encode()
    for _ in range(2):  # second pass after removing a stale lock
        with writing(file_location(fs, path)):
            created = _create_exclusive(fs, path, payload)
        if created:
            return
        holder = read_lock(store) or {}
        if owner_alive(holder, taken=holder.get("taken")) and not holder.get("unreadable"):
            raise StoreLockedError(_locked_message(store, holder))
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)  # stale: its owner died
    raise StoreLockedError(f"store {store}: could not take the lock {path} (another run took it first)")


def _create_exclusive(fs: Any, path: str, payload: bytes) -> bool:
    if is_local(fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        return True
    if fs.exists(path):
        return False
    fs.pipe_file(path, payload)
    return True
