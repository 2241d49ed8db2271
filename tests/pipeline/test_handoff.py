"""The stage handoff (:mod:`tasks.stage_handoff`) on a real in-process Dask cluster: arrays kept in a worker's plugin,
taken once, only with the token the store holds, only on that worker; a run's leftovers dropped."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from distributed import Client

from tests.helpers import local_cluster
from eigenflow.tasks.stage_handoff import (PLUGIN_NAME, TOKEN_ATTR, HandoffPlugin, check_written, drop_run, handoff_workers, keep,
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
    import eigenflow.tasks.laplacian_eigenmaps as le

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


def test_fit_stages_begun_before_their_flow_are_released_with_the_run(tmp_path, thread_cluster):
    """Stages begun early (:func:`tasks.early_fit.start_fit_early`) that no stage of the flow took (the run failed
    before them) are published under the run's name until the run's end releases them."""
    from distributed import Client

    from eigenflow.storage.ingest import ingest
    from eigenflow.storage.store import Store
    from eigenflow.tasks.early_fit import EARLY_PREFIX, EARLY_STAGES, start_fit_early
    from eigenflow.tasks.fitting import release_index
    from eigenflow.tasks.registry import check_params

    np.save(tmp_path / "X.npy", np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32))
    ingest(str(tmp_path / "X.npy"), str(tmp_path / "s.zarr"))
    store = Store(tmp_path / "s.zarr", mode="r+")
    params = check_params("laplacian_eigenmaps", {"n_neighbors": 5, "knn_method": "exact"})
    with Client(thread_cluster, set_as_default=True) as client:
        futures = start_fit_early(store, "r1", "laplacian_eigenmaps", params, 0.0, 0, client)
        assert list(futures) == list(EARLY_STAGES)
        published = [n for n in client.list_datasets() if str(n).startswith(f"{EARLY_PREFIX}r1-")]
        assert len(published) == len(EARLY_STAGES)
        futures["eigensolve"].result()  # the chain ran to its end: the model of r1 is written
        release_index("token", "r1")
        assert not [n for n in client.list_datasets() if str(n).startswith(EARLY_PREFIX)]
        assert start_fit_early(store, "r2", "lfda", {}, 0.0, 0, client) is None  # fitted otherwise: nothing begun
    from eigenflow.storage.models import model_complete

    assert model_complete(store, "r1")


def test_prefect_starts_once_the_stages_before_the_eigensolve_have_ended(tmp_path, thread_cluster):
    """The CLI's work before its flow (:func:`flows._run_prologue.fit_before_flow`): ingest, the run's lock, the
    fit stages begun on the cluster; Prefect's server is begun only once the kNN graph and the weights are done
    (its start then takes the core the eigensolve leaves free), and the lock is released at the block's end."""
    from distributed import Client

    from eigenflow.flows._run_prologue import fit_before_flow, planned_fit_early
    from eigenflow.flows.cluster import ReadyClient
    from eigenflow.storage.lock import read_lock
    from eigenflow.tasks.early_fit import EARLY_PREFIX
    from eigenflow.tasks.fitting import release_index
    from eigenflow.tasks.registry import check_params

    np.save(tmp_path / "X.npy", np.random.default_rng(0).normal(size=(2000, 8)).astype(np.float32))
    store = str(tmp_path / "s.zarr")
    params = check_params("laplacian_eigenmaps", {"knn_method": "exact"})

    class Recorder:  # stands for flows._prefect_start.LaterStart, not begun (a large run's)
        seen: dict | None = None
        begun = False
        beside_stage: bool | None = None

        def begin(self, *, beside_stage: bool = False) -> None:
            self.beside_stage = beside_stage
            client = Client.current()
            self.seen = {str(n)[len(EARLY_PREFIX) + 3:].rsplit("-", 1)[0]: client.get_dataset(n).status
                         for n in client.list_datasets() if str(n).startswith(f"{EARLY_PREFIX}r1-")}

    started = Recorder()
    with Client(thread_cluster, set_as_default=True) as client, \
            planned_fit_early("laplacian_eigenmaps", params, False) as early:
        with fit_before_flow(ReadyClient(client), early, started, str(tmp_path / "X.npy"), store, run="r1",
                             labels=None, chunk_rows=None, overwrite=False, use_rep=None, labels_obs=None,
                             threads=1, method="laplacian_eigenmaps", params=params, holdout=0.0, random_state=0,
                             sharded=False) as ingested:
            assert ingested.ingested["n"] == 2000 and read_lock(store)["run"] == "r1"
        assert read_lock(store) is None
        assert started.seen is not None
        assert {stage: started.seen[stage] for stage in ("knn-index", "knn", "weights")} == \
            {"knn-index": "finished", "knn": "finished", "weights": "finished"}
        assert started.beside_stage is True  # begun beside the running eigensolve: at a lower priority
        release_index("token", "r1")
        already = Recorder()  # a small run's server, begun at the start of the command: not waited for, not begun again
        already.begun = True
        with planned_fit_early("laplacian_eigenmaps", params, False) as early, \
                fit_before_flow(ReadyClient(client), early, already, str(tmp_path / "X.npy"), str(tmp_path / "t.zarr"),
                                run="r2", labels=None, chunk_rows=None, overwrite=False, use_rep=None,
                                labels_obs=None, threads=1, method="laplacian_eigenmaps", params=params, holdout=0.0,
                                random_state=0, sharded=False):
            pass
        assert already.seen is None
        release_index("token", "r2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_background_write_runs_at_a_lower_priority(tmp_path):
    """The write's thread has the nice value WRITE_NICENESS (read from /proc for that thread), the caller's
    thread keeps its own."""
    import os
    import threading

    from eigenflow.tasks.stage_handoff import WRITE_NICENESS, BackgroundWrite
    from tests.helpers import nice_of_thread

    seen: list[int] = []
    BackgroundWrite(lambda: seen.append(nice_of_thread(threading.get_native_id())), "nice").join()
    assert seen == [max(os.getpriority(os.PRIO_PROCESS, 0), WRITE_NICENESS)]
    assert nice_of_thread(threading.get_native_id()) == os.getpriority(os.PRIO_PROCESS, 0)
