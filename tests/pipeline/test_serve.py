"""Scheduled runs against a real Prefect server started on loopback: `eigenflow serve` in its own process.

The served ``embed`` deployment runs on its schedule (every 20 s; one run at a time, the others wait); a run is
also started with ``prefect deployment run``; both complete, write separate runs into the same store, and their
artifacts are readable through the Prefect client. The server and the serving process are stopped at the end.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.manifest import list_runs, read_manifest

BIN = Path(sys.executable).parent


def _client_call(api_url: str, fn):
    async def call():
        from prefect.client.orchestration import PrefectClient

        async with PrefectClient(api=api_url) as client:
            return await fn(client)

    return asyncio.run(call())


def _runs_of(api_url: str, deployment: str):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    name = deployment.split("/")[1]
    return _client_call(api_url, lambda c: c.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[name]))))


def _runs(store: Path) -> list:
    """The manifests of the runs recorded in ``store`` (none before it exists)."""
    return [read_manifest(store, r) for r in list_runs(store)] if store.exists() else []


def _wait_while_serving(serve: subprocess.Popen, done, deadline: float, what: str) -> None:
    """Poll ``done()`` every second until it holds; the serving process must stay up and ``deadline`` not pass."""
    while not done():
        assert serve.poll() is None, serve.stderr.read()[-3000:]
        assert time.time() < deadline, what
        time.sleep(1)


@pytest.mark.slow
def test_served_deployment_runs_on_schedule_and_on_demand(prefect_server, tmp_path):
    api_url, home = prefect_server
    X, y, _ = make_swiss_roll_lifted(2000, random_state=0)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "PREFECT_LOGGING_LEVEL": "WARNING"}
    serve = subprocess.Popen([str(BIN / "eigenflow"), "serve", "X.npy", "served.zarr", "-p", "knn_method=exact",
                              "--labels", "y.npy", "--holdout", "0.2", "--flow", "embed", "--interval", "20", "--name", "nightly",
                              "--workers", "1"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 300
        _wait_while_serving(serve, lambda: [r for r in _runs_of(api_url, "embed/nightly")
                                            if r.state and r.state.is_completed()], deadline, "no completed scheduled run")
        started = subprocess.run([str(BIN / "prefect"), "deployment", "run", "embed/nightly"], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        triggered = re.search(r"UUID: ([0-9a-f-]{36})", started.stdout).group(1)  # wait for this run itself
        _wait_while_serving(serve, lambda: [r for r in _runs_of(api_url, "embed/nightly") if str(r.id) == triggered
                                            and r.state and r.state.is_completed()], deadline + 300,
                            "the triggered run did not complete")
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
    runs = [r for r in _runs_of(api_url, "embed/nightly") if r.state and r.state.is_completed()]
    store = tmp_path / "served.zarr"
    done = [m for m in (read_manifest(store, r) for r in list_runs(store)) if m.status == "completed"]
    print("held-out 1-NN accuracy of the served runs:", [m.results["heldout_1nn_accuracy"] for m in done])
    assert len(done) >= 2 and all(m.results["heldout_1nn_accuracy"] > 0.6 for m in done)
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    for run in runs[:2]:
        artifacts = _client_call(api_url, lambda c, rid=run.id: c.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[rid]))))
        assert {"markdown", "table", "image"} <= {a.type for a in artifacts}


def test_a_served_schedule_on_a_folder_that_gains_a_file_runs_an_update(prefect_server, tmp_path):
    """``eigenflow serve parts/ STORE`` (the default ``--flow update``): the store is embedded once when serve starts,
    then every scheduled run is an update; after a partition file is added, the next one places its rows with the
    first fit's model, and no second fit runs."""
    api_url, home = prefect_server
    X, _, _ = make_swiss_roll_lifted(2300, random_state=0)
    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "day-1.npy", X[:2000])
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "PREFECT_LOGGING_LEVEL": "WARNING"}
    serve = subprocess.Popen([str(BIN / "eigenflow"), "serve", "parts", "grows.zarr", "-p", "knn_method=exact",
                              "--interval", "4", "--name", "grows", "--workers", "1"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    store = tmp_path / "grows.zarr"

    def placed() -> list:
        return [m for m in _runs(store) if m.flow == "update" and m.status == "completed" and m.results.get("n_new")]

    try:
        deadline = time.time() + 300
        _wait_while_serving(serve, lambda: [r for r in _runs(store) if r.flow == "embed" and r.status == "completed"],
                            deadline, "the store was not embedded when serve started")
        np.save(tmp_path / "day-2.npy", X[2000:])
        os.replace(tmp_path / "day-2.npy", parts / "day-2.npy")  # the file appears whole, as a mover makes it appear
        _wait_while_serving(serve, placed, deadline, "the new partition was not placed")
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
    (update,) = placed()
    fits = [r for r in list_runs(store) if read_manifest(store, r).flow == "embed"]
    assert update.results["rows"] == [2000, 2300] and update.results["model_run"] == fits[0] and len(fits) == 1
    assert update.results["refit"]["decided"] is False  # 300 new rows: under 25 % of the 2000 fitted, no drift
