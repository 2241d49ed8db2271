"""The ``eigenflow`` command line, run as a subprocess on small data (the installed console script); the commands that
run a flow report to the test session's Prefect server (``prefect_api``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.embedding_io import read_embedding

SCRIPT = Path(sys.executable).with_name("eigenflow")


def eigenflow(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``eigenflow ARGS`` and return the completed process (stdout / stderr as text); the environment is the test
    session's without its log levels (the CLI's own apply, as for a user)."""
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    env = {key: value for key, value in os.environ.items()
           if key not in ("PREFECT_LOGGING_LEVEL", "DASK_LOGGING__DISTRIBUTED")}
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**env, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    X, y, _ = make_swiss_roll_lifted(1200, random_state=0)
    np.save(d / "X.npy", X)
    np.save(d / "y.npy", y)
    np.save(d / "new.npy", make_swiss_roll_lifted(100, random_state=1)[0])
    return d


def test_ingest_then_info_json(files):
    r = eigenflow("ingest", "X.npy", "ing.zarr", "--labels", "y.npy", "--chunk-rows", "500", cwd=files)
    assert r.returncode == 0, r.stderr
    assert "1200" in r.stdout and "500" in r.stdout
    r = eigenflow("info", "ing.zarr", "--json", cwd=files)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["n"], data["d"], data["has_labels"], data["runs"]) == (1200, 32, True, [])
    assert {"path": "X", "shape": [1200, 32], "dtype": "float32", "chunks": [500, 32]} in data["arrays"]


def test_csv_with_nan_fails_with_one_line_message(files):
    bad = files / "bad.csv"
    bad.write_text("a,b\n1.0,2.0\n3.0,nan\n5.0,6.0\n")
    r = eigenflow("ingest", "bad.csv", "bad.zarr", cwd=files)
    assert r.returncode == 1
    assert r.stderr.startswith("error:") and "NaN" in r.stderr and "row" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (files / "bad.zarr").exists()


def test_bad_parameter_fails_before_running(files):
    """Refused with one line and no store, before anything starts: by the source's size, then by the estimator's
    own check."""
    for value, message in (("0", "n_neighbors must be in [1, 1199] for a source of 1200 rows; got 0"),
                           ("2.5", "n_neighbors must be an integer in [1, inf); got 2.5")):
        r = eigenflow("embed", "X.npy", "never.zarr", "-p", f"n_neighbors={value}", cwd=files)
        assert r.returncode == 1
        assert r.stderr.strip().splitlines() == [f"error: {message}"], r.stderr
        assert not (files / "never.zarr").exists()
    r = eigenflow("info", "missing.zarr", cwd=files)
    assert r.returncode == 1 and "error:" in r.stderr and "missing.zarr" in r.stderr


@pytest.mark.slow
def test_embed_extend_info_chain(files):
    """embed (ephemeral Prefect, local cluster of 1 worker), extend, info: the whole CLI on 1200 points."""
    r = eigenflow("embed", "X.npy", "emb.zarr", "--labels", "y.npy", "-p", "knn_method=exact", "--workers", "1",
                  "--holdout", "0.1", "--run-name", "cli-run", cwd=files)
    assert r.returncode == 0, r.stderr
    assert "completed" in r.stdout and "eigensolve" in r.stdout
    r = eigenflow("extend", "emb.zarr", "new.npy", "out.zarr", "--workers", "1", cwd=files)
    assert r.returncode == 0, r.stderr
    data = json.loads(eigenflow("info", "out.zarr", "--json", cwd=files).stdout)
    [run] = data["runs"]
    assert run["flow"] == "extend" and run["status"] == "completed"
    assert read_embedding(str(files / "out.zarr"), run["run_id"]).shape == (100, 2)
    info = json.loads(eigenflow("info", "emb.zarr", "--json", cwd=files).stdout)
    assert [(r["run_id"], r["status"]) for r in info["runs"]] == [("cli-run", "completed")]
    assert [s["name"] for s in info["runs"][0]["stages"]][-1] == "embed-points"


@pytest.mark.slow
def test_embed_and_extend_record_their_stages_and_the_kernels_load(files, prefect_api):
    """The CLI's summary and each run's manifest show the run's stages in order (the cluster, then the ingest, run
    by the flow) and ``compile``, the workers' load of the kNN kernels (> 0 with NN-descent); with ``--overwrite``
    the store is ingested again, once."""
    from eigenflow.storage.manifest import list_runs, read_manifest

    r = eigenflow("embed", "X.npy", "fixed.zarr", "-p", "knn_method=nndescent", "--workers", "1", "--run-name",
                  "fixed-run", cwd=files)
    assert r.returncode == 0, r.stderr
    r_extend = eigenflow("extend", "fixed.zarr", "new.npy", "fixed-out.zarr", "--workers", "1", cwd=files)
    assert r_extend.returncode == 0, r_extend.stderr
    [extend_run] = list_runs(str(files / "fixed-out.zarr"))
    for out, store, run in ((r.stdout, "fixed.zarr", "fixed-run"), (r_extend.stdout, "fixed-out.zarr", extend_run)):
        manifest = read_manifest(str(files / store), run)
        assert [s.name for s in manifest.stages][:2] == ["cluster", "ingest"], store
        assert manifest.fixed_seconds["compile"] > 0, store
        assert "fixed: compile " in out
    ingest = read_manifest(str(files / "fixed.zarr"), "fixed-run").stages[1]
    assert not ingest.info["skipped"] and ingest.seconds > 0
    again = eigenflow("embed", "X.npy", "fixed.zarr", "--workers", "1", "--run-name", "b", "--overwrite", cwd=files)
    assert again.returncode == 0, again.stderr
    assert list_runs(str(files / "fixed.zarr")) == ["b"]  # overwritten once: the first run's outputs went with it
    assert not read_manifest(str(files / "fixed.zarr"), "b").stages[1].info["skipped"]


def test_parse_params_reads_json_values_and_strings():
    from eigenflow.flows.cli import parse_params

    assert parse_params(["gamma=0.5", "mode=kernel", "n-components=3", "labels=y.npy", "flag=true"]) == {
        "gamma": 0.5, "mode": "kernel", "n_components": 3, "labels": "y.npy", "flag": True}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_params(["gamma"])


@pytest.mark.parametrize("args, message", [
    (["--method", "nope"], "method must be one of ["),
    (["-p", "n_neighbours=5"], "method 'laplacian_eigenmaps' has no parameter 'n_neighbours'; accepted: ["),
    (["--method", "lfda", "--labels", "y.npy", "-p", "weighting=heat"],
     "method 'lfda' has no parameter 'weighting'; accepted: ["),
    (["--method", "lfda", "-p", "mu1=0.1"], "'mu1' is a parameter of ['nsse', 'suplap']"),
    (["--method", "nsse"], "method 'nsse' needs labels"),
    (["-p", "random_state=3"], "random_state is the run's seed"),
    (["-k", "3", "-p", "n_components=2"], "n_components is given twice"),
])
def test_bad_method_parameters_fail_before_any_work(files, args, message):
    """Unknown method or parameter, another method's parameter, labels missing: one line, exit 1, no store."""
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    result = CliRunner().invoke(app, ["embed", str(files / "X.npy"), str(files / "never.zarr"), *args])
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and message in result.output and "Traceback" not in result.output
    assert not (files / "never.zarr").exists()


def test_methods_json_lists_every_estimator_parameter_with_its_default():
    """`eigenflow methods --json`: each method's parameters are its estimator's __init__ ones, same defaults."""
    import importlib
    import inspect

    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    result = CliRunner().invoke(app, ["methods", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert {m["name"] for m in listed} >= {"laplacian_eigenmaps", "dne", "mfa", "lfda", "nsse", "suplap", "tsk", "rsk",
                                           "graph_kpca", "multi_graph_kpca", "lneg", "spectral_clustering"}
    for m in listed:
        module, _, name = m["estimator"].rpartition(".")
        sig = inspect.signature(getattr(importlib.import_module(module), name).__init__)
        init = {k: p.default for k, p in sig.parameters.items() if k != "self"}
        assert ("n_clusters" if m["name"] == "spectral_clustering" else "n_components") in m["parameters"], m["name"]
        for key, default in m["parameters"].items():
            assert key in init, (m["name"], key)
            expected = list(init[key]) if isinstance(init[key], tuple) else init[key]
            assert json.loads(json.dumps(expected)) == default, (m["name"], key)
        assert set(init) - set(m["parameters"]) <= {"must_link", "cannot_link", "precomputed_knn"}
        assert isinstance(m["needs_labels"], bool)
    needs = {m["name"]: m["needs_labels"] for m in listed}
    assert needs["lfda"] and needs["nsse"] and needs["tsk"] and not needs["laplacian_eigenmaps"]


@pytest.mark.slow
def test_two_concurrent_runs_on_one_store_second_fails_fast(files, prefect_api):
    """Two real `eigenflow embed` processes on one store: the second stops at once, naming the first's run.

    The first fits NSSE on 1,200 labeled points (about 45 s here), so it still holds the store when the second
    starts."""
    import time

    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    first = subprocess.Popen([*command, "embed", "X.npy", "busy.zarr", "--method", "nsse", "--labels", "y.npy",
                              "--workers", "1", "--run-name", "first-run"], cwd=files, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lock = files / "busy.zarr" / "runs" / ".lock.json"
    deadline = time.time() + 300
    while not lock.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert lock.exists(), first.communicate()[1]
    r = eigenflow("embed", "busy.zarr", "busy.zarr", "--workers", "1", "--run-name", "second-run", cwd=files)
    assert r.returncode == 1 and "in use by run 'first-run'" in r.stderr and "Traceback" not in r.stderr
    assert first.wait(timeout=600) == 0, first.communicate()[1]
    runs = json.loads(eigenflow("info", "busy.zarr", "--json", cwd=files).stdout)["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [("first-run", "completed")]
    assert not lock.exists()


@pytest.mark.slow
def test_disconnected_graph_advice_is_followable_from_the_cli(tmp_path, prefect_api):
    """The error names the CLI form of its advice, and following it embeds component by component."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "two.npy", np.vstack([rng.normal(size=(150, 5)), 1000.0 + rng.normal(size=(150, 5))]))
    common = ("-p", "knn_method=exact", "-p", "n_neighbors=5", "--workers", "1")
    r = eigenflow("embed", "two.npy", "two.zarr", *common, "--run-name", "a", cwd=tmp_path)
    [line] = r.stderr.strip().splitlines()  # the workers' failed task in one line, no worker log before it
    assert r.returncode == 1 and line.startswith("error: the graph has 2 connected components") and \
        "-p on_disconnected=per_component" in line
    r = eigenflow("embed", "two.zarr", "two.zarr", *common, "-p", "on_disconnected=per_component", "--run-name", "b",
                  cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr  # the store as its own source: no zarr warnings
    assert np.isfinite(read_embedding(str(tmp_path / "two.zarr"), "b")).all()


@pytest.mark.slow  # 9 s; the same check is tested in-process in tests/spectral
def test_data_too_large_for_the_search_is_refused_in_one_line(tmp_path, prefect_api):
    """Finite coordinates around 1e30 would overflow the kNN search's float32 distances: the run fails in one line
    naming the magnitude and what to do, instead of building a corrupt graph."""
    np.save(tmp_path / "big.npy", np.random.default_rng(0).normal(size=(300, 5)).astype(np.float32) * 1e30)
    r = eigenflow("embed", "big.npy", "big.zarr", "-p", "knn_method=exact", "--workers", "1", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: X has coordinates up to 3.9e+30 in absolute value; the kNN search accepts at most 1e+15 (its float32 "
        "squared distances would overflow): divide X by a constant, e.g. 4e+30"], r.stderr


def test_demo_prints_accuracy_and_writes_the_plot(tmp_path, prefect_api):
    """``eigenflow demo`` (the first command of a new user): held-out 1-NN accuracy printed, store and plot
    written."""
    from eigenflow.storage.manifest import list_runs

    r = eigenflow("demo", "--n-points", "3000", "--out", "out", "--workers", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    accuracy = float(r.stdout.split("1-NN accuracy (held out)")[1].split("│")[1])
    assert accuracy > 0.9
    assert (tmp_path / "out" / "demo_embedding.png").stat().st_size > 0
    store = str(tmp_path / "out" / "demo.zarr")
    assert len(list_runs(store)) == 1


def test_with_held_out_points_every_worker_loads_the_kernels(files, prefect_api):
    """Held-out points are mapped through the kNN index on every worker: each worker loaded the kernels."""
    from eigenflow.storage.manifest import read_manifest

    r = eigenflow("embed", "X.npy", "held.zarr", "-p", "knn_method=nndescent", "--holdout", "0.2", "--run-name",
                  "held", cwd=files)
    assert r.returncode == 0, r.stderr
    manifest = read_manifest(str(files / "held.zarr"), "held")
    assert manifest.results["n_fit"] < manifest.results["n"]
    assert manifest.fixed_seconds["compile"] > 0


def test_the_cli_run_equals_the_estimator_on_the_stored_points(files, prefect_api):
    """``eigenflow embed`` with NN-descent: the stored graph equals a build of the stored X with the run's seed and
    the embedding the estimator's on that X."""
    from eigenflow.spectral import LaplacianEigenmaps
    from eigenflow.spectral._validation import check_random_state
    from eigenflow.storage.embedding_io import read_embedding
    from eigenflow.spectral.neighbours.index import KNNIndex
    from eigenflow.storage.arrays import read_X
    from eigenflow.storage.graph_io import read_knn
    from eigenflow.storage.manifest import read_manifest

    r = eigenflow("embed", "X.npy", "same.zarr", "-p", "knn_method=nndescent", "--run-name", "same", cwd=files)
    assert r.returncode == 0, r.stderr
    store = str(files / "same.zarr")
    manifest = read_manifest(store, "same")
    assert [s.name for s in manifest.stages] == ["cluster", "ingest", "knn", "weights", "eigensolve", "embed-points"]
    indices, distances = read_knn(store)
    expected = KNNIndex.build(read_X(store), manifest.parameters["n_neighbors"], method="nndescent",
                              random_state=check_random_state(0)).neighbor_graph()
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(distances, expected[1])
    estimator = LaplacianEigenmaps(knn_method="nndescent", random_state=0).fit(read_X(store))
    np.testing.assert_allclose(read_embedding(store, "same"), estimator.embedding_, atol=1e-6)


def test_two_embeds_into_one_new_store_the_second_is_refused_before_any_work(files, prefect_api):
    """Two real ``eigenflow embed`` processes into one store that does not exist, started 0.3 s apart: the store's
    lock is taken before the server and the cluster start, so one run is refused in one line naming the other (its
    seconds are printed, a figure rather than an assertion) and the other completes."""
    import time

    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "eigenflow.flows.cli"]
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_LOGGING_LEVEL"}
    started, processes = [], []
    for name in ("first", "second"):
        started.append(time.monotonic())
        processes.append(subprocess.Popen([*command, "embed", "X.npy", "race.zarr", "-p", "knn_method=exact",
                                           "--workers", "1", "--run-name", name], cwd=files, env=env,
                                          stdout=open(files / f"race-{name}.out", "w"),
                                          stderr=open(files / f"race-{name}.err", "w")))
        time.sleep(0.3)
    ended: dict[int, float] = {}
    deadline = time.monotonic() + 600
    while len(ended) < 2 and time.monotonic() < deadline:
        ended.update({i: time.monotonic() for i, p in enumerate(processes) if i not in ended and p.poll() is not None})
        time.sleep(0.05)
    codes = [p.wait(timeout=60) for p in processes]
    errors = [(files / f"race-{name}.err").read_text() for name in ("first", "second")]
    assert sorted(codes) == [0, 1], errors
    loser, winner = (1, 0) if codes[1] == 1 else (0, 1)
    [line] = errors[loser].strip().splitlines()
    assert f"in use by run '{('first', 'second')[winner]}'" in line, line
    assert ended[loser] < ended[winner]  # refused while the other run still worked
    runs = json.loads(eigenflow("info", "race.zarr", "--json", cwd=files).stdout)["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(("first", "second")[winner], "completed")]
    print(f"the refused run ended {ended[loser] - started[loser]:.2f} s after its start; the other ran "
          f"{ended[winner] - started[winner]:.2f} s")


@pytest.mark.slow  # 19 s; the update flow and its refusals are tested in test_update.py
def test_update_places_a_new_partition_and_refuses_a_changed_one_in_one_line(tmp_path, prefect_api):
    X, _, _ = make_swiss_roll_lifted(1500, random_state=2)
    (tmp_path / "parts").mkdir()
    np.save(tmp_path / "parts" / "a.npy", X[:1200])
    from eigenflow.flows.embed import embed  # the first fit in process: the CLI's own start-up is tested elsewhere

    embed(str(tmp_path / "parts"), str(tmp_path / "grows.zarr"), params={"knn_method": "exact"}, n_workers=1)
    np.save(tmp_path / "parts" / "b.npy", X[1200:])
    r = eigenflow("update", "parts", "grows.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "new rows" in r.stdout and "300" in r.stdout and "beyond the fit's q0.99" in r.stdout and "(ok)" in r.stdout
    r = eigenflow("info", "grows.zarr", cwd=tmp_path)
    assert r.returncode == 0 and "rows 1200..1500; drift:" in r.stdout, r.stdout
    np.save(tmp_path / "parts" / "a.npy", X[:1199])
    r = eigenflow("update", "parts", "grows.zarr", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "partition a.npy of parts changed" in r.stderr
