"""The NN-descent warm-up of a run: when a flow plans it before the ingest (:mod:`flows._warm_up`) and how a worker
begins it in a thread and a task collects it (:mod:`tasks._warm_up`; ``warm_nndescent`` replaced by a stand-in)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import eigenflow.tasks._warm_up as warm_up
from eigenflow.flows._warm_up import planned_dtypes
from eigenflow.spectral.neighbours.index import EXACT_MAX_SAMPLES
from eigenflow.storage.ingest import ingest


def test_finish_collects_the_thread_that_start_began(monkeypatch):
    calls, gate = [], threading.Event()

    def stand_in(dtypes):
        calls.append(dtypes)
        assert gate.wait(10)

    monkeypatch.setattr(warm_up, "warm_nndescent", stand_in)
    warm_up.start_warm_up(("float32",))
    warm_up.start_warm_up(("float32",))  # begun once per process and dtypes
    gate.set()
    assert warm_up.finish_warm_up(("float32",)) >= 0.0
    assert calls == [("float32",)]
    # without a thread begun here (a restarted worker), the task warms up itself
    assert warm_up.finish_warm_up(("float64",)) >= 0.0 and calls == [("float32",), ("float64",)]


def test_a_failed_warm_up_fails_the_task_that_collects_it(monkeypatch):
    def stand_in(dtypes):
        raise RuntimeError("no kernels")

    monkeypatch.setattr(warm_up, "warm_nndescent", stand_in)
    warm_up.start_warm_up(("float32",))
    with pytest.raises(RuntimeError, match="no kernels"):
        warm_up.finish_warm_up(("float32",))


def test_the_warm_up_is_planned_from_the_source_header(tmp_path):
    """Before the ingest: NN-descent asked for, or 'auto' with enough fit rows by the header, or the sharded path;
    otherwise (exact, too few rows, a CSV whose length is unknown) the run decides after its ingest."""
    big, small = tmp_path / "big.npy", tmp_path / "small.npy"
    np.lib.format.open_memmap(big, mode="w+", dtype=np.float32, shape=(EXACT_MAX_SAMPLES, 2)).flush()
    np.save(small, np.zeros((100, 2), np.float32))
    (tmp_path / "small.csv").write_text("a,b\n1,2\n")
    auto = {"n_neighbors": 15, "knn_method": "auto"}
    store = str(tmp_path / "s.zarr")
    assert planned_dtypes(str(big), store, auto, 0.0, None, False) == ("float32",)
    assert planned_dtypes(str(big), store, auto, 0.5, None, False) == ()  # half the rows are held out
    assert planned_dtypes(str(big), store, {**auto, "knn_method": "exact"}, 0.0, None, False) == ()
    assert planned_dtypes(str(small), store, auto, 0.0, None, False) == ()
    assert planned_dtypes(str(small), store, {**auto, "knn_method": "nndescent"}, 0.0, None, False) == ("float32",)
    assert planned_dtypes(str(tmp_path / "small.csv"), store, auto, 0.0, None, False) == ()
    assert planned_dtypes(str(small), store, auto, 0.0, True, False) == ("float32",)
    wide = tmp_path / "wide.npy"  # fewer rows than EXACT_MAX_SAMPLES, but n * d above EXACT_MAX_CELLS
    np.lib.format.open_memmap(wide, mode="w+", dtype=np.float32, shape=(300_000, 128)).flush()
    assert planned_dtypes(str(wide), store, auto, 0.0, None, False) == ("float32",)
    # an existing store gives its own dtype and size
    ingest(np.zeros((100, 2)), store, dtype="float64")
    assert planned_dtypes(store, store, {**auto, "knn_method": "nndescent"}, 0.0, None, False) == ("float64",)
    assert planned_dtypes(store, store, auto, 0.0, None, False) == ()


def _began_warm_up() -> list:
    """On a worker: the dtypes of the warm-ups begun in its process and not yet collected."""
    import eigenflow.tasks._warm_up as on_worker

    with on_worker._LOCK:
        return sorted(on_worker._STARTED)


def test_the_builder_worker_begins_its_warm_up_as_it_starts(tmp_path):
    """A local cluster asked to warm up: its worker named BUILDER_NAME begins the warm-up from its preload, before
    the client asks; the other worker does not; ``builder_worker`` picks that worker; the task collects it."""
    from distributed import Client

    from eigenflow.flows._warm_up import builder_worker
    from eigenflow.flows.cluster import BUILDER_NAME, local_cluster
    from eigenflow.tasks._warm_up import finish_warm_up

    with local_cluster(n_workers=2, threads_per_worker=1, warm_up=("float32",)) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        began = client.run(_began_warm_up)
        names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
        builder = builder_worker(client)
        assert names[builder] == BUILDER_NAME
        assert began[builder] == [("float32",)]
        assert all(began[w] == [] for w in began if w != builder)
        seconds = client.submit(finish_warm_up, ("float32",), workers=[builder], pure=False).result()
        assert seconds > 0.0
        assert client.run(_began_warm_up)[builder] == []
    with local_cluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster, set_as_default=False) as client:
        assert client.run(_began_warm_up) == {w: [] for w in client.scheduler_info()["workers"]}  # not asked


def test_an_ended_warm_up_is_collected_without_waiting(monkeypatch):
    """``ended_warm_up_seconds`` (asked through ``Client.run`` of a worker busy with a task): nothing while the
    warm-up runs or when none was begun, its seconds once it has ended, and then nothing (collected once)."""
    gate = threading.Event()
    monkeypatch.setattr(warm_up, "warm_nndescent", lambda dtypes: gate.wait(10))
    assert warm_up.ended_warm_up_seconds(("float32",)) == []
    warm_up.start_warm_up(("float32",))
    assert warm_up.ended_warm_up_seconds(("float32",)) == []  # still running: not waited for
    gate.set()
    warm_up._STARTED[("float32",)].thread.join()
    [seconds] = warm_up.ended_warm_up_seconds(("float32",))
    assert seconds >= 0.0
    assert warm_up.ended_warm_up_seconds(("float32",)) == []


def test_the_point_modules_are_imported_without_the_kernels():
    """What a worker that maps no point outside the fit set imports beside the eigensolve: the stage bodies and the
    method's estimator module, and the plot's matplotlib (as a subprocess: this test process has imported them already)."""
    import subprocess
    import sys

    code = ("import sys, tasks._warm_up as w; s = w.import_point_modules('laplacian_eigenmaps'); "
            "print(s >= 0, 'eigenflow.spectral.embedding.eigenmaps' in sys.modules, 'eigenflow.tasks.point_writeback' in sys.modules, "
            "'pynndescent' in sys.modules, 'matplotlib.pyplot' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "False", "True"]  # the plot's matplotlib too
