"""Storage faults on real filesystems: a full disk and a read-only disk (small tmpfs mounts made by the test).

Each failure must end in one ``error:`` line naming the path, exit code 1, and no store marked complete that is
not. Skipped where the test cannot mount a tmpfs (not root, or no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import storage

SCRIPT = Path(sys.executable).with_name("eigenflow")


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    mounts = []

    def make(name: str, size: str) -> Path:
        path = tmp_path / name
        if not _mount_tmpfs(path, size):
            pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
        mounts.append(path)
        return path

    yield make
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def eigenflow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "flows.cli"]
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200", "PREFECT_LOGGING_LEVEL": "CRITICAL"})


def test_full_disk_ingest_fails_in_one_line_and_leaves_no_store(tmpfs, tmp_path):
    disk = tmpfs("small", "256k")
    np.save(tmp_path / "X.npy", np.random.default_rng(0).normal(size=(20000, 8)).astype(np.float32))  # 640 kB
    r = eigenflow("ingest", str(tmp_path / "X.npy"), str(disk / "s.zarr"), cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("error:") and "No space left on device" in line and str(disk) in line
    assert not (disk / "s.zarr").exists()
    assert not any(p.name.startswith("s.zarr") for p in disk.iterdir())  # no temporary store left either


def test_read_only_disk_embed_fails_in_one_line(tmpfs, tmp_path):
    disk = tmpfs("ro", "16m")
    storage.ingest(np.random.default_rng(0).normal(size=(300, 4)), disk / "s.zarr", chunk_rows=100)
    assert subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True).returncode == 0
    r = eigenflow("embed", str(disk / "s.zarr"), str(disk / "s.zarr"), "-p", "knn_method=exact", "--workers", "1",
                  cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Read-only file system" in lines[0] and str(disk) in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert storage.list_runs(disk / "s.zarr") == []
