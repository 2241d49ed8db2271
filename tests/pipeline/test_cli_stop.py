"""How a CLI ``embed`` run stops: real ``eigenflow`` processes in their own process group, real signals, a real
Prefect server killed under a run, and bad inputs refused before any store exists."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tests.helpers import prefect_server_process

SCRIPT = Path(sys.executable).with_name("eigenflow")
RUN = "r1"
#: Seconds within which a stopped run must have exited.
EXIT_BOUND = 20.0


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> Path:
    """A folder with ``X.npy``: 40,000 x 32 points, whose NN-descent kNN stage lasts a few seconds."""
    d = tmp_path_factory.mktemp("stop")
    np.save(d / "X.npy", np.random.default_rng(0).standard_normal((40_000, 32)).astype(np.float32))
    return d


def start_embed(cwd: Path, store: str, env: dict | None = None) -> subprocess.Popen:
    """``eigenflow embed X.npy STORE --run-name r1`` (NN-descent kNN) in a new session; output to files in ``cwd``."""
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    env = {**cli_environ(), **(env or {})}
    return subprocess.Popen([*command, "embed", "X.npy", store, "-p", "knn_method=nndescent", "--run-name", RUN],
                            cwd=cwd, stdout=open(cwd / f"{store}.out", "w"), stderr=open(cwd / f"{store}.err", "w"),
                            env=env, start_new_session=True)


def cli_environ() -> dict:
    """The environment of a user's CLI: the test session's, without its log levels (the CLI's own apply) and without a
    Prefect API (the CLI starts its own server, as on a machine with no Prefect profile)."""
    env = {**os.environ, "COLUMNS": "200"}
    for name in ("PREFECT_LOGGING_LEVEL", "DASK_LOGGING__DISTRIBUTED", "PREFECT_API_URL"):
        env.pop(name, None)
    return env


def manifest(store: Path) -> dict | None:
    """The run's manifest, or None before it exists (or while it cannot be read)."""
    try:
        return json.loads((store / "runs" / f"{RUN}.json").read_text())
    except (OSError, ValueError):
        return None


def wait_for_stage(process: subprocess.Popen, store: Path, stage: str, timeout: float = 240) -> None:
    """Poll the manifest until ``stage`` is running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = manifest(store)
        if m and any(s["name"] == stage and s["status"] == "running" for s in m["stages"]):
            return
        assert process.poll() is None, f"the run ended before stage {stage}: {store.with_suffix('.err')}"
        time.sleep(0.1)
    raise AssertionError(f"stage {stage} did not start within {timeout} s")


def wait_exit(process: subprocess.Popen, bound: float) -> tuple[int, float]:
    """``(exit code, seconds)``; the process group is killed and the test fails when it runs past ``bound``."""
    t0 = time.perf_counter()
    try:
        code = process.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"the run did not exit within {bound} s")
    return code, time.perf_counter() - t0


def alive(processes: list[psutil.Process], wait: float = 5.0) -> list[int]:
    """Pids of ``processes`` still running (zombies excluded) after waiting up to ``wait`` seconds for them."""
    _, still = psutil.wait_procs(processes, timeout=wait)
    return [p.pid for p in still if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def error_lines(text: str) -> list[str]:
    """Lines of a CLI's stderr that report an error."""
    return [line for line in text.splitlines() if line.startswith("error:")]


def assert_stopped_cleanly(cwd: Path, store_name: str, children: list[psutil.Process]) -> dict:
    """The store after a stopped run: manifest failed, lock released, no temporary file; one error line, no
    traceback; no child process left. Returns the manifest."""
    store = cwd / store_name
    m = manifest(store)
    assert m is not None and m["status"] == "failed", m
    assert not (store / "runs" / ".lock.json").exists()
    assert [p for p in store.rglob("*.tmp")] == []
    stderr = (cwd / f"{store_name}.err").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "CancelledError" not in stderr, stderr[-3000:]  # a worker's note of its task cancelled by the close
    assert len(error_lines(stderr)) == 1, stderr[-3000:]
    assert alive(children) == []
    return m


SIGNAL_CASES = [
    pytest.param(signal.SIGINT, True, id="SIGINT-group"),
    pytest.param(signal.SIGTERM, True, id="SIGTERM-group", marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, False, id="SIGTERM-pid", marks=pytest.mark.slow),
    pytest.param(signal.SIGINT, False, id="SIGINT-pid", marks=pytest.mark.slow),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, to_group", SIGNAL_CASES)
def test_signal_during_knn_stops_the_run_cleanly(points, signum, to_group):
    """A signal to the CLI's process group (what Ctrl-C sends) or to its pid alone during the kNN stage: exit
    within the bound with 128 + the signal's number and one line, the run recorded as failed, the lock released,
    no temporary file, no child process left (Prefect's temporary server, the Dask workers)."""
    store_name = f"sig-{signum}-{int(to_group)}.zarr"
    process = start_embed(points, store_name)
    wait_for_stage(process, points / store_name, "knn")
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 3  # Prefect's server and two workers (at least)
    (os.killpg if to_group else os.kill)(process.pid, signum)
    code, seconds = wait_exit(process, EXIT_BOUND)
    assert code == 128 + signum
    m = assert_stopped_cleanly(points, store_name, children)
    name = signal.Signals(signum).name
    line = error_lines((points / f"{store_name}.err").read_text())[0]
    assert line == f"error: interrupted ({name}); run {RUN} recorded as failed; rerun with --run-name {RUN} to resume"
    assert name in m["error"]
    print(f"{name} to the {'group' if to_group else 'pid'}: exit {code} after {seconds:.1f} s")


def wait_for_children(process: subprocess.Popen, err: Path, count: int = 1, timeout: float = 60,
                      workers: bool = False) -> list[psutil.Process]:
    """The CLI's child processes (its local Dask workers only, with ``workers``), as soon as ``count`` exist."""
    from tests.helpers import local_worker_processes

    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        found = local_worker_processes(process.pid) if workers else psutil.Process(process.pid).children()
        if len(found) >= count:
            return found
        time.sleep(0.01)
    raise AssertionError(f"fewer than {count} children: {err.read_text()[-3000:]}")


@pytest.mark.timeout(300)
def test_ctrl_c_as_the_cli_starts_ends_it_with_one_line(points):
    """SIGINT to the group as soon as the CLI has launched its first child (Prefect's local server; the CLI is
    checking its arguments, before any run): exit 130 with one line and no traceback, no child process left."""
    store_name = "sig-start.zarr"
    process = start_embed(points, store_name)
    children = wait_for_children(process, points / f"{store_name}.err")
    os.killpg(process.pid, signal.SIGINT)
    code, seconds = wait_exit(process, EXIT_BOUND)
    stderr = (points / f"{store_name}.err").read_text()
    assert code == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert error_lines(stderr) == ["error: interrupted (SIGINT)"], stderr[-3000:]
    assert alive(children, wait=15) == []
    print(f"SIGINT as the CLI starts: exit {code} after {seconds:.1f} s")


@pytest.mark.slow  # 16 s
@pytest.mark.timeout(300)
def test_the_local_workers_survive_ctrl_cs_sent_to_them_as_they_start(points):
    """A Ctrl-C meant for the CLI reaches its workers too. SIGINT sent to both workers alone, every 0.1 s from the
    moment they exist for 2 s: neither dies, the run completes, nothing is printed about it."""
    store_name = "sig-workers.zarr"
    process = start_embed(points, store_name)
    workers = wait_for_children(process, points / f"{store_name}.err", count=2, workers=True)
    for _ in range(20):
        for worker in workers:
            try:
                worker.send_signal(signal.SIGINT)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
    assert all(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    code, _ = wait_exit(process, 240)
    stderr = (points / f"{store_name}.err").read_text()
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "Failed to start process" not in stderr, stderr[-3000:]
    assert manifest(points / store_name)["status"] == "completed"


#: Seconds Prefect's own services take to give up on a dead API when the process exits (its events worker tries
#: to reconnect 10 times), after the run has failed and said so.
PREFECT_EXIT_DRAIN = 120.0


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_prefect_server_killed_during_a_run_fails_it_within_the_bound(points, tmp_path):
    """The run's Prefect server (PREFECT_API_URL) killed during the kNN stage: with
    EIGENFLOW_PREFECT_API_TIMEOUT=10 the run fails within 10 s + a probe + the unwinding bound with one line
    naming the API, the run recorded as failed with its completed stages kept for the resume; the process then
    exits with code 1 once Prefect's services have given up on the dead API."""
    from eigenflow.flows.prefect_api import PROBE_SECONDS

    with prefect_server_process(tmp_path / "prefect") as (server, url):
        process = start_embed(points, "api.zarr", env={"PREFECT_API_URL": url, "EIGENFLOW_PREFECT_API_TIMEOUT": "10"})
        wait_for_stage(process, points / "api.zarr", "knn")
        children = psutil.Process(process.pid).children(recursive=True)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        t0, err = time.perf_counter(), points / "api.zarr.err"
        while not error_lines(err.read_text()) and time.perf_counter() - t0 < 10 + 2 * PROBE_SECONDS + EXIT_BOUND:
            time.sleep(0.2)
        reported = time.perf_counter() - t0
        assert error_lines(err.read_text()), f"no line within {reported:.0f} s"
        assert manifest(points / "api.zarr")["status"] == "failed"
        code, seconds = wait_exit(process, PREFECT_EXIT_DRAIN)
    assert code == 1
    m = assert_stopped_cleanly(points, "api.zarr", children)
    line = error_lines((points / "api.zarr.err").read_text())[0]
    assert line.startswith(f"error: Prefect API at {url} unreachable since ")
    assert line.endswith(f"; the run is recorded as failed in the store; rerun with --run-name {RUN}")
    assert m["error"].startswith("PrefectAPILost: Prefect API at")
    assert [s["name"] for s in m["stages"] if s["status"] == "completed"][:2] == ["cluster", "ingest"]
    print(f"API lost: line after {reported:.1f} s, exit {code} {seconds:.1f} s later; completed stages "
          f"{[s['name'] for s in m['stages'] if s['status'] == 'completed']}")


def _embed_refused(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    return subprocess.run([*command, "embed", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.timeout(300)
def test_inputs_too_small_or_unlabeled_are_refused_before_any_store(tmp_path):
    """A 1-row and a 2-row file, ``-k 50`` on 20 rows and a supervised method whose labels are all -1: one line
    naming the parameter, its range and the value, and no store."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 20):
        np.save(tmp_path / f"r{n}.npy", rng.standard_normal((n, 4)).astype(np.float32))
    np.save(tmp_path / "unlabeled.npy", np.full(20, -1, dtype=np.int32))
    cases = [
        (("r1.npy", "a.zarr"), "method 'laplacian_eigenmaps' needs at least 2 rows to fit; got 1"),
        (("r2.npy", "b.zarr"), "n_neighbors must be in [1, 1] for a source of 2 rows; got 15"),
        (("r20.npy", "c.zarr", "-k", "50"), "n_components must be in [1, 18] for a source of 20 rows; got 50"),
        (("r20.npy", "d.zarr", "--method", "lfda", "--labels", "unlabeled.npy"),
         "method 'lfda' needs labeled rows; every one of the 20 labels in unlabeled.npy is -1 (unlabeled)"),
    ]
    for args, message in cases:
        r = _embed_refused(tmp_path, *args)
        assert r.returncode == 1, r.stderr
        assert r.stderr.strip().splitlines() == [f"error: {message}"], r.stderr
        assert not (tmp_path / args[1]).exists()


def test_a_signal_during_a_manifest_write_waits_for_its_end(tmp_path):
    """SIGINT delivered in the middle of an atomic write (:func:`storage.signals.signals_held`): the file is
    written whole, no temporary file is left, and the interrupt arrives right after."""
    from eigenflow.storage.signals import signals_held
    from eigenflow.storage.local_files import replace_local_file

    target = tmp_path / "runs" / "r.json"
    # Python's own SIGINT handler, whatever an earlier test of the session (a flow engine, a runner) installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # delivered now, were it not held
                replace_local_file(str(target), b'{"status": "failed"}')
                interrupted_inside = False
            interrupted_inside = True  # not reached: raised as the block ends
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not interrupted_inside
    assert target.read_bytes() == b'{"status": "failed"}'
    assert list(target.parent.iterdir()) == [target]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_an_interrupted_run_resumes_from_its_completed_stages(points):
    """SIGINT to the group during the eigensolve, then the same command with ``--run-name``: the run completes,
    reusing the kNN graph and the weights of the interrupted attempt."""
    process = start_embed(points, "resume.zarr")
    wait_for_stage(process, points / "resume.zarr", "eigensolve")
    os.killpg(process.pid, signal.SIGINT)
    assert wait_exit(process, EXIT_BOUND)[0] == 130
    again = start_embed(points, "resume.zarr")
    assert wait_exit(again, 300)[0] == 0, (points / "resume.zarr.err").read_text()[-3000:]
    m = manifest(points / "resume.zarr")
    assert m["status"] == "completed"
    reused = {s["name"] for s in m["stages"] if s["info"].get("reused")}
    assert {"knn", "weights"} <= reused, reused


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_of_the_cli_leaves_no_child_behind(points):
    """SIGKILL of the CLI's pid alone during the kNN stage: Prefect's temporary server (its own session, watching
    its parent) and the Dask workers end within seconds; the store's lock is stale (its owner is gone)."""
    from eigenflow.storage.lock import check_unlocked

    process = start_embed(points, "killed.zarr")
    wait_for_stage(process, points / "killed.zarr", "knn")
    children = psutil.Process(process.pid).children(recursive=True)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    assert alive(children, wait=10) == []
    check_unlocked(str(points / "killed.zarr"))  # a stale lock does not hold the store


@pytest.mark.slow
def test_a_killed_scheduler_fails_the_run_in_one_line_that_says_how_to_resume(points, tmp_path, prefect_api):
    """A real ``dask scheduler`` and ``dask worker`` on loopback; the scheduler is killed (SIGKILL) during the run:
    the CLI ends with one line, the connection failure and how to resume the run the store records as failed."""
    from tests.helpers import free_port, stop_process_group

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    env = {**cli_environ(), "PREFECT_API_URL": prefect_api, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}
    scheduler = subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    worker = subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nthreads", "1", "--nworkers", "2",
                               "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        process = subprocess.Popen([str(SCRIPT), "embed", "X.npy", "lost.zarr", "-p", "knn_method=nndescent",
                                    "--scheduler", address, "--run-name", RUN], cwd=points, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        wait_for_stage(process, points / "lost.zarr", "knn")
        os.killpg(scheduler.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=180)
    finally:
        for server in (worker, scheduler):
            stop_process_group(server, timeout=20)
    [line] = err.strip().splitlines()
    assert process.returncode == 1
    assert line.startswith("error: ") and line.endswith(f"run {RUN} recorded as failed; rerun with --run-name {RUN} "
                                                        "to resume"), line
    assert manifest(points / "lost.zarr")["status"] == "failed"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("moment", ["half a second in", "as the summary prints"])
def test_ctrl_c_at_the_first_and_the_last_moment_ends_in_at_most_two_lines(points, moment):
    """SIGINT to the CLI's process group half a second after it started (the signal is never lost: the command
    stops with 130) or as soon as its summary table appears (the run is complete): at most two lines on stderr, no
    traceback, no process of the group left."""
    store_name = "moment-first.zarr" if moment.startswith("half") else "moment-last.zarr"
    process = start_embed(points, store_name)
    if moment.startswith("half"):
        time.sleep(0.5)
    else:
        out = points / f"{store_name}.out"
        deadline = time.time() + 240
        while "completed" not in out.read_text() and process.poll() is None and time.time() < deadline:
            time.sleep(0.01)
    group = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    code, _ = wait_exit(process, EXIT_BOUND)
    stderr = (points / f"{store_name}.err").read_text()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) <= 2 and "Traceback" not in stderr, stderr[-3000:]
    # at the summary the run is complete: it exits 0, 130, or by the signal itself (-2: a shell shows 130) when the
    # signal comes during the interpreter's exit
    assert code == 130 if moment.startswith("half") else code in (0, 130, -signal.SIGINT), (code, stderr)
    assert alive(group) == []
