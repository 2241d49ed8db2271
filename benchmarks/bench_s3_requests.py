"""Requests an embed run makes to an S3 server, and its wall time there against the local disk.

Starts moto's S3 server (``moto_server``, a test dependency) on a free loopback port with its request log in a
file, then runs the same embed (lifted Swiss roll of ``--n`` x 32 points, exact kNN, k = 10, ``--holdout`` held
out, chunks of ``--chunk-rows`` rows) on a LocalCluster of 2 spawned workers, first into a local store, then into
``s3://<bucket>/points.zarr``. Printed (and written as JSON with ``--out``): the wall seconds of both runs, the
S3 requests of the S3 run by HTTP method, and the bytes and objects each store holds afterwards. moto answers a
request in a few milliseconds on loopback; a real S3 endpoint takes ~10-30 ms, so the request count is the figure
that carries over::

    .venv/bin/python benchmarks/bench_s3_requests.py --n 2000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_support import free_port  # noqa: E402


def _start_moto(log_path: Path) -> tuple[subprocess.Popen, str]:
    command = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if command is None:
        raise SystemExit("moto_server not found: install the test extras (pip install -e '.[test]')")
    port = free_port()
    server = subprocess.Popen([command, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=open(log_path, "w"), start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            return server, endpoint
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit("moto_server did not start")
            time.sleep(0.2)


def _requests_by_method(log_path: Path, since: int) -> dict:
    """Counts of the logged HTTP requests (werkzeug's access log: ``... "GET /path HTTP/1.1" 200 -``) after line
    ``since``."""
    counts = collections.Counter()
    for line in log_path.read_text().splitlines()[since:]:
        parts = line.split('"')
        if len(parts) > 2 and parts[1].split(" ")[0] in ("GET", "HEAD", "PUT", "POST", "DELETE"):
            counts[parts[1].split(" ")[0]] += 1
    return dict(counts)


def _store_size(fs, root: str) -> tuple[int, int]:
    """``(bytes, objects)``: the total size and the count of the files under ``root`` on ``fs``."""
    sizes = [info["size"] for info in fs.find(root, detail=True).values()]
    return int(sum(sizes)), len(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--holdout", type=float, default=0.2)
    parser.add_argument("--chunk-rows", type=int, default=512)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="eigenflow-s3-bench-"))
    log_path = work / "moto.log"
    server, endpoint = _start_moto(log_path)
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"})
    try:
        import fsspec
        import s3fs
        from prefect.testing.utilities import prefect_test_harness
        from eigenflow.flows.cluster import local_cluster
        from eigenflow.flows.embed import embed
        from eigenflow.spectral.datasets import make_swiss_roll_lifted

        bucket = "eigenflow-bench"
        s3fs.S3FileSystem().mkdir(bucket)
        X, _, _ = make_swiss_roll_lifted(args.n, random_state=5)
        np.save(work / "X.npy", X)
        common = dict(params={"knn_method": "exact", "n_neighbors": 10}, holdout=args.holdout,
                      chunk_rows=args.chunk_rows, random_state=1)
        record = {"n": args.n, "holdout": args.holdout, "chunk_rows": args.chunk_rows}
        with prefect_test_harness(server_startup_timeout=90), local_cluster(2) as cluster:
            for name, store in (("local", str(work / "points.zarr")), ("s3", f"s3://{bucket}/points.zarr")):
                before = len(log_path.read_text().splitlines())
                t0 = time.perf_counter()
                embed(str(work / "X.npy"), store, **common, scheduler=cluster.scheduler_address)
                record[f"{name}_seconds"] = round(time.perf_counter() - t0, 2)
                fs, root = fsspec.core.url_to_fs(store)
                record[f"{name}_store_bytes"], record[f"{name}_store_objects"] = _store_size(fs, root)
                if name == "s3":
                    record["s3_requests"] = _requests_by_method(log_path, before)
                    record["s3_requests_total"] = sum(record["s3_requests"].values())
        print(json.dumps(record, indent=1))
        if args.out:
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
