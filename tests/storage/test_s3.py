"""The pipeline against ``s3://`` stores on a real S3-compatible server (moto's, started on loopback).

Ingest, embed with a hold-out, extend and a resumed run go to S3 and give the same bits as on the local disk.
Credentials and endpoint reach every process (the flow and its Dask workers) through the standard AWS
environment variables, as they would on a cluster.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.checksums import verify
from eigenflow.storage.embedding_io import read_embedding
from eigenflow.storage.manifest import read_manifest

from tests.helpers import free_port, local_cluster

PARAMS = {"knn_method": "exact", "n_neighbors": 10}
BUCKET = "eigenflow-test"


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server process on 127.0.0.1 (``moto_server``, as a real endpoint would be: not sharing this
    process's interpreter with the flow) and the AWS environment pointing at it (restored afterwards)."""
    import shutil
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("moto.server")
    command = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    assert command, "moto[server] is a test dependency: its moto_server command is missing"
    port = free_port()
    server = subprocess.Popen([command, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            break
        except OSError:
            assert server.poll() is None and time.time() < deadline, "moto_server did not start"
            time.sleep(0.2)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem().mkdir(BUCKET)  # no region: s3fs's mkdir fails with us-east-1
    try:
        yield f"s3://{BUCKET}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def cluster(s3):
    """Worker processes spawned after the AWS environment is set, so that they inherit it (forks of the session's
    warm server would have the environment of the session's start)."""
    with local_cluster(spawned=True) as address:
        yield address


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("s3data")
    X, _, _ = make_swiss_roll_lifted(2000, random_state=5)
    np.save(d / "X.npy", X)
    np.save(d / "new.npy", make_swiss_roll_lifted(300, random_state=6)[0])
    return d


COMMON = dict(params=PARAMS, holdout=0.2, chunk_rows=512, random_state=1)


@pytest.fixture(scope="module")
def local(data, cluster, prefect_api):
    """The same run on the local disk: the reference."""
    from eigenflow.flows.embed import embed

    summary = embed(str(data / "X.npy"), str(data / "points.zarr"), **COMMON, scheduler=cluster)
    return read_embedding(str(data / "points.zarr"), summary["run"])


@pytest.mark.slow
def test_embed_extend_on_s3_equal_local_disk(s3, cluster, data, local, prefect_api):
    from eigenflow.flows.embed import embed
    from eigenflow.flows.extend import extend

    remote = embed(str(data / "X.npy"), f"{s3}/points.zarr", **COMMON, scheduler=cluster)
    np.testing.assert_array_equal(read_embedding(f"{s3}/points.zarr", remote["run"]), local)
    assert verify(f"{s3}/points.zarr")["bad"] == []
    e_remote = extend(f"{s3}/points.zarr", str(data / "new.npy"), f"{s3}/new.zarr", chunk_rows=512,
                      scheduler=cluster)
    e_local = extend(str(data / "points.zarr"), str(data / "new.npy"), str(data / "new.zarr"), chunk_rows=512,
                     scheduler=cluster)
    np.testing.assert_array_equal(read_embedding(f"{s3}/new.zarr", e_remote["run"]),
                                  read_embedding(str(data / "new.zarr"), e_local["run"]))


@pytest.mark.slow  # 32-37 s; the default suite keeps S3 ingest, embed with hold-out and extend
def test_resume_on_s3_reuses_the_finished_stages(s3, thread_cluster, data, local, prefect_api, monkeypatch):
    """The stage bodies run on the workers: an in-process cluster lets the monkeypatch reach the eigensolver."""
    import eigenflow.spectral.embedding.eigenmaps as le  # the eigensolver the eigensolve stage calls
    from eigenflow.flows.embed import embed

    store = f"{s3}/resume.zarr"
    real = le.laplacian_eigenmaps_from_graph

    def fail_once(*args, **kwargs):
        monkeypatch.setattr(le, "laplacian_eigenmaps_from_graph", real)
        raise MemoryError("injected eigensolver failure")

    monkeypatch.setattr(le, "laplacian_eigenmaps_from_graph", fail_once)
    common = dict(**COMMON, scheduler=thread_cluster, run_name="r")
    with pytest.raises(MemoryError):
        embed(str(data / "X.npy"), store, **common)
    summary = embed(str(data / "X.npy"), store, **common)
    stages = {s.name: s.info for s in read_manifest(store, "r").stages}
    assert stages["knn"].get("reused") and stages["weights"].get("reused") and not stages["eigensolve"].get("reused")
    np.testing.assert_array_equal(read_embedding(store, summary["run"]), local)
