"""Storage faults on real filesystems: a full disk and a read-only disk (small tmpfs mounts made by the test).

Each failure must end in one ``error:`` line naming the path, exit code 1, and no store marked complete that is
not. Skipped where the test cannot mount a tmpfs (not root, or no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import errno
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
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
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


# ---- export onto a full disk: buffered writes, one line, nothing left behind ------------------------------------
def _store_with_embedding(path: Path, n: int = 20000, c: int = 8) -> Path:
    """A store with one completed run whose (n, c) float32 embedding is 640 kB at the defaults."""
    from storage.embedding_io import write_embedding

    rng = np.random.default_rng(0)
    storage.ingest(rng.normal(size=(n, 2)), path, chunk_rows=4096)
    manifest = storage.RunManifest.start("r1", flow="embed", parameters={}, seed=None)
    with storage.run_context(path, manifest):
        write_embedding(path, "r1", rng.normal(size=(n, c)))
    return path


@pytest.mark.parametrize("name", ["out.npy", "out.parquet"])
def test_full_disk_export_fails_in_one_line_and_leaves_no_file(tmpfs, tmp_path, name):
    disk = tmpfs("small", "256k")
    store = _store_with_embedding(tmp_path / "s.zarr")
    r = eigenflow("export", str(store), str(disk / name), cwd=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)  # not 135 (SIGBUS of a memory-mapped write)
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line == f"error: cannot write {disk / name}: No space left on device (ENOSPC)"
    assert list(disk.iterdir()) == []  # neither the file nor its hidden temporary


class FullDiskFile:
    """A real file whose writes raise ENOSPC once ``room`` bytes have been written (a disk filling up)."""

    def __init__(self, path: Path, room: int) -> None:
        self._fh = open(path, "xb")
        self._room = room

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._fh.write(data)

    def __getattr__(self, name: str):
        return getattr(self._fh, name)

    def __enter__(self) -> "FullDiskFile":
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


@pytest.mark.parametrize("name", ["out.npy", "out.parquet"])
def test_failing_export_write_names_the_file_and_removes_its_temporary(tmp_path, monkeypatch, name):
    from typer.testing import CliRunner

    import storage.export
    from flows.cli import app

    store = _store_with_embedding(tmp_path / "s.zarr", n=3000, c=4)
    out = tmp_path / "out"
    out.mkdir()
    opened = []

    def open_full(tmp: Path) -> FullDiskFile:
        opened.append(tmp)
        return FullDiskFile(tmp, room=4096)

    monkeypatch.setattr(storage.export, "_open_output", open_full)
    result = CliRunner().invoke(app, ["export", str(store), str(out / name)])
    assert result.exit_code == 1 and opened and opened[0].parent == out, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [f"error: cannot write {out / name}: No space left on device (ENOSPC)"]
    assert list(out.iterdir()) == []
    with pytest.raises(storage.StorageWriteError) as info:  # the library call: an OSError with the errno kept
        storage.export.export_output(store, out / name)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(out / name)
    assert isinstance(info.value.__cause__, OSError) and list(out.iterdir()) == []
