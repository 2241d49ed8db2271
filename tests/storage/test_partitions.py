"""Growing sources at the storage level: partitions recorded by content at the ingest, new rows found and appended,
every change to what the store holds refused with one line (real files, real zarr arrays; no flow, no cluster)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from eigenflow.storage.append import append_rows, new_rows, pending_append
from eigenflow.storage.arrays import read_labels, read_X
from eigenflow.storage.checksums import verify
from eigenflow.storage.errors import IngestError, StoreFormatError
from eigenflow.storage.ingest import ingest
from eigenflow.storage.partitions import ChangedSourceError
from eigenflow.storage.store import Store

ROWS = np.random.default_rng(0).normal(size=(1500, 4)).astype(np.float32)


@pytest.fixture
def folder(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    np.save(parts / "day-1.npy", ROWS[:1000])
    return parts


def test_the_ingest_records_each_partition_and_an_update_appends_only_new_ones(folder, tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(str(folder), store, chunk_rows=256)
    recorded = Store.open(store).group.attrs["partitions"]
    assert [(p["name"], p["rows"], p["bytes"]) for p in recorded] == [("day-1.npy", 1000, (folder / "day-1.npy")
                                                                        .stat().st_size)]
    assert new_rows(Store.open(store), str(folder)).n_new == 0
    before = Store.open(store).group.attrs["fingerprint"]
    np.save(folder / "day-2.npy", ROWS[1000:])
    found = new_rows(Store.open(store), str(folder))
    assert [p.rsplit("/", 1)[1] for p in found.paths] == ["day-2.npy"] and found.n_new == 500
    done = append_rows(Store.open(store, "r+"), str(folder), found)
    assert done == {"n_before": 1000, "n": 1500, "appended": 500, "partitions": ["day-2.npy"]}
    np.testing.assert_array_equal(read_X(store), ROWS)
    assert verify(store)["bad"] == [] and pending_append(store) is None
    assert Store.open(store).group.attrs["fingerprint"] != before  # the store's token changes with its rows


def test_a_glob_source_and_its_refusals(folder, tmp_path):
    np.save(folder / "day-2.npy", ROWS[1000:])
    (folder / "notes.txt").write_text("not data")
    with pytest.raises(IngestError, match=r"partition .*notes\.txt of source .* has an unknown format"):
        ingest(str(folder), str(tmp_path / "s.zarr"))
    store = str(tmp_path / "g.zarr")
    ingest(str(folder / "day-*.npy"), store)
    assert Store.open(store).group.attrs["n"] == 1500
    np.save(folder / "day-3.npy", np.zeros((10, 5), dtype=np.float32))
    with pytest.raises(IngestError, match=r"different widths \[4, 5\]"):
        ingest(str(folder / "day-*.npy"), str(tmp_path / "h.zarr"))
    with pytest.raises(IngestError, match=r"holds no partition"):
        ingest(str(tmp_path / "nothing-*.npy"), str(tmp_path / "i.zarr"))


def test_changed_and_vanished_partitions_are_refused_naming_them(folder, tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(str(folder), store)
    np.save(folder / "day-1.npy", ROWS[:1000] * 2)  # same size, other bytes
    with pytest.raises(ChangedSourceError, match=r"partition day-1\.npy of .* changed after it was ingested \(16128 -> "
                                                 r"16128 bytes, checksum blake2b:\w+ -> blake2b:\w+\)"):
        new_rows(Store.open(store), str(folder))
    (folder / "day-1.npy").unlink()
    with pytest.raises(ChangedSourceError, match=r"partition day-1\.npy of .* was ingested and has disappeared"):
        new_rows(Store.open(store), str(folder))
    single = str(tmp_path / "single.zarr")
    ingest(str(tmp_path / "s.zarr"), single)  # a store ingested from one source records no partitions
    with pytest.raises(ChangedSourceError, match=r"records no partitions"):
        new_rows(Store.open(single), str(folder))


def test_a_growing_array_gains_rows_at_its_end_only(tmp_path):
    source = str(tmp_path / "grows.zarr")
    z = zarr.open_array(source, mode="w", shape=(1000, 4), chunks=(300, 4), dtype="f4")
    z[:] = ROWS[:1000]
    store = str(tmp_path / "s.zarr")
    ingest(source, store, chunk_rows=256)
    z.resize((1500, 4))
    z[1000:] = ROWS[1000:]
    found = new_rows(Store.open(store), source)
    assert (found.paths, found.start, found.n_new) == ([], 1000, 500)
    append_rows(Store.open(store, "r+"), source, found)
    np.testing.assert_array_equal(read_X(store), ROWS)
    z.resize((1400, 4))
    with pytest.raises(ChangedSourceError, match=r"has 1400 rows; store .* holds 1500 of its rows"):
        new_rows(Store.open(store), source)


def test_an_interrupted_append_is_refused_by_every_reader_and_finished_by_the_next(folder, tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(str(folder), store, chunk_rows=256)
    bad = ROWS[1000:].copy()
    bad[300, 2] = np.inf
    np.save(folder / "day-2.npy", bad)
    with pytest.raises(IngestError, match=r"row 1300, column 2"):
        append_rows(Store.open(store, "r+"), str(folder), new_rows(Store.open(store), str(folder)))
    assert pending_append(store) == {"n": 1000, "n_new": 1500}
    with pytest.raises(StoreFormatError, match=r"an update appending rows 1000\.\.1500 to it was interrupted; run "
                                               r"`eigenflow update` again"):
        Store.open(store)
    np.save(folder / "day-2.npy", ROWS[1000:])
    opened = Store.open(store, "r+", allow_incomplete=True)
    append_rows(opened, str(folder), new_rows(opened, str(folder)))
    np.testing.assert_array_equal(read_X(store), ROWS)
    assert verify(store)["bad"] == [] and pending_append(store) is None


def test_labels_of_new_partitions(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    y = np.arange(1500) % 3
    np.savez(parts / "a.npz", X=ROWS[:1000], y=y[:1000])
    store = str(tmp_path / "s.zarr")
    ingest(str(parts), store)
    np.save(parts / "b.npy", ROWS[1000:])  # no labels: unlabeled rows
    append_rows(Store.open(store, "r+"), str(parts), new_rows(Store.open(store), str(parts)))
    np.testing.assert_array_equal(read_labels(store), np.concatenate([y[:1000], np.full(500, -1)]))
    unlabeled = tmp_path / "plain"
    unlabeled.mkdir()
    np.save(unlabeled / "a.npy", ROWS[:1000])
    plain = str(tmp_path / "p.zarr")
    ingest(str(unlabeled), plain)
    np.savez(unlabeled / "b.npz", X=ROWS[1000:], y=y[1000:])
    with pytest.raises(IngestError, match=r"carry labels and the store's rows have none"):
        append_rows(Store.open(plain, "r+"), str(unlabeled), new_rows(Store.open(plain), str(unlabeled)))
