"""`eigenflow serve` against a real Prefect server (loopback): a killed serve does not stop the schedule, and
SIGTERM stops serve within seconds.

- SIGKILL of the serving process group while a scheduled run is in a stage: the run stays *Running* in Prefect
  and holds the deployment's one concurrency slot until the server's zombie-run automation, which ``serve`` creates,
  marks it *Crashed* (its heartbeats stopped); the next scheduled run of ``serve`` started again then takes over the
  store's stale lock and completes.
- SIGTERM to the serving process while a run is in a stage: the process exits within a bound, leaves no child
  behind, the run is ended in Prefect and ``failed`` in the store's manifest, and the lock is released.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from eigenflow.flows.serve import HEARTBEAT_SECONDS, ZOMBIE_SECONDS
from eigenflow.storage.lock import owner_alive, read_lock
from eigenflow.storage.manifest import effective_status, list_runs, read_manifest
from tests.helpers import stop_process_group
from tests.pipeline.test_serve import _client_call, _runs_of

BIN = Path(sys.executable).parent
N_POINTS = 50000


def _start_serve(tmp_path: Path, api_url: str, home: Path, name: str, interval: int,
                 ) -> subprocess.Popen:
    """``eigenflow serve`` in its own process group (stderr to a file of ``tmp_path``)."""
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "PREFECT_LOGGING_LEVEL": "WARNING"}
    log_path = tmp_path / f"serve-{name}-{time.time():.0f}.log"
    log = open(log_path, "w")  # noqa: SIM115 - kept open by the child
    serve = subprocess.Popen([str(BIN / "eigenflow"), "serve", "X.npy", "served.zarr", "-p", "knn_method=exact",
                             "--flow", "embed", "--interval", str(interval), "--name", name, "--workers", "1"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    serve.log_path = log_path
    return serve


def _dataset(tmp_path: Path) -> None:
    """Gaussian noise in 64 dimensions: no tree pruning, so the exact kNN stage lasts seconds (a signal lands in
    it; the stages of a low-dimensional set of this size end in well under a second each)."""
    X = np.random.default_rng(0).standard_normal((N_POINTS, 64)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)


def _run_in_stage(store: Path) -> tuple[str, str] | None:
    """``(run, stage)`` of a run of ``store`` whose manifest shows a stage in progress, else None."""
    for run in list_runs(store) if (store / "zarr.json").exists() else []:
        try:
            manifest = read_manifest(store, run)
        except Exception:  # noqa: BLE001 - being written
            continue
        running = [s.name for s in manifest.stages if s.status == "running" and s.name != "ingest"]
        if manifest.status == "running" and running:
            return run, running[-1]
    return None


def _wait(predicate, seconds: float, what: str, serve: subprocess.Popen | None = None, step: float = 0.2):
    """Poll ``predicate`` until it returns a true value (returned) or fail after ``seconds`` naming ``what``."""
    deadline = time.time() + seconds
    while True:
        value = predicate()
        if value:
            return value
        assert serve is None or serve.poll() is None, f"serve exited ({serve.returncode}) while waiting for {what}"
        assert time.time() < deadline, f"no {what} within {seconds} s"
        time.sleep(step)


def _flow_run(api_url: str, run_id):
    """The flow run ``run_id``, read by its id (a deployment's list is one page of the API's default limit: with
    a run scheduled every 15 s, an older run can fall off it)."""
    return _client_call(api_url, lambda c: c.read_flow_run(run_id))


def _state(api_url: str, deployment: str, run_id) -> str | None:
    r = _flow_run(api_url, run_id)
    return r.state.type.value if r.state else None


def _running_flow_run(api_url: str, deployment: str):
    running = [r for r in _runs_of(api_url, deployment) if r.state and r.state.is_running()]
    return running[0] if len(running) == 1 else None


def _group(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _stop(serve: subprocess.Popen) -> None:
    stop_process_group(serve)


@pytest.mark.slow  # 200 s: two served processes, three scheduled runs and the heartbeats' 90 s of silence
def test_killed_serve_does_not_stop_the_schedule(prefect_server, tmp_path):
    """SIGKILL of serve's process group in a stage leaves the run *Running*; the server's zombie-run automation
    marks it *Crashed* once its heartbeats stop, the next scheduled run (of serve started again) completes, and the
    store has no live ``running`` run nor a stale lock."""
    api_url, home = prefect_server
    _dataset(tmp_path)
    store = tmp_path / "served.zarr"
    deployment = "embed/recovery"
    first = _start_serve(tmp_path, api_url, home, deployment.split("/")[1], interval=15)
    try:
        run, stage = _wait(lambda: _run_in_stage(store), 240, "run in a stage", first)
        dead = _wait(lambda: _running_flow_run(api_url, deployment), 30, "Running flow run", first)
        processes = _group(first.pid)
        print(f"killing the serve group in stage {stage!r} of run {run} ({len(processes)} processes)")
        os.killpg(first.pid, signal.SIGKILL)
        gone, alive = psutil.wait_procs(processes, timeout=15)
        assert not alive, f"processes of the killed group still alive: {[p.pid for p in alive]}"
        first.wait(timeout=5)
    finally:
        _stop(first)
    assert _state(api_url, deployment, dead.id) == "RUNNING"  # nothing else ends it: the slot stays taken
    restarted_at = time.time()
    second = _start_serve(tmp_path, api_url, home, deployment.split("/")[1], interval=15)
    try:
        _wait(lambda: _state(api_url, deployment, dead.id) == "CRASHED", ZOMBIE_SECONDS + HEARTBEAT_SECONDS + 60,
              "Crashed state of the dead run", second, step=1)

        def completed_after_restart():
            return [r for r in _runs_of(api_url, deployment) if r.state and r.state.is_completed()
                    and r.start_time and r.start_time.timestamp() > restarted_at]

        done = _wait(completed_after_restart, 120, "completed scheduled run after the restart", second, step=1)
        print(f"next run completed {time.time() - restarted_at:.1f} s after the restart")
        crashed = _flow_run(api_url, dead.id)
        assert "no heartbeat" in crashed.state.message
        lock = read_lock(store)
        assert lock is None or owner_alive(lock), f"stale lock left: {lock}"
    finally:
        _stop(second)
    assert effective_status(read_manifest(store, run)) == "crashed"
    statuses = {r: effective_status(read_manifest(store, r)) for r in list_runs(store)}
    assert "completed" in statuses.values() and "running" not in statuses.values(), statuses
    assert read_lock(store) is None
    assert done


@pytest.mark.slow  # 30 s each: a served process and a scheduled run
@pytest.mark.parametrize("signum, to_group", [
    (signal.SIGTERM, False),
    pytest.param(signal.SIGTERM, True, marks=pytest.mark.slow),
    pytest.param(signal.SIGINT, False, marks=pytest.mark.slow),
], ids=["sigterm", "sigterm-group", "sigint"])
def test_sigterm_stops_serve_within_seconds(prefect_server, tmp_path, signum, to_group):
    """A signal to the serving process (or its whole group, as a service manager sends it) while a scheduled run
    is in a stage: serve exits within 20 s, its children (run subprocess, Dask workers) are gone, the run is
    *Crashed* / *Cancelled* in Prefect and ``failed`` in the store, and the store's lock is released."""
    api_url, home = prefect_server
    _dataset(tmp_path)
    store = tmp_path / "served.zarr"
    deployment = f"embed/stop-{signum.name.lower()}{'-group' if to_group else ''}"
    serve = _start_serve(tmp_path, api_url, home, deployment.split("/")[1], interval=15)
    try:
        run, stage = _wait(lambda: _run_in_stage(store), 240, "run in a stage", serve)
        flow_run = _wait(lambda: _running_flow_run(api_url, deployment), 30, "Running flow run", serve)
        children = _group(serve.pid)[1:]
        t0 = time.time()
        (os.killpg if to_group else os.kill)(serve.pid, signum)
        serve.wait(timeout=60)
        elapsed = time.time() - t0
        print(f"serve exited {elapsed:.1f} s after {signum.name} (group: {to_group}) (run {run} in stage {stage!r}, {len(children)} children)")
        _, alive = psutil.wait_procs(children, timeout=5)
    finally:
        _stop(serve)
    assert elapsed < 20
    assert not alive, f"children left after serve exited: {[(p.pid, p.name()) for p in alive]}"
    assert _state(api_url, deployment, flow_run.id) in ("CRASHED", "CANCELLED")
    assert read_manifest(store, run).status == "failed"
    assert read_lock(store) is None


def test_zombie_automation_created_once(prefect_api):
    """``serve`` puts Prefect's documented zombie-run automation on the real server once: a proactive trigger per
    flow run, armed by a heartbeat and satisfied by the next heartbeat or a final state within 90 s, that sets the
    run *Crashed*; a second call finds it and creates nothing."""
    from prefect.client.orchestration import get_client

    from eigenflow.flows.serve import ZOMBIE_AUTOMATION, ZOMBIE_SECONDS, ensure_zombie_automation

    ensure_zombie_automation()
    ensure_zombie_automation()
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(ZOMBIE_AUTOMATION)
    assert len(found) == 1
    trigger, (action,) = found[0].trigger, found[0].actions
    assert trigger.posture.value == "Proactive" and trigger.within.total_seconds() == ZOMBIE_SECONDS
    assert trigger.after == {"prefect.flow-run.heartbeat"} and "prefect.flow-run.Completed" in trigger.expect
    assert action.type == "change-flow-run-state" and action.state.value == "CRASHED"


def test_sigterm_while_the_cluster_starts(prefect_server, tmp_path):
    """SIGTERM as soon as the serving process has started its local cluster's first process (before any run):
    serve exits within 20 s and leaves no process behind."""
    api_url, home = prefect_server
    _dataset(tmp_path)
    serve = _start_serve(tmp_path, api_url, home, "stop-at-start", interval=15)
    try:
        _wait(lambda: psutil.Process(serve.pid).children(recursive=True), 120, "a cluster process", serve, step=0.05)
        children = _group(serve.pid)[1:]
        t0 = time.time()
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        elapsed = time.time() - t0
        _, alive = psutil.wait_procs(children, timeout=5)
        print(f"serve exited {elapsed:.1f} s after SIGTERM during the cluster start ({len(children)} children)")
    finally:
        _stop(serve)
    assert elapsed < 20
    assert not alive, f"children left after serve exited: {[(p.pid, p.name()) for p in alive]}"
    assert serve.returncode == 0 and "Traceback" not in serve.log_path.read_text(), serve.log_path.read_text()[-2000:]
