"""Resume that is real: the CLI's whole process tree killed with SIGKILL, then started again with the same run name.

The flow process and its Dask workers run in their own process group, killed at once (``os.killpg``) while the
kNN stage runs, or while the per-chunk write-back runs. The runs report to the session's Prefect server
(``PREFECT_API_URL``), as scheduled runs do, which spares each of them the start of Prefect's temporary server (7-9 s
here; the CLI's runs on that default are tested in test_cli and test_storage_faults). The second start must
recompute only what had not finished (stages from the manifest in the store; chunks from their per-chunk
checksum records) and give the same bits as an uninterrupted run with the same seed, also when Prefect's home
(its result cache) was wiped in between.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.embedding_io import read_embedding
from eigenflow.storage.manifest import read_manifest

SCRIPT = Path(sys.executable).with_name("eigenflow")
RUN = "resume-run"
N_POINTS, CHUNK_ROWS = 20000, 256


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    X, _, _ = make_swiss_roll_lifted(N_POINTS, random_state=11)
    np.save(d / "X.npy", X)
    return d


def _command(store: Path) -> list[str]:
    base = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    return [*base, "embed", "X.npy", str(store), "-p", "knn_method=exact", "-p", "n_neighbors=10", "--holdout", "0.3",
            "--chunk-rows", str(CHUNK_ROWS), "--workers", "1", "--run-name", RUN, "--seed", "3"]


def _env(prefect_home: Path, api_url: str | None) -> dict:
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "PREFECT_LOGGING_LEVEL": "CRITICAL", "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    return {**env, "PREFECT_API_URL": api_url} if api_url else env


def _run(store: Path, cwd: Path, prefect_home: Path, api_url: str | None = None) -> subprocess.CompletedProcess:
    """Run the CLI to completion: on Prefect's temporary server, or reporting to ``api_url``."""
    prefect_home.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(_command(store), cwd=cwd, env=_env(prefect_home, api_url), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    return r


def _start_and_kill_when(store: Path, cwd: Path, prefect_home: Path, api_url: str, ready) -> None:
    """Start the CLI in a new process group and SIGKILL the whole group as soon as ``ready()`` is true."""
    prefect_home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(_command(store), cwd=cwd, env=_env(prefect_home, api_url), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 600
    try:
        while not ready():
            assert proc.poll() is None, f"the run ended before the kill point: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline, "kill point not reached"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def _stage_running(store: Path, name: str):
    def ready() -> bool:
        try:
            manifest = json.loads((store / "runs" / f"{RUN}.json").read_text())
        except (FileNotFoundError, ValueError):
            return False
        return any(s["name"] == name and s["status"] == "running" for s in manifest["stages"])
    return ready


def _some_chunks_written(store: Path, total: int):
    folder = store / "checksums" / f"embeddings__{RUN}"

    def ready() -> bool:
        return folder.exists() and 1 <= len(list(folder.iterdir())) < total
    return ready


@pytest.fixture(scope="module")
def reference(work, prefect_server):
    """The uninterrupted run."""
    store = work / "reference.zarr"
    _run(store, work, work / "prefect-ref", prefect_server[0])
    return read_embedding(store, RUN)


def _stages(store: Path) -> dict:
    return {s.name: s.info for s in read_manifest(store, RUN).stages}


@pytest.mark.slow
def test_killed_during_write_back_resumes_only_missing_chunks_even_without_prefect_cache(work, reference,
                                                                                        prefect_server):
    api_url, _ = prefect_server
    store, home = work / "killed-write.zarr", work / "prefect-write"
    n_chunks = -(-N_POINTS // CHUNK_ROWS)
    _start_and_kill_when(store, work, home, api_url, _some_chunks_written(store, n_chunks))
    assert read_manifest(store, RUN).status == "running"  # as the kill left it (info shows it crashed)
    written = len(list((store / "checksums" / f"embeddings__{RUN}").iterdir()))
    shutil.rmtree(home)  # no Prefect result cache any more: the store alone tells what is done
    _run(store, work, home, api_url)
    stages = _stages(store)
    assert all(stages[name].get("reused") for name in ("knn", "weights", "eigensolve"))
    assert written <= stages["embed-points"]["n_chunks_reused"] < n_chunks
    np.testing.assert_array_equal(read_embedding(store, RUN), reference)


@pytest.mark.slow
def test_killed_during_knn_resumes_and_equals_the_uninterrupted_run(work, reference, prefect_server):
    api_url, _ = prefect_server
    store, home = work / "killed-knn.zarr", work / "prefect-knn"
    _start_and_kill_when(store, work, home, api_url, _stage_running(store, "knn"))
    _run(store, work, home, api_url)
    stages = _stages(store)
    assert not any(info.get("reused") for info in stages.values())  # nothing had finished: all ran again
    assert stages["embed-points"]["n_chunks_reused"] == 0
    np.testing.assert_array_equal(read_embedding(store, RUN), reference)
