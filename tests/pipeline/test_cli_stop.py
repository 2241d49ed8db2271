"""How a CLI ``embed`` run stops: real ``eigenflow`` processes in their own process group, real signals, a real
Prefect server killed under a run, and bad inputs refused before any store exists."""

from __future__ import annotations

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
    """The environment of a user's CLI: the test session's, without its log levels (the CLI's own apply)."""
    env = {**os.environ, "COLUMNS": "200"}
    for name in ("PREFECT_LOGGING_LEVEL", "DASK_LOGGING__DISTRIBUTED"):
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


def wait_for_fork_server(process: subprocess.Popen, err: Path, timeout: float = 60) -> psutil.Process:
    """The CLI's child process that is multiprocessing's fork server (of the local workers), as soon as it exists."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        for child in psutil.Process(process.pid).children(recursive=True):
            try:
                if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                pass
        time.sleep(0.01)
    raise AssertionError(f"no fork server: {err.read_text()[-3000:]}")


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multiprocessing's fork server is POSIX's")
def test_ctrl_c_as_the_cli_starts_ends_it_with_one_line(points):
    """SIGINT to the group as soon as the workers' fork server exists (the CLI is importing its modules, before
    its run guard): exit 130 with one line and no traceback, no child process left."""
    store_name = "sig-start.zarr"
    process = start_embed(points, store_name)
    wait_for_fork_server(process, points / f"{store_name}.err")
    children = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGINT)
    code, seconds = wait_exit(process, EXIT_BOUND)
    stderr = (points / f"{store_name}.err").read_text()
    assert code == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert error_lines(stderr) == ["error: interrupted (SIGINT)"], stderr[-3000:]
    assert alive(children, wait=15) == []  # the fork server ends once its imports are done
    print(f"SIGINT as the CLI starts: exit {code} after {seconds:.1f} s")


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multiprocessing's fork server is POSIX's")
def test_the_workers_fork_server_survives_a_ctrl_c_while_it_imports(points):
    """The fork server of the local workers imports their modules for 2-6 s after the CLI starts; a Ctrl-C meant
    for the CLI reaches it too. SIGINT sent to the server alone, every 0.1 s during its first 2 s: it is not
    killed, every worker starts, the run completes, nothing is printed about it."""
    store_name = "sig-server.zarr"
    process = start_embed(points, store_name)
    server = wait_for_fork_server(process, points / f"{store_name}.err")
    for _ in range(20):
        try:
            server.send_signal(signal.SIGINT)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    # not killed (multiprocessing would launch another server, which imports all again, when a worker starts)
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    code, _ = wait_exit(process, 240)
    stderr = (points / f"{store_name}.err").read_text()
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "Failed to start process" not in stderr, stderr[-3000:]
    assert manifest(points / store_name)["status"] == "completed"


@pytest.mark.timeout(300)
def test_prefect_server_killed_during_a_run_fails_it_within_the_bound(points, tmp_path):
    """The run's Prefect server (PREFECT_API_URL) killed during the kNN stage: with
    EIGENFLOW_PREFECT_API_TIMEOUT=10 the run ends within 10 s + a probe + the unwinding bound with one line
    naming the API, exit code 1, the run recorded as failed with its completed stages kept for the resume."""
    from eigenflow.flows._stop import FORCED_EXIT_SECONDS, PROBE_SECONDS

    with prefect_server_process(tmp_path / "prefect") as (server, url):
        process = start_embed(points, "api.zarr", env={"PREFECT_API_URL": url, "EIGENFLOW_PREFECT_API_TIMEOUT": "10"})
        wait_for_stage(process, points / "api.zarr", "knn")
        children = psutil.Process(process.pid).children(recursive=True)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        code, seconds = wait_exit(process, 10 + 2 * PROBE_SECONDS + FORCED_EXIT_SECONDS + 10)
    assert code == 1
    m = assert_stopped_cleanly(points, "api.zarr", children)
    line = error_lines((points / "api.zarr.err").read_text())[0]
    assert line.startswith(f"error: Prefect API at {url} unreachable since ")
    assert line.endswith(f"; the run is recorded as failed in the store; rerun with --run-name {RUN}")
    assert m["error"].startswith("PrefectAPILost: Prefect API at")
    assert [s["name"] for s in m["stages"] if s["status"] == "completed"][:2] == ["ingest", "cluster"]
    print(f"API lost: exit {code} after {seconds:.1f} s; completed stages "
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
    from eigenflow.storage.store import replace_local_file

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


def _exit_of(app) -> SystemExit:
    """The ``SystemExit`` that running the typer ``app`` (standalone, as the console script does) ends with."""
    with pytest.raises(SystemExit) as info:
        app([], standalone_mode=True)
    return info.value


def test_an_interrupt_typer_turned_into_a_silent_exit_is_found_and_a_reported_one_is_not():
    """typer turns a ``KeyboardInterrupt`` raised in a command (before the run guard) into exit status 130 without
    a word: the console script finds it behind the exit and prints its line. A stop the guard has reported ends with
    ``typer.Exit(...) from None``: not found (no second line). A real typer app each time."""
    import typer

    from eigenflow.flows._launch import _unreported_interrupt
    from eigenflow.flows._stop import RunInterrupted

    silent = typer.Typer()

    @silent.command()
    def interrupted() -> None:
        raise KeyboardInterrupt

    reported = typer.Typer()

    @reported.command()
    def guarded() -> None:
        try:
            raise RunInterrupted(signal.SIGINT)
        except BaseException:
            raise typer.Exit(130) from None  # what flows.cli._guarded does after printing the stop's line

    done = typer.Typer()

    @done.command()
    def fine() -> None:
        pass

    exit_silent = _exit_of(silent)
    assert exit_silent.code == 130 and isinstance(_unreported_interrupt(exit_silent), KeyboardInterrupt)
    exit_reported = _exit_of(reported)
    assert exit_reported.code == 130 and _unreported_interrupt(exit_reported) is None
    assert _unreported_interrupt(_exit_of(done)) is None
