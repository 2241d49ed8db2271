"""The stage handoff (:mod:`tasks.bodies.stage_handoff`) on a real in-process Dask cluster: arrays kept in a worker's plugin,
taken once, only with the token the store holds, only on that worker; a run's leftovers dropped."""

from __future__ import annotations


import numpy as np
import pytest
from distributed import Client

from tests.helpers import local_cluster
from eigenflow.tasks.bodies.stage_handoff import (PLUGIN_NAME, TOKEN_ATTR, HandoffPlugin, check_written, drop_run, handoff_workers, keep,
                            new_token, take, take_pending)


def _keep(run, token, n):
    return keep(run, token, {"a": np.arange(float(n))})


def _take(ref, attrs):
    arrays = take(ref, attrs)
    return None if arrays is None else arrays["a"].size


def _held(dask_worker):
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    return None if plugin is None else sorted(run for run, *_ in plugin.held.values())


@pytest.fixture()
def client(thread_cluster):
    with Client(thread_cluster) as c:
        c.register_plugin(HandoffPlugin(), name=PLUGIN_NAME)
        yield c
        c.run(drop_run, "r1")
        c.run(drop_run, "r2")


def test_taken_once_with_the_stored_token_on_its_worker(client):
    token = new_token()
    ref = client.submit(_keep, "r1", token, 10, pure=False).result()
    assert set(ref) == {"token", "worker"} and ref["token"] == token
    on = dict(workers=handoff_workers(ref), allow_other_workers=False, pure=False)
    assert client.submit(_take, ref, {TOKEN_ATTR: new_token()}, **on).result() is None  # the store holds another
    assert client.submit(_take, ref, {}, **on).result() is None  # written without a handoff
    assert client.submit(_take, None, {TOKEN_ATTR: token}, **on).result() is None
    other = [w for w in client.scheduler_info()["workers"] if w != ref["worker"]]
    assert client.submit(_take, ref, {TOKEN_ATTR: token}, workers=other, allow_other_workers=False,
                         pure=False).result() is None  # another worker holds nothing of it
    assert client.submit(_take, ref, {TOKEN_ATTR: token}, **on).result() == 10
    assert client.submit(_take, ref, {TOKEN_ATTR: token}, **on).result() is None  # taken already: read the store


def test_drop_run_forgets_only_that_run(client):
    refs = [client.submit(_keep, run, new_token(), 5, pure=False).result() for run in ("r1", "r1", "r2")]
    held = [run for runs in client.run(_held).values() for run in runs]
    assert sorted(held) == ["r1", "r1", "r2"]
    assert sum(client.run(drop_run, "r1").values()) == 2
    assert [run for runs in client.run(_held).values() for run in runs] == ["r2"]
    assert client.submit(_take, refs[2], {TOKEN_ATTR: refs[2]["token"]}, workers=handoff_workers(refs[2]),
                         pure=False).result() == 5


def test_nothing_is_kept_outside_a_worker_or_without_the_plugin():
    assert keep("r1", new_token(), {"a": np.zeros(3)}) is None  # this test process is not a worker
    with local_cluster(n_workers=1, processes=False) as address, Client(address) as c:  # no plugin registered
        assert c.submit(_keep, "r1", new_token(), 3, pure=False).result() is None


def _keep_writing(run, token, path, fail):
    """Keep an array whose "store write" (a file here) runs in the background, slowly, or fails."""
    import time
    from pathlib import Path

    def write():
        time.sleep(0.3)
        if fail:
            raise OSError(f"cannot write {path}")
        Path(path).write_text(token)

    return keep(run, token, {"a": np.arange(4.0)}, write=write)


def _take_pending(ref, path):
    from pathlib import Path

    pending = take_pending(ref)
    if pending is None:
        return None
    arrays, writing = pending
    written_before = Path(path).exists()
    try:
        seconds = writing.join()
    except OSError as exc:
        return {"error": str(exc)}
    check_written(ref, {TOKEN_ATTR: Path(path).read_text()}, path)
    return {"size": arrays["a"].size, "written_before_join": written_before, "seconds": seconds}


def test_a_background_write_is_joined_by_the_taker_and_its_error_raised(client, tmp_path):
    ok, bad = str(tmp_path / "ok"), str(tmp_path / "bad")
    ref = client.submit(_keep_writing, "r1", new_token(), ok, False, pure=False).result()
    on = dict(workers=handoff_workers(ref), allow_other_workers=False, pure=False)
    got = client.submit(_take_pending, ref, ok, **on).result()
    assert got["size"] == 4 and not got["written_before_join"] and got["seconds"] >= 0.3  # taken while writing
    assert client.submit(_take_pending, ref, ok, **on).result() is None  # taken once
    ref = client.submit(_keep_writing, "r1", new_token(), bad, True, pure=False).result()
    assert "cannot write" in client.submit(_take_pending, ref, bad, workers=handoff_workers(ref),
                                           allow_other_workers=False, pure=False).result()["error"]


def test_drop_run_waits_for_a_write_left_running(client, tmp_path):
    path = tmp_path / "late"
    client.submit(_keep_writing, "r1", new_token(), str(path), False, pure=False).result()
    assert sum(client.run(drop_run, "r1").values()) == 1
    assert path.exists()  # finished, not cut off


def test_outside_a_worker_the_write_runs_before_keep_returns(tmp_path):
    path = tmp_path / "now"
    assert _keep_writing("r1", "t0", str(path), False) is None
    assert path.read_text() == "t0"


def test_check_written_refuses_another_token():
    from eigenflow.storage.errors import StoreFormatError

    with pytest.raises(StoreFormatError, match="replaced"):
        check_written({"token": "a"}, {TOKEN_ATTR: "b"}, "graph/weights")


def test_the_eigensolve_computes_w_again_when_its_write_never_landed(tmp_path):
    """The weights stage's worker died before its background write of W ended: the eigensolve, run again on
    another worker, finds no W of the run in the store, computes it again from the stored graph (the same W) and
    writes it; the model equals the one of a run whose W was written."""
    import shutil

    from eigenflow.spectral.datasets import make_swiss_roll_lifted
    from eigenflow.storage import layout
    from eigenflow.storage.graph_io import read_csr
    from eigenflow.storage.ingest import ingest
    from eigenflow.storage.store import Store, delete_node
    import eigenflow.tasks.bodies.laplacian_eigenmaps as le

    X = make_swiss_roll_lifted(600, n_features=5, random_state=0)[0]
    np.save(tmp_path / "X.npy", X)
    ingest(str(tmp_path / "X.npy"), str(tmp_path / "a.zarr"))
    store = Store.open(str(tmp_path / "a.zarr"), "r+")
    params = dict(n_components=2, normalization="symmetric", eigen_solver="auto", on_disconnected="raise",
                  tol=None, random_state=0, weighting="local_scaling", symmetrize="or")
    built = le.build_fit_index(store, n_neighbors=10, knn_method="exact", metric="euclidean", holdout=0.0,
                               random_state=0)
    le.write_knn_graph(store, "r", built, n_neighbors=10)
    le.compute_weights(store, "r", weighting="local_scaling", symmetrize="or")  # outside a worker: written
    W = read_csr(store, layout.WEIGHTS)
    shutil.copytree(tmp_path / "a.zarr", tmp_path / "b.zarr")
    written = le.solve_eigenmaps(store, "r", **params)
    assert written["weights_source"] == "store"
    other = Store.open(str(tmp_path / "b.zarr"), "r+")
    delete_node(other.group, layout.WEIGHTS)  # the write that never landed
    again = le.solve_eigenmaps(other, "r", **params)
    assert again["weights_source"] == "recomputed" and again["eigenvalues"] == written["eigenvalues"]
    assert (read_csr(other, layout.WEIGHTS) != W).nnz == 0 and le.graph_belongs_to(other, "r", "weights")
