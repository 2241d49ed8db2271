"""The store lock and crashed runs, with real processes: a holder that is alive, one killed with SIGKILL.

A child Python process takes the lock of a store (or starts a run manifest) and waits; the test checks that a
second taker fails naming the first, then kills the child with SIGKILL and checks that the stale lock is taken
over and that ``info`` shows the killed run as ``crashed``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from eigenflow import storage
from eigenflow.storage.lock import StoreLockedError, read_lock, store_lock

HOLD_LOCK = """
import sys, time
from eigenflow.storage.lock import store_lock
with store_lock(sys.argv[1], "holder-run"):
    print("locked", flush=True)
    time.sleep(120)
"""
START_RUN = """
import sys, time
from eigenflow import storage
m = storage.RunManifest.start("killed-run", flow="embed", parameters={}, seed=0)
with storage.run_context(sys.argv[1], m):
    print("running", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def store(tmp_path):
    storage.ingest(np.random.default_rng(0).normal(size=(40, 3)), tmp_path / "s.zarr", chunk_rows=16)
    return str(tmp_path / "s.zarr")


def _child(code: str, store: str, ready: str) -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-c", code, store], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": root})
    assert proc.stdout.readline().strip() == ready
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_second_run_fails_fast_naming_the_first_then_takes_a_stale_lock(store):
    proc = _child(HOLD_LOCK, store, "locked")
    try:
        with pytest.raises(StoreLockedError, match=rf"in use by run 'holder-run' \(pid {proc.pid} on "):
            with store_lock(store, "second-run"):
                pass
    finally:
        _kill(proc)
    assert read_lock(store)["run"] == "holder-run"  # SIGKILL left it behind
    with store_lock(store, "second-run") as record:  # stale: its owner is dead
        assert read_lock(store)["run"] == "second-run" and record["pid"] == os.getpid()
    assert read_lock(store) is None  # released at the end


def test_lock_released_on_failure(store):
    with pytest.raises(RuntimeError, match="boom"):
        with store_lock(store, "failing-run"):
            raise RuntimeError("boom")
    assert read_lock(store) is None


def test_the_lock_of_a_run_nests_in_this_process_only_for_that_run(store):
    """The CLI holds the lock of its run around the flow, whose own lock of the same run nests in it (and leaves
    the release to the outer block); another run of the same process is refused, and so is the same run name
    held by another process."""
    from eigenflow.storage.lock import check_unlocked

    with store_lock(store, "cli-run") as outer:
        check_unlocked(store, "cli-run")
        with store_lock(store, "cli-run") as inner:
            assert inner == outer
        assert read_lock(store) == outer  # still held after the nested block
        with pytest.raises(StoreLockedError, match="in use by run 'cli-run'"):
            check_unlocked(store)
        with pytest.raises(StoreLockedError, match="in use by run 'cli-run'"):
            with store_lock(store, "other-run"):
                pass
    assert read_lock(store) is None
    proc = _child(HOLD_LOCK, store, "locked")
    try:
        with pytest.raises(StoreLockedError, match="in use by run 'holder-run'"):
            with store_lock(store, "holder-run"):
                pass
    finally:
        _kill(proc)


def test_killed_run_shows_as_crashed_not_running(store):
    proc = _child(START_RUN, store, "running")
    try:
        [run] = storage.info(store)["runs"]
        assert (run["run_id"], run["status"]) == ("killed-run", "running")
    finally:
        _kill(proc)
    time.sleep(0.1)
    [run] = storage.info(store)["runs"]
    assert (run["run_id"], run["status"]) == ("killed-run", "crashed")
    assert storage.read_manifest(store, "killed-run").status == "running"  # the file is unchanged: a view


def test_a_new_store_is_claimed_by_its_lock_before_the_ingest(tmp_path):
    """A run locks a store that does not exist yet: its path holds only the lock (a child process is refused,
    naming the run), the ingest writes the store into it with the lock carried over, and the release leaves the
    store without a lock; a claim released before any ingest leaves no folder behind."""
    from eigenflow.storage.lock import check_unlocked, claimed_here
    from eigenflow.storage.store import filesystem

    X = np.random.default_rng(0).normal(size=(30, 3))
    new = tmp_path / "new.zarr"
    with store_lock(new, "claiming-run"):
        assert claimed_here(*filesystem(new))
        refused = subprocess.run([sys.executable, "-c", "import sys; from eigenflow.storage.lock import check_unlocked;"
                                  " check_unlocked(sys.argv[1])", str(new)], capture_output=True, text=True)
        assert refused.returncode == 1 and "in use by run 'claiming-run'" in refused.stderr
        storage.ingest(X, new)
        assert read_lock(new)["run"] == "claiming-run" and not claimed_here(*filesystem(new))
        np.testing.assert_array_equal(storage.read_X(new), X.astype(np.float32))
    assert read_lock(new) is None
    check_unlocked(new)
    with store_lock(tmp_path / "never.zarr", "failed-run"):
        pass
    assert not (tmp_path / "never.zarr").exists()
    folder = tmp_path / "user-folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with store_lock(folder, "refused-run"), pytest.raises(storage.StoreFormatError, match="non-empty directory"):
        storage.ingest(X, folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # nothing of the lock left in it
