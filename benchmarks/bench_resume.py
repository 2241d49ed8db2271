"""What a resume costs: an uninterrupted ``eigenflow embed`` against the same run killed and resumed.

For each sample: one uninterrupted CLI run (wall time and the stage seconds of its manifest); then the same command
into a new store, its whole process group killed with SIGKILL at ``--kill-at`` of the uninterrupted wall time, and
the same command with the same ``--run-name`` again (the resume). Printed per sample: the wall times, the stages
the killed attempt had completed, and the resumed run's stage seconds (reused stages at 0), so that a resume's cost
is start-up plus the unfinished stages. The resumed embedding is checked bit-identical to the uninterrupted one.

    python benchmarks/bench_resume.py --n 150000 --samples 2 [--json benchmarks/results/resume.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_support import manifold_npy  # noqa: E402

SCRIPT = Path(sys.executable).with_name("eigenflow")


def _command(x: Path, store: Path, run: str) -> list[str]:
    return [str(SCRIPT), "embed", str(x), str(store), "-p", "knn_method=nndescent", "--run-name", run]


def _manifest(store: Path, run: str) -> dict | None:
    try:
        return json.loads((store / "runs" / f"{run}.json").read_text())
    except (OSError, ValueError):
        return None


def _stages(store: Path, run: str) -> dict[str, float]:
    m = _manifest(store, run) or {}
    return {s["name"]: round(float(s["seconds"] or 0.0), 2) for s in m.get("stages", [])}


def _run(x: Path, store: Path, run: str, kill_after: float | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    process = subprocess.Popen(_command(x, store, run), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    if kill_after is None:
        _, err = process.communicate()
        if process.returncode != 0:
            print(err, file=sys.stderr)
        return time.perf_counter() - t0, process.returncode
    try:
        process.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    time.sleep(1.0)  # the killed workers' processes are gone before the resume starts
    return time.perf_counter() - t0, process.returncode


def sample(x: Path, work: Path, kill_at: float, index: int) -> dict:
    """One uninterrupted run, then one killed at ``kill_at`` of its wall time and resumed (see the module)."""
    from eigenflow.storage.embedding_io import read_embedding

    full_store, resumed_store = work / f"full-{index}.zarr", work / f"resumed-{index}.zarr"
    full_wall, code = _run(x, full_store, "full")
    assert code == 0, "the uninterrupted run failed"
    _, killed_code = _run(x, resumed_store, "r", kill_after=kill_at * full_wall)
    completed = [s["name"] for s in (_manifest(resumed_store, "r") or {}).get("stages", [])
                 if s.get("status") == "completed"]
    resume_wall, code = _run(x, resumed_store, "r")
    assert code == 0, "the resumed run failed"
    same = bool(np.array_equal(read_embedding(str(full_store), "full"), read_embedding(str(resumed_store), "r")))
    resumed = _manifest(resumed_store, "r") or {}
    result = {"uninterrupted_wall": round(full_wall, 2), "uninterrupted_stages": _stages(full_store, "full"),
              "killed_at": round(kill_at * full_wall, 2), "killed_exit": killed_code,
              "completed_when_killed": completed, "resumed_wall": round(resume_wall, 2),
              "resumed_stages": _stages(resumed_store, "r"),
              "reused": [s["name"] for s in resumed.get("stages", []) if (s.get("info") or {}).get("reused")],
              "bit_identical": same}
    for store in (full_store, resumed_store):
        shutil.rmtree(store, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150_000)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--kill-at", type=float, default=0.7, help="fraction of the uninterrupted wall time")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    x, _ = manifold_npy(args.n)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as work:
        for i in range(args.samples):
            results.append(sample(x, Path(work), args.kill_at, i))
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "kill_at": args.kill_at, "samples": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
