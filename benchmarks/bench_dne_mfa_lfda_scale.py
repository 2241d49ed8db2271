"""Scale benchmark of CK08: SS-LFDA (linear) and SS-KLFDA (Nyström) on n points, 1% labeled.

``--route flow`` runs the Prefect flow end to end (ingest -> kNN graph + chunked fit -> per-chunk write-back
of every point); ``--route direct`` calls :func:`spectral.methods.discriminant.scale.fit_at_scale` on a Dask array and
transforms every chunk (the math without Prefect / zarr). Prints wall time and the peak RSS of the process
tree (Dask workers included), then the quality beside simple references on the same points: 1-NN in the
embedding with the labeled points as references, scored on ``--eval`` random unlabeled points (classes = bands
of the roll), against 1-NN on the labeled points in the input space and scikit-learn's LabelSpreading on a
subsample. The flow route uses the generic ``flows.embed.embed(method="lfda", params=...)``.

    python benchmarks/bench_dne_mfa_lfda_scale.py --n 1000000 --variant linear --route flow
    python benchmarks/bench_dne_mfa_lfda_scale.py --n 1000000 --variant kernel --landmarks 2000 --route flow
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_support import DATA_CACHE, PeakMemory, baselines, gb, manifold_npy, nn_accuracy, print_quality  # noqa: E402


def labels_file(y_path: Path, fraction: float, seed: int) -> Path:
    """y with all but ``fraction`` of the points set to -1 (unlabeled), saved next to the data."""
    out = y_path.with_name(y_path.name.replace(".y.npy", f".y{fraction:g}.npy"))
    if not out.exists():
        y = np.load(y_path).astype(np.int64)
        keep = np.random.default_rng(seed).random(len(y)) < fraction
        np.save(out, np.where(keep, y, -1))
    return out


def run_direct(x_path: Path, y_path: Path, args) -> dict:
    import dask.array as da

    from eigenflow.spectral.methods.discriminant import LFDA
    from eigenflow.spectral.methods.discriminant.scale import fit_at_scale

    X = da.from_array(np.load(x_path, mmap_mode="r"), chunks=(args.chunk_rows, -1))
    y = np.load(y_path)
    kw = {"mode": "kernel", "n_landmarks": args.landmarks} if args.variant == "kernel" else {}
    t0 = time.perf_counter()
    est = fit_at_scale(LFDA(gamma=args.gamma, **kw), X, y, random_state=0)
    t_fit = time.perf_counter() - t0
    checksum, Z = 0.0, []
    for i0 in range(0, X.shape[0], args.chunk_rows):
        Z.append(est.transform(X[i0:i0 + args.chunk_rows].compute()).astype(np.float32))
        checksum += float(np.abs(Z[-1]).sum())
    return {"fit_s": t_fit, "total_s": time.perf_counter() - t0, "n_components": est.n_components_,
            "checksum": checksum, "embedding": np.concatenate(Z)}


def run_flow(x_path: Path, y_path: Path, args) -> dict:
    from eigenflow.flows.embed import embed
    from eigenflow.storage.embedding_io import read_embedding

    store = DATA_CACHE / f"lfda_{args.variant}_{args.n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    params = {"gamma": args.gamma, **({"mode": "kernel", "n_landmarks": args.landmarks} if args.variant == "kernel" else {})}
    t0 = time.perf_counter()
    out = embed(str(x_path), str(store), method="lfda", params=params, labels=str(y_path), random_state=0,
                chunk_rows=args.chunk_rows, n_workers=args.workers)
    total = time.perf_counter() - t0
    stages = out.get("stages", [])
    if isinstance(stages, list):
        stages = {s["name"]: round(s["seconds"], 1) for s in stages if "name" in s} or stages
    Z = read_embedding(str(store), out["run"])
    shutil.rmtree(store, ignore_errors=True)
    return {"total_s": total, "status": out["status"], "stages": stages, "embedding": Z}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--variant", choices=["linear", "kernel"], default="linear")
    ap.add_argument("--landmarks", type=int, default=2000)
    ap.add_argument("--labeled", type=float, default=0.01)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--chunk-rows", type=int, default=65536)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--route", choices=["flow", "direct"], default="flow")
    ap.add_argument("--eval", type=int, default=100_000, help="unlabeled points the quality is scored on")
    ap.add_argument("--ls-points", type=int, default=20_000, help="unlabeled points of LabelSpreading (0: skip)")
    args = ap.parse_args(argv)
    x_path, y_full = manifold_npy(args.n, n_features=args.d)
    y_path = labels_file(y_full, args.labeled, seed=1)
    with PeakMemory() as mem:
        res = (run_flow if args.route == "flow" else run_direct)(x_path, y_path, args)
    Z = res.pop("embedding")
    print(f"SS-{'K' if args.variant == 'kernel' else ''}LFDA n={args.n} d={args.d} labeled={args.labeled:g} "
          f"landmarks={args.landmarks if args.variant == 'kernel' else '-'} route={args.route}: "
          f"{res}, peak RSS {gb(mem.peak_bytes)}")
    y, semi = np.load(y_full), np.load(y_path)
    lab = np.flatnonzero(semi >= 0)
    unl = np.flatnonzero(semi < 0)
    ev = np.sort(np.random.default_rng(0).choice(unl, min(args.eval, unl.size), replace=False))
    refs = baselines(np.load(x_path, mmap_mode="r"), y, lab, ev, label_spreading=args.ls_points)
    print_quality(f"1-NN in the {Z.shape[1]}-D embedding, labeled points as references, {ev.size} unlabeled points",
                  nn_accuracy(Z[lab], y[lab], Z[ev], y[ev]), refs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
