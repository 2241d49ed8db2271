"""Growing sources end to end: real partition files and a real zarr array appended between runs of the ``embed`` and
``update`` flows on a LocalCluster.

References: :class:`spectral.embedding.eigenmaps.LaplacianEigenmaps` fitted on the first partition, its
``transform`` for the rows appended later; the store's X against the partitions' rows.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.spectral.embedding.eigenmaps import LaplacianEigenmaps
from eigenflow.storage.arrays import read_X
from eigenflow.storage.checksums import verify
from eigenflow.storage.embedding_io import read_embedding
from eigenflow.storage.errors import IngestError, StoreFormatError
from eigenflow.storage.manifest import list_runs, read_manifest
from eigenflow.storage.partitions import ChangedSourceError
from eigenflow.storage.store import Store
from eigenflow.tasks.bodies.laplacian_eigenmaps import model_index_name, store_index_prefix

PARAMS = dict(n_components=2, n_neighbors=12, knn_method="exact")


@pytest.fixture(scope="module")
def rows():
    X, _, _ = make_swiss_roll_lifted(3600, random_state=5)
    return X.astype(np.float32)


@pytest.fixture(scope="module")
def grown(prefect_api, cluster, rows, tmp_path_factory):
    """A folder of partitions: p0 (2500 rows) embedded, then p1 (500 rows, same roll) and p2 (600 rows moved far
    from the roll) each placed by an update. ``(folder, store, embed summary, [update summaries])``."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update

    d = tmp_path_factory.mktemp("growing")
    parts = d / "parts"
    parts.mkdir()
    np.save(parts / "p0.npy", rows[:2500])
    store = str(d / "store.zarr")
    fitted = embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    updates = []
    np.save(parts / "p1.npy", rows[2500:3000])
    updates.append(update(str(parts), store, scheduler=cluster))
    np.save(parts / "p2.npy", rows[3000:] + np.float32(50.0))
    updates.append(update(str(parts), store, scheduler=cluster, refit="never"))
    return parts, store, fitted, updates


def test_updates_append_only_the_new_partitions_and_map_them_with_the_model(grown, rows):
    parts, store, fitted, (first, second) = grown
    np.testing.assert_array_equal(read_X(store), np.vstack([rows[:3000], rows[3000:] + np.float32(50.0)]))
    assert first["results"]["rows"] == [2500, 3000] and second["results"]["rows"] == [3000, 3600]
    assert first["results"]["model_run"] == second["results"]["model_run"] == fitted["run"]
    assert first["results"]["refit"] == {"decided": False, "reason": "refit=auto: 500 rows mapped since the last fit, "
                                         "below 25% of its 2500 fitted rows, and no drift"}
    assert second["results"]["refit"]["decided"] is False  # drifted, but refit="never"
    assert [s for s in first["stages"]] == ["cluster", "append", "map-points", "drift"]
    reference = LaplacianEigenmaps(random_state=0, **PARAMS).fit(rows[:2500].astype(np.float64))
    expected = reference.transform(rows[2500:3000].astype(np.float64))
    got = read_embedding(store, first["run"], 2500, 3000)
    for j in range(expected.shape[1]):  # each column up to its sign
        sign = np.sign(got[:, j] @ expected[:, j])
        np.testing.assert_allclose(got[:, j], sign * expected[:, j], atol=2e-4 * np.abs(expected[:, j]).max())


def test_drift_flags_a_batch_from_outside_the_fit_and_not_one_from_it(grown):
    _, store, _, (same, moved) = grown
    a, b = same["results"]["drift"], moved["results"]["drift"]
    assert not a["drifted"] and a["share_beyond"] < 0.05 and 0.8 < a["median_ratio"] < 1.25
    assert b["drifted"] and b["share_beyond"] > 0.9 and b["median_ratio"] > 3
    assert b["preservation"] < a["preservation"]  # the map keeps the neighbourhoods of the moved rows less well
    from eigenflow.storage.info import info

    shown = {r["run_id"]: r for r in info(store)["runs"]}
    assert shown[moved["run"]]["drift"]["drifted"] and shown[moved["run"]]["rows"] == [3000, 3600]


def test_export_gives_every_row_once_with_the_run_that_placed_it(grown, tmp_path):
    from eigenflow.storage.export import export_output

    _, store, fitted, (first, second) = grown
    done = export_output(store, tmp_path / "all.parquet")
    assert done["shape"] == [3600, 2] and [u["rows"] for u in done["updates"]] == [[2500, 3000], [3000, 3600]]
    table = pq.read_table(tmp_path / "all.parquet").to_pandas()
    assert table["run"].astype(str).tolist() == [fitted["run"]] * 2500 + [first["run"]] * 500 + [second["run"]] * 600
    assert table["placement"].tolist() == ["fitted"] * 2500 + ["mapped"] * 1100
    np.testing.assert_array_equal(table[["c0", "c1"]].to_numpy()[2500:3000],
                                  read_embedding(store, first["run"], 2500, 3000))
    export_output(store, tmp_path / "all.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "all.npy"), table[["c0", "c1"]].to_numpy())
    assert verify(store)["bad"] == []


def test_a_changed_or_vanished_partition_is_refused_before_any_work(grown, tmp_path):
    from eigenflow.flows.update import update

    parts, store, *_ = grown
    runs = list_runs(store)
    original = np.load(parts / "p1.npy")
    np.save(parts / "p1.npy", original[:-1])
    with pytest.raises(ChangedSourceError, match=r"partition p1\.npy of .* changed after it was ingested"):
        update(str(parts), store)
    (parts / "p1.npy").unlink()
    with pytest.raises(ChangedSourceError, match=r"partition p1\.npy of .* was ingested and has disappeared"):
        update(str(parts), store)
    np.save(parts / "p1.npy", original)
    assert list_runs(store) == runs and Store.open(store).group.attrs["n"] == 3600  # nothing was touched


def test_an_interrupted_append_is_refused_elsewhere_and_finished_by_the_next_update(prefect_api, cluster, rows,
                                                                                      tmp_path):
    """A partition whose rows turn bad halfway fails the append after some rows were written: every other command
    refuses the store with one line, and the next update (the partition repaired) places every row once."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update
    from eigenflow.storage.info import info

    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", rows[:2500])
    store = str(tmp_path / "s.zarr")
    embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    bad = rows[2500:3600].copy()
    bad[900] = np.nan
    np.save(parts / "b.npy", bad)
    with pytest.raises(IngestError, match=r"row 3400"):
        update(str(parts), store, scheduler=cluster)
    with pytest.raises(StoreFormatError, match=r"an update appending rows 2500\.\.3600 to it was interrupted"):
        Store.open(store)
    assert info(store)["problems"]
    np.save(parts / "b.npy", rows[2500:3600])
    done = update(str(parts), store, scheduler=cluster)
    assert done["results"]["rows"] == [2500, 3600]
    np.testing.assert_array_equal(read_X(store), rows[:3600])
    assert verify(store)["bad"] == []
    partitions = json.loads(json.dumps(Store.open(store).group.attrs["partitions"]))
    assert [p["name"] for p in partitions] == ["a.npy", "b.npy"] and [p["rows"] for p in partitions] == [2500, 1100]


def test_a_growing_zarr_array_gains_rows_and_may_not_change_them(prefect_api, cluster, rows, tmp_path):
    import zarr

    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update

    source = str(tmp_path / "grows.zarr")
    z = zarr.open_array(source, mode="w", shape=(2500, rows.shape[1]), chunks=(700, rows.shape[1]), dtype="f4")
    z[:] = rows[:2500]
    store = str(tmp_path / "s.zarr")
    embed(source, store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    z.resize((3000, rows.shape[1]))
    z[2500:] = rows[2500:3000]
    assert update(source, store, scheduler=cluster)["results"]["rows"] == [2500, 3000]
    np.testing.assert_array_equal(read_X(store), rows[:3000])
    z[7] = 0.0
    with pytest.raises(ChangedSourceError, match=r"the first 3000 rows of source .* are not the rows"):
        update(source, store, scheduler=cluster)


def test_a_refit_by_the_policy_keeps_the_old_rows_in_place(prefect_api, cluster, rows, tmp_path):
    """600 new rows on a fit of 2000 reach the default 25 %: the update refits every row, aligned to the previous
    results; the old rows move far less than without the alignment, and the refit's model places later rows in
    the aligned frame."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update
    from eigenflow.storage.export import export_output
    from eigenflow.storage.results_table import table_segments

    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", rows[:2000])
    store = str(tmp_path / "s.zarr")
    first = embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    export_output(store, tmp_path / "before.npy")
    np.save(parts / "b.npy", rows[2000:2400])
    assert not update(str(parts), store, scheduler=cluster)["results"]["refit"]["decided"]  # 400 < 500 rows
    np.save(parts / "c.npy", rows[2400:2600])
    done = update(str(parts), store, scheduler=cluster)["results"]["refit"]
    assert done["decided"] and done["reason"] == "600 rows mapped since the last fit reach 25% of its 2000 fitted rows"
    aligned = done["alignment"]
    assert aligned["aligned"] and aligned["previous"] == first["run"] and aligned["n_shared"] == 2000  # the fit's rows
    assert aligned["residual"] < 0.5 * aligned["unaligned_residual"]
    assert done["eigensolve"]["warm_start"] == "used"  # LOBPCG started from the previous results
    assert [s.run for s in table_segments(store)] == [done["run"]]  # the refit is the table now, every row fitted
    before, after = np.load(tmp_path / "before.npy"), export_output(store, tmp_path / "after.npy")
    moved = np.linalg.norm(np.load(tmp_path / "after.npy")[:2000] - before, axis=1)
    spread = np.sqrt((before ** 2).sum(axis=1).mean())
    assert np.median(moved) / spread < 0.5 * aligned["unaligned_residual"]  # the alignment's own figure, measured
    np.save(parts / "d.npy", rows[2000:2010])  # rows like ones the refit fitted: mapped beside them
    placed = update(str(parts), store, scheduler=cluster, refit="never")
    mapped = read_embedding(store, placed["run"], 2600, 2610)
    np.testing.assert_allclose(mapped, read_embedding(store, done["run"], 2000, 2010), atol=1e-5)
    # the refit's kNN index stayed on the cluster for the next update, in place of the first fit's: one per store
    assert map_points_index(store, placed["run"]) == "kept"
    assert kept_indexes(cluster, store) == [model_index_name(Store.open(store), done["run"],
                                                             read_manifest(store, done["run"]).started)]
    from eigenflow.storage.results_table import prune

    kept = np.load(tmp_path / "after.npy")
    removed = prune(store, keep=1)  # the first fit and its two updates; the refit and its update stay
    assert removed[0] == first["run"] and len(removed) == 3 and done["run"] not in removed
    assert set(list_runs(store)) == {done["run"], placed["run"]}
    export_output(store, tmp_path / "pruned.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "pruned.npy")[:2600], kept)
    assert verify(store)["bad"] == []


def map_points_index(store: str, run: str) -> str:
    """Where the ``map-points`` stage of the update ``run`` took the model's kNN index from."""
    return {s.name: s.info for s in read_manifest(store, run).stages}["map-points"]["model_index"]


def kept_indexes(scheduler: str, store: str) -> list[str]:
    """The names of the model indexes of ``store`` published on the cluster of ``scheduler``."""
    from distributed import Client

    prefix = store_index_prefix(Store.open(store))
    with Client(scheduler, set_as_default=False) as client:
        return sorted(name for name in client.list_datasets() if str(name).startswith(prefix))


def test_updates_on_a_lasting_cluster_query_the_kept_index_and_place_rows_as_a_rebuilt_one(
        prefect_api, cluster, rows, tmp_path):
    """On a cluster given by its scheduler (it outlives the runs) the fit's kNN index stays for the updates; a copy of
    the store, whose index the cluster does not hold, builds it in the first update and keeps it for the next; both
    place the same rows at the same coordinates."""
    import shutil

    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update

    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", rows[:2000])
    store, copy = str(tmp_path / "s.zarr"), str(tmp_path / "copy.zarr")
    embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    shutil.copytree(store, copy)
    np.save(parts / "b.npy", rows[2000:2100])
    kept, built = (update(str(parts), s, scheduler=cluster, refit="never")["run"] for s in (store, copy))
    assert (map_points_index(store, kept), map_points_index(copy, built)) == ("kept", "built")
    np.testing.assert_array_equal(read_embedding(copy, built, 2000, 2100), read_embedding(store, kept, 2000, 2100))
    np.save(parts / "c.npy", rows[2100:2200])
    again = update(str(parts), copy, scheduler=cluster, refit="never")["run"]
    assert map_points_index(copy, again) == "kept" and len(kept_indexes(cluster, copy)) == 1


def test_the_index_is_kept_by_default_only_on_a_cluster_that_outlives_the_run(monkeypatch):
    from eigenflow.flows.cluster import SCHEDULER_ENV, keeps_index

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert not keeps_index(None, None)  # the run's own local cluster
    assert keeps_index(None, "tcp://127.0.0.1:8786") and not keeps_index(False, "tcp://127.0.0.1:8786")
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:8786")
    assert keeps_index(None, None) and keeps_index(True, None)


def test_a_run_told_not_to_keep_the_index_leaves_none_on_the_cluster(prefect_api, cluster, rows, tmp_path):
    """``keep_index=False`` (what the CLI passes for the cluster it starts and stops itself): the fit's index is
    dropped at the end of the run, and an update builds one for itself only."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update

    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", rows[:2000])
    store = str(tmp_path / "s.zarr")
    embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster, keep_index=False)
    assert kept_indexes(cluster, store) == []
    np.save(parts / "b.npy", rows[2000:2100])
    done = update(str(parts), store, scheduler=cluster, refit="never", keep_index=False)["run"]
    assert map_points_index(store, done) == "rebuilt" and kept_indexes(cluster, store) == []


def test_a_batch_from_a_part_the_fit_never_saw_triggers_the_refit(prefect_api, cluster, tmp_path):
    """The first fit holds the inner two thirds of the roll; a batch of 300 rows (10 % of the fitted rows: under the
    share) from its outer end drifts, and the policy refits every row."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update

    X, _, coords = make_swiss_roll_lifted(4000, random_state=6)
    t = coords[:, 0]
    inner, outer = X[t < np.quantile(t, 0.75)][:3000], X[t >= np.quantile(t, 0.75)][:300]
    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", inner)
    store = str(tmp_path / "s.zarr")
    embed(str(parts), store, params=PARAMS, chunk_rows=512, random_state=0, scheduler=cluster)
    np.save(parts / "b.npy", outer)
    done = update(str(parts), store, scheduler=cluster)["results"]
    assert done["drift"]["drifted"] and done["refit"]["decided"]
    assert done["refit"]["reason"] == "the new rows drifted from the fitted rows"
    aligned = done["refit"]["alignment"]
    assert aligned["aligned"] and aligned["n_shared"] == 3000  # fitted on the rows the fit placed, not the drifted ones
    assert aligned["residual"] < aligned["unaligned_residual"]


def test_the_anndata_export_gives_every_cell_its_run_and_placement(grown, tmp_path):
    import anndata

    from eigenflow.storage.anndata_export import export_to_anndata

    _, store, fitted, (first, second) = grown
    anndata.AnnData(X=np.zeros((3600, 1), dtype=np.float32)).write_h5ad(tmp_path / "cells.h5ad")
    done = export_to_anndata(store, str(tmp_path / "cells.h5ad"))
    assert done["run"] == fitted["run"]
    cells = anndata.read_h5ad(tmp_path / "cells.h5ad")
    assert cells.obsm["X_eigenflow"].shape == (3600, 2)
    np.testing.assert_array_equal(cells.obsm["X_eigenflow"][3000:], read_embedding(store, second["run"], 3000, 3600))
    assert cells.obs["X_eigenflow_run"].astype(str).value_counts().to_dict() == {
        fitted["run"]: 2500, first["run"]: 500, second["run"]: 600}
    assert cells.obs["X_eigenflow_placement"].astype(str).tolist() == ["fitted"] * 2500 + ["mapped"] * 1100
    assert cells.uns["X_eigenflow"]["update_rows"].tolist() == [[2500, 3000], [3000, 3600]]
    assert list(cells.uns["X_eigenflow"]["update_runs"]) == [first["run"], second["run"]]


@pytest.mark.slow
@pytest.mark.parametrize("kill_in", ["append", "map-points"])
def test_an_update_killed_with_sigkill_resumes_with_every_row_once(prefect_server, cluster, tmp_path, kill_in):
    """``eigenflow update`` killed (SIGKILL to its whole process group) while it appends the new rows, or while it
    maps them; the same command again with the same ``--run-name``: every source row has exactly one result row,
    the store's chunks verify, and the new rows' coordinates are those of an update never killed."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from eigenflow.flows.embed import embed
    from eigenflow.storage.export import export_output

    api_url, home = prefect_server
    X, _, _ = make_swiss_roll_lifted(160_000, random_state=8)
    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "a.npy", X[:40_000])
    store = tmp_path / "s.zarr"
    embed(str(parts), str(store), params=PARAMS, chunk_rows=4096, random_state=0, scheduler=cluster)
    np.save(parts / "b.npy", X[40_000:])
    script = Path(sys.executable).with_name("eigenflow")
    command = [str(script), "update", "parts", str(store), "--run-name", "nightly", "--workers", "1", "--refit",
               "never"]
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PREFECT_LOGGING_LEVEL": "CRITICAL"}

    def reached() -> bool:
        if kill_in == "append":
            return '"appending"' in (store / "zarr.json").read_text()
        try:
            manifest = json.loads((store / "runs" / "nightly.json").read_text())
        except (FileNotFoundError, ValueError):
            return False
        return any(s["name"] == "map-points" and s["status"] == "running" for s in manifest["stages"]) and \
            any((store / "checksums").glob("embeddings__nightly/*.json"))

    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 600
        while not reached():
            assert proc.poll() is None, f"the update ended before the kill point: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    done = export_output(str(store), tmp_path / "all.npy")
    assert done["shape"][0] == 160_000 and [u["rows"] for u in done["updates"]] == [[40_000, 160_000]]
    np.testing.assert_array_equal(read_X(str(store)), X)
    assert verify(str(store))["bad"] == []
    reference = tmp_path / "reference.zarr"
    np.save(tmp_path / "b-only.npy", X[40_000:])
    from eigenflow.flows.extend import extend

    extend(str(store), str(tmp_path / "b-only.npy"), str(reference), run=done["run"], scheduler=cluster)
    from eigenflow.storage.export import latest_run_with

    np.testing.assert_allclose(np.load(tmp_path / "all.npy")[40_000:],
                               read_embedding(str(reference), latest_run_with(str(reference), "embedding")),
                               atol=1e-5)


def test_the_refit_policy():
    from eigenflow.tasks.update import refit_reason

    assert refit_reason("auto", share=0.25, n_fit=1000, n_mapped=249, drifted=False) is None
    assert refit_reason("auto", share=0.25, n_fit=1000, n_mapped=250, drifted=False) == \
        "250 rows mapped since the last fit reach 25% of its 1000 fitted rows"
    assert refit_reason("auto", share=0.25, n_fit=1000, n_mapped=10, drifted=True) == \
        "the new rows drifted from the fitted rows"
    assert refit_reason("never", share=0.25, n_fit=1000, n_mapped=900, drifted=True) is None
    assert refit_reason("always", share=0.25, n_fit=1000, n_mapped=0, drifted=False) == "refit=always"


@pytest.mark.slow
def test_a_classifier_labels_the_new_rows_and_the_table_gives_every_label(prefect_api, cluster, tmp_path):
    """TSK fitted on 320 USPS digits whose partition carries half of their labels; a new partition of unlabeled digits is
    placed by an update: its predicted labels are in the table next to the fit's, and they match the hidden digits
    as the fit's own predictions do."""
    from eigenflow.flows.embed import embed
    from eigenflow.flows.update import update
    from eigenflow.storage.export import export_output
    from tests.helpers import usps_digits

    X, y, hidden = usps_digits()
    n = int(0.8 * len(X))
    parts = tmp_path / "parts"
    parts.mkdir()
    np.savez(parts / "a.npz", X=X[:n], y=hidden[:n])
    store = str(tmp_path / "s.zarr")
    fitted = embed(str(parts), store, method="tsk", chunk_rows=128, random_state=0, scheduler=cluster)
    np.savez(parts / "b.npz", X=X[n:], y=np.full(len(X) - n, -1))
    done = update(str(parts), store, scheduler=cluster, refit="never")
    assert done["results"]["labels"] == f"outputs/{done['run']}/labels"
    assert map_points_index(store, done["run"]) == "rebuilt" and kept_indexes(cluster, store) == []  # TSK's own
    export_output(store, tmp_path / "labels.npy", output="labels")
    labels = np.load(tmp_path / "labels.npy")
    assert labels.shape == (len(X),)
    fit_accuracy = np.mean(labels[:n][hidden[:n] == -1] == y[:n][hidden[:n] == -1])
    new_accuracy = np.mean(labels[n:] == y[n:])
    print(f"TSK label accuracy: unlabeled fit rows {fit_accuracy:.3f}, rows placed by the update {new_accuracy:.3f}")
    assert new_accuracy > fit_accuracy - 0.05 and new_accuracy > 0.85
    assert done["results"]["model_run"] == fitted["run"]
