"""Ingest from an .h5ad file against from a .npy file, the export back into the .h5ad, and the ingest's peak memory.

Generated data (written by anndata): ``obsm["X_pca"]`` of ``n`` cells x ``d`` float32 components (10 Gaussian
clusters), ``obs["cell_type"]`` a categorical of the 10 clusters with 90 % missing, obs names ``cell-<i>``; the
same matrix as a ``.npy`` file. Each ingest runs in a fresh process: after its imports the process's peak RSS
(``VmHWM``) is reset (``/proc/self/clear_refs``, Linux), so the figure is the ingest's own peak above the RSS it
started from. The ingests alternate (npy, h5ad, array, ...), medians of ``--repeats``. ``array`` ingests the same
rows from a numpy array loaded before the reset: the store writer's own share (validation, hashing, encoding). (A
version of the code that memory-maps the ``.npy`` file counts the file's mapped pages in its ``.npy`` figure.)
``--small-chunk-rows`` repeats the .h5ad and array ingests with smaller chunks; for every ingest the peak minus one
chunk of rows (``chunk_rows x d`` float32) is printed: the ingest holds one chunk of rows plus a constant, so that
difference stays the same at both chunk sizes. ``--baseline DIR`` runs every ingest also with the code in ``DIR``
(another version of the repository, e.g. ``git archive <commit> | tar -x -C DIR``), interleaved with this one.

The export writes a run's per-point results (embedding ``n x 10`` float32, labels, scores ``n x 10``) from the store
into a copy of the file made before each repeat (in place), and with ``out=`` (a copy of the file plus the
elements). The results are written into the store by storage's own writers (an embed of 1e6 cells is measured by
``bench_embed.py``), so the export alone is timed.

Run: ``python benchmarks/bench_anndata.py --n 1000000 --d 50 [--repeats 3] [--baseline DIR] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

N_CLUSTERS = 10
N_OUT = 10  # embedding components and score columns of the exported run
RUN = "embed-bench"

_CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
import numpy as np
from eigenflow.storage.ingest import ingest
source = np.load({source!r}) if {in_memory!r} else {source!r}  # loaded whole before the reset

def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status_mb("VmRSS:")
t = time.perf_counter()
info = ingest(source, {store!r}, overwrite=True, **{keys!r})
seconds = time.perf_counter() - t
print(json.dumps({{"seconds": seconds, "peak_above_start_mb": status_mb("VmHWM:") - before,
                  "start_rss_mb": before, "chunk_rows": info.chunk_rows,
                  "chunk_mb": min(info.chunk_rows, info.n) * info.d * 4 / 2**20}}))
"""


def make_files(n: int, d: int, work: Path, seed: int = 0) -> tuple[Path, Path, float]:
    """Write ``cells.h5ad`` and ``X.npy`` of the same ``(n, d)`` matrix; returns their paths and the seconds
    anndata took to write the file."""
    import anndata
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, N_CLUSTERS, n)
    centres = rng.standard_normal((N_CLUSTERS, d)).astype(np.float32) * 4
    X = centres[cluster]
    X += rng.standard_normal((n, d), dtype=np.float32)
    codes = np.where(rng.random(n) < 0.9, -1, cluster)
    obs = pd.DataFrame({"cell_type": pd.Categorical.from_codes(codes, [f"type{i}" for i in range(N_CLUSTERS)])},
                       index=[f"cell-{i}" for i in range(n)])
    np.save(work / "X.npy", X)
    adata = anndata.AnnData(obs=obs, obsm={"X_pca": X})
    t = time.perf_counter()
    adata.write_h5ad(work / "cells.h5ad")
    return work / "cells.h5ad", work / "X.npy", time.perf_counter() - t


def ingest_in_child(source: Path, store: Path, keys: dict, in_memory: bool = False, repo: Path = REPO) -> dict:
    """One ingest in a fresh process running the code of ``repo``: seconds, peak RSS above the start (MiB; ``_mb``
    keys are MiB), chunk rows and one chunk's MiB."""
    code = _CHILD.format(repo=str(repo), source=str(source), store=str(store), keys=keys, in_memory=in_memory)
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_run_results(store: Path, n: int, seed: int = 1) -> None:
    """A run's per-point results in the store, written chunk by chunk by storage's writers."""
    import numpy as np

    from eigenflow.storage.embedding_io import create_embedding, create_output, write_embedding_block, write_output_block
    from eigenflow.storage.arrays import row_chunks

    rng = np.random.default_rng(seed)
    create_embedding(store, RUN, N_OUT)
    create_output(store, RUN, "labels", dtype="int32")
    create_output(store, RUN, "scores", N_OUT)
    for start, stop in row_chunks(store):
        write_embedding_block(store, RUN, start, rng.standard_normal((stop - start, N_OUT)).astype(np.float32))
        write_output_block(store, RUN, "labels", start, rng.integers(0, N_CLUSTERS, stop - start).astype(np.int32))
        write_output_block(store, RUN, "scores", start, rng.random((stop - start, N_OUT)).astype(np.float32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small-chunk-rows", type=int, default=8192)
    parser.add_argument("--baseline", type=Path, help="another version of the repository: its ingests too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, help="directory for the files (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-anndata-"))
    work.mkdir(parents=True, exist_ok=True)
    from eigenflow.storage.anndata_export import export_to_anndata

    h5ad, npy, write_seconds = make_files(args.n, args.d, work)
    result: dict = {"n": args.n, "d": args.d, "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                    "h5ad_mb": h5ad.stat().st_size / 2**20, "npy_mb": npy.stat().st_size / 2**20,
                    "anndata_write_h5ad_seconds": write_seconds,
                    "ingest": {},
                    "export_in_place": [], "export_copy": []}
    small = {"chunk_rows": args.small_chunk_rows}
    cases = {"npy": (npy, {}, False), "h5ad": (h5ad, {"x_key": "X_pca", "labels_key": "cell_type"}, False),
             "array": (npy, {}, True),
             "h5ad_small_chunks": (h5ad, {"x_key": "X_pca", "labels_key": "cell_type", **small}, False),
             "array_small_chunks": (npy, small, True)}
    versions = {"": REPO} if args.baseline is None else {"": REPO, "baseline_": args.baseline.resolve()}
    result["ingest"] = {prefix + kind: [] for prefix in versions for kind in cases}
    for _ in range(args.repeats):
        for kind, (source, keys, in_memory) in cases.items():
            for prefix, repo in versions.items():
                result["ingest"][prefix + kind].append(ingest_in_child(
                    source, work / f"{prefix}{kind}.zarr", keys, in_memory=in_memory, repo=repo))
    store = work / "h5ad.zarr"
    write_run_results(store, args.n)
    for i in range(args.repeats):
        target = work / f"target-{i}.h5ad"
        shutil.copyfile(h5ad, target)
        t = time.perf_counter()
        export_to_anndata(str(store), str(target), run=RUN, key="X_eigenflow")
        result["export_in_place"].append(time.perf_counter() - t)
        target.unlink()
        t = time.perf_counter()
        export_to_anndata(str(store), str(h5ad), run=RUN, key="X_eigenflow", out=str(work / "copy.h5ad"),
                          overwrite=True)
        result["export_copy"].append(time.perf_counter() - t)
    result["load_after"] = os.getloadavg()
    for kind, runs in result["ingest"].items():
        seconds = [r["seconds"] for r in runs]
        peak = max(r["peak_above_start_mb"] for r in runs)
        print(f"ingest from {kind}: median {statistics.median(seconds):.2f} s "
              f"({' '.join(f'{s:.2f}' for s in seconds)}), peak above start {peak:.1f} MiB; chunk_rows "
              f"{runs[0]['chunk_rows']} = {runs[0]['chunk_mb']:.2f} MiB; "
              f"peak - chunk {peak - runs[0]['chunk_mb']:.1f} MiB")
    for name in ("export_in_place", "export_copy"):
        print(f"{name}: median {statistics.median(result[name]):.2f} s "
              f"({' '.join(f'{s:.2f}' for s in result[name])})")
    print(f"files: h5ad {result['h5ad_mb']:.0f} MB, npy {result['npy_mb']:.0f} MB; anndata wrote the h5ad in "
          f"{write_seconds:.1f} s; load average {result['load_before']} -> {result['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.work is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
