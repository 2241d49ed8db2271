"""Run manifests that cannot be read (``runs/<run>.json`` cut short, emptied, rewritten): ``info`` shows the run as
``damaged`` and lists the others, the latest-run lookups of ``export`` / ``extend`` skip it, and ``embed`` refuses
to resume it unless told to start it again (``overwrite_run`` / ``--overwrite-run``), which drops what it wrote.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from eigenflow import storage
from eigenflow.storage.embedding_io import read_embedding, write_embedding, write_point_array
from eigenflow.storage.errors import DamagedManifestError, DamagedManifestWarning, StoreFormatError

N, D, CHUNK = 60, 3, 16

DAMAGES = {
    "cut in half": (lambda raw: raw[: len(raw) // 2], "not valid JSON ("),
    "emptied": (lambda raw: b"", "empty file"),
    "not a manifest": (lambda raw: b"[1, 2]", "wrong content ("),
    "not text": (lambda raw: b"{\"run_id\": \"\xc3\x28\"}", "not UTF-8 text"),
}


@pytest.fixture
def store(tmp_path):
    storage.ingest(np.random.default_rng(0).normal(size=(N, D)), tmp_path / "s.zarr", chunk_rows=CHUNK)
    return tmp_path / "s.zarr"


def _completed_run(store, run: str, day: int, *, model: bool = True) -> np.ndarray:
    """A completed embed run started on day ``day`` of 2030 with an embedding (and a model): its embedding."""
    Z = np.random.default_rng(day).normal(size=(N, 2))
    manifest = storage.RunManifest.start(run, flow="embed", parameters={"n_neighbors": 5}, seed=0)
    manifest.started = f"2030-01-{day:02d}T00:00:00.000+00:00"
    with storage.run_context(store, manifest):
        write_embedding(store, run, Z)
        if model:
            storage.write_model(store, run, {"eigenvalues": np.ones(2)}, {"method": "laplacian_eigenmaps"})
    return Z


def _damage(store, run: str, how: str) -> str:
    path = store / "runs" / f"{run}.json"
    path.write_bytes(DAMAGES[how][0](path.read_bytes()))
    return str(path)


@pytest.fixture
def three_runs(store):
    """Runs old (day 1), good (day 2) and newest (day 3, its manifest damaged by the test)."""
    _completed_run(store, "old", 1)
    Z = _completed_run(store, "good", 2)
    _completed_run(store, "newest", 3)
    return store, Z


@pytest.mark.parametrize("how", list(DAMAGES))
def test_info_shows_a_damaged_manifest_and_lists_the_other_runs(three_runs, how):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app

    store, _ = three_runs
    path = _damage(store, "newest", how)
    with pytest.raises(DamagedManifestError, match="is not a valid run manifest") as raised:
        storage.read_manifest(store, "newest")
    assert raised.value.path == path
    runs = {r["run_id"]: r for r in storage.info(store)["runs"]}
    assert [runs[r]["status"] for r in ("good", "newest", "old")] == ["completed", "damaged", "completed"]
    assert runs["newest"]["error"].startswith(DAMAGES[how][1]) and "\n" not in runs["newest"]["error"]
    result = CliRunner().invoke(app, ["info", str(store), "--json"])
    assert result.exit_code == 0, result.output
    listed = {r["run_id"]: r["status"] for r in json.loads(result.stdout)["runs"]}
    assert listed == {"good": "completed", "newest": "damaged", "old": "completed"}
    result = CliRunner().invoke(app, ["info", str(store)])
    assert result.exit_code == 0 and "damaged" in result.stdout, result.output


def test_export_without_run_skips_a_damaged_manifest(three_runs, tmp_path):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app
    from eigenflow.storage.export import export_output

    store, Z = three_runs
    path = _damage(store, "newest", "cut in half")
    with pytest.warns(DamagedManifestWarning, match=path):
        out = export_output(store, tmp_path / "z.npy")
    assert out["run"] == "good"
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), Z.astype(np.float32))
    with pytest.warns(DamagedManifestWarning):
        result = CliRunner().invoke(app, ["export", str(store), str(tmp_path / "z.parquet")])
    assert result.exit_code == 0 and "of run good" in result.stdout, result.output


def test_extend_model_lookup_skips_a_damaged_manifest(three_runs):
    from eigenflow.tasks.checks import stored_model

    store, _ = three_runs
    path = _damage(store, "newest", "emptied")
    with pytest.warns(DamagedManifestWarning, match=path):
        assert stored_model(str(store), None).run == "good"


def test_run_identity_refuses_an_unreadable_manifest_unless_overwritten(three_runs):
    from eigenflow.tasks.resume import check_run_identity

    store, _ = three_runs
    path = _damage(store, "newest", "cut in half")
    with pytest.raises(StoreFormatError) as raised:
        check_run_identity(str(store), "newest", {"n_neighbors": 5})
    message = str(raised.value)
    assert path in message and "--overwrite-run" in message and "\n" not in message
    check_run_identity(str(store), "newest", {"n_neighbors": 5}, overwrite_run=True)
    check_run_identity(str(store), "good", {"n_neighbors": 5})  # a readable manifest: same parameters, resumed


def test_drop_run_outputs_removes_what_the_run_wrote_and_nothing_else(store):
    from eigenflow.storage.checksums import record_chunk, verify
    from eigenflow.storage.reports import write_report_file
    from eigenflow.storage.run_outputs import drop_run_outputs

    for run in ("a", "b"):
        Z = _completed_run(store, run, 1 if run == "a" else 2)
        write_point_array(store, storage.layout.output_path(run, "labels"), np.ones(N, dtype=np.int32))
        for start in range(0, N, CHUNK):
            record_chunk(store, storage.layout.embedding_path(run), start)
            record_chunk(store, storage.layout.output_path(run, "labels"), start)
        write_report_file(store, run, "plot.png", b"png")
    assert drop_run_outputs(store, "a") == ["models/a", "embeddings/a", "outputs/a", "reports/a"]
    assert storage.list_models(store) == ["b"] and not (store / "reports" / "a").exists()
    assert set(verify(store)["arrays"]) == {"X", "embeddings/b", "outputs/b/labels"}
    assert verify(store)["bad"] == []
    np.testing.assert_array_equal(read_embedding(store, "b"), Z.astype(np.float32))
    assert storage.read_manifest(store, "a").status == "completed"  # the manifest is the caller's to replace
    assert drop_run_outputs(store, "a") == []


def test_embed_over_an_unreadable_manifest_refuses_then_starts_again(tmp_path, prefect_api, thread_cluster):
    from typer.testing import CliRunner

    from eigenflow.flows.cli import app
    from eigenflow.flows.embed import embed

    np.save(tmp_path / "X.npy", np.random.default_rng(1).normal(size=(200, 4)))
    store = str(tmp_path / "s.zarr")
    common = dict(random_state=0, scheduler=thread_cluster, run_name="r1", chunk_rows=64)
    first = embed(str(tmp_path / "X.npy"), store, params={"knn_method": "exact", "n_neighbors": 5}, **common)
    assert first["status"] == "completed"
    path = tmp_path / "s.zarr" / "runs" / "r1.json"
    cut = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(cut)

    result = CliRunner().invoke(app, ["embed", str(tmp_path / "X.npy"), store, "--run-name", "r1",
                                      "-p", "knn_method=exact", "-p", "n_neighbors=5", "--workers", "1"])
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert str(path) in errors[0] and "--overwrite-run" in errors[0]
    assert path.read_bytes() == cut  # refused before anything was written

    again = embed(str(tmp_path / "X.npy"), store, params={"knn_method": "exact", "n_neighbors": 8},
                  overwrite_run=True, **common)
    manifest = storage.read_manifest(store, "r1")
    assert again["status"] == manifest.status == "completed" and manifest.parameters["n_neighbors"] == 8
    points = {s.name: s.info for s in manifest.stages}["embed-points"]
    assert points["n_chunks_reused"] == 0  # no chunk of the replaced run was kept
