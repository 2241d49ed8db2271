"""Storage faults: a full disk and a read-only disk (small tmpfs mounts made by the test), and writes into a folder
of a store that cannot be written (read-only for a user; for root, whom permissions do not stop, a file opener
that fails with ENOSPC under that folder).

Each failure must end in one ``error:`` line naming the path, exit code 1, and no store marked complete that is
not. The tmpfs tests are skipped where the test cannot mount a tmpfs (not root, or no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eigenflow import storage

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
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
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
    from eigenflow.storage.embedding_io import write_embedding

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

    import eigenflow.storage.export
    from eigenflow.flows.cli import app

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


# ---- writes into a store folder that cannot be written: the error names what was being written -------------------
@pytest.fixture
def unwritable(monkeypatch):
    """``block(folder) -> reason``: make writes under ``folder`` fail. A user gets a read-only folder (chmod 0o500,
    restored afterwards: EACCES); root, whom permissions do not stop, a file opener that raises ENOSPC for files
    opened for writing under it (every writer of the store opens its files through ``io.open``)."""
    import builtins
    import io

    chmodded = []

    def block(folder: Path) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            folder.chmod(0o500)
            chmodded.append(folder)
            return "Permission denied (EACCES)"
        real_open, prefix = io.open, str(folder) + os.sep

        def failing_open(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(prefix) and set(mode) & set("wxa+"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(io, "open", failing_open)
        monkeypatch.setattr(builtins, "open", failing_open)
        return "No space left on device (ENOSPC)"

    yield block
    for folder in chmodded:
        folder.chmod(0o700)


def _write_faults():
    """``(id, folder to block, write, path named)`` for every kind of store write of a run."""
    import scipy.sparse as sp

    from eigenflow.storage.checksums import record_chunk
    from eigenflow.storage.embedding_io import write_embedding_block, write_output_block
    from eigenflow.storage.graph_io import write_knn_block
    from eigenflow.storage.models import create_model, write_model_rows
    from eigenflow.storage.reports import write_report_file

    return [
        ("embedding chunk", "embeddings/r", lambda s: write_embedding_block(s, "r", 0, np.ones((16, 2))),
         "embeddings/r"),
        ("output chunk", "outputs/r", lambda s: write_output_block(s, "r", "labels", 0, np.ones(16, np.int32)),
         "outputs/r/labels"),
        ("kNN chunk", "graph/knn", lambda s: write_knn_block(s, 0, np.ones((16, 3), int), np.ones((16, 3))),
         "graph/knn/indices"),
        ("weights", "graph", lambda s: storage.write_csr(s, "graph/weights", sp.eye(40, format="csr")),
         "graph/weights"),
        ("model", "models", lambda s: storage.write_model(s, "m", {"vectors": np.ones((40, 2))}), "models/m"),
        ("model rows", "models/r", lambda s: write_model_rows(s, "r", 0, {"vectors": np.ones((16, 2))}),
         "models/r/vectors"),
        ("manifest", "runs", lambda s: storage.write_manifest(s, storage.RunManifest.start("r", flow="embed")),
         "runs/r.json"),
        ("checksum record", "checksums", lambda s: record_chunk(s, "embeddings/r", 16),
         "checksums/embeddings__r/c_1_0.json"),
        ("report", "reports", lambda s: write_report_file(s, "r", "plot.png", b"png"), "reports/r/plot.png"),
    ]


def _run_store(path: Path) -> Path:
    """A 40-point store with the arrays of run ``r`` created (embedding, labels, kNN graph, model rows) and its
    embedding's second chunk written."""
    from eigenflow.storage.embedding_io import create_embedding, create_output, write_embedding_block
    from eigenflow.storage.graph_io import create_knn
    from eigenflow.storage.models import create_model

    storage.ingest(np.random.default_rng(0).normal(size=(40, 3)), path, chunk_rows=16)
    create_embedding(path, "r", 2)
    create_output(path, "r", "labels", dtype="int32")
    create_knn(path, 3)
    create_model(path, "r", {"vectors": ((40, 2), "float64")}, chunk_rows=16)
    write_embedding_block(path, "r", 16, np.ones((16, 2)))
    return path


@pytest.mark.parametrize("fault", _write_faults(), ids=lambda f: f[0])
def test_store_write_fault_names_what_was_being_written(tmp_path, unwritable, fault):
    _, folder, write, named = fault
    store = _run_store(tmp_path / "s.zarr")
    reason = unwritable(store / folder)
    with pytest.raises(OSError) as raised:
        write(store)
    assert isinstance(raised.value, storage.StorageWriteError), repr(raised.value)
    assert str(raised.value) == f"cannot write {store / named}: {reason}"
    assert isinstance(raised.value.__cause__, OSError) and raised.value.errno == raised.value.__cause__.errno
    assert not [p for p in (store / folder).rglob("*.tmp")]  # no temporary file left behind


def test_embed_into_an_unwritable_folder_fails_in_one_line_naming_it(tmp_path, unwritable, prefect_api,
                                                                       thread_cluster):
    """The embed CLI on a cluster whose workers run in this process (the blocked writes reach them)."""
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    np.save(tmp_path / "X.npy", np.random.default_rng(1).normal(size=(200, 4)))
    store = tmp_path / "s.zarr"
    storage.ingest(tmp_path / "X.npy", store, chunk_rows=64)
    reason = unwritable(store / "embeddings")
    result = CliRunner().invoke(app, ["embed", str(store), str(store), "-p", "knn_method=exact", "-p",
                                      "n_neighbors=5", "--scheduler", thread_cluster, "--run-name", "r1"])
    # in this process Prefect's own log of the failed task comes out too; the CLI's message is one line
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert result.exit_code == 1, result.output
    assert errors == [f"error: cannot write {store}/embeddings/r1: {reason}; run r1 recorded as failed; rerun with "
                      "--run-name r1 to resume"], result.output  # the disk, not the input: resumable
    manifest = storage.read_manifest(store, "r1")
    assert manifest.status == "failed" and f"{store}/embeddings/r1" in manifest.error
