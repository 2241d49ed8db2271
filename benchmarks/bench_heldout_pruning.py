"""Held-out points searched in the shard indexes with and without the cut pruning
(:mod:`spectral.neighbours.sharded_query`): time, shards searched per point, equality and recall.

Data: the lifted Swiss roll (``--n`` x 32, 1e6 by default); a ``--holdout`` fraction of the rows is held out, the
rest indexed in ``--shards`` bisection shards (one NN-descent index per shard on a LocalCluster of ``--workers``
single-threaded workers, as the sharded flow builds them). The held-out rows are then searched for their
``kc`` = 3 k candidates (the out-of-sample map's count) in blocks of ``--block`` rows, twice, in this order:
pruned (home shard, then the shards whose cut bound is within the k-th home distance) and unpruned (the same
indexes with the cuts removed: every shard). Printed: wall seconds of each search, (row, shard) searches per
point, the fraction of rows whose candidate lists are identical, and the recall of both against brute force on
``--sample`` held-out rows::

    .venv/bin/python benchmarks/bench_heldout_pruning.py --n 1000000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _search(sharded, Q: np.ndarray, kc: int, block: int, client) -> tuple[float, float, np.ndarray, np.ndarray]:
    from eigenflow.spectral.neighbours.sharded_query import query_shard_indexes

    blocks = [client.scatter(Q[i:i + block], hash=False) for i in range(0, Q.shape[0], block)]
    t0 = time.perf_counter()
    futures, counts = query_shard_indexes(sharded, blocks, kc, with_search_counts=True)
    answers = client.gather(futures)
    seconds = time.perf_counter() - t0
    searches = sum(client.gather(counts)) / Q.shape[0]
    return seconds, searches, np.vstack([a[0] for a in answers]), np.vstack([a[1] for a in answers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--holdout", type=float, default=0.1)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--k", type=int, default=15)
    parser.add_argument("--block", type=int, default=65536, help="query rows per block (the store's row chunk)")
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from distributed import Client

    from eigenflow.flows.cluster import local_cluster
    from eigenflow.spectral.datasets import make_swiss_roll_lifted
    from eigenflow.spectral.embedding.out_of_sample import candidate_count
    from eigenflow.spectral.neighbours.sharded import build_shard_indexes
    from eigenflow.spectral.metrics import knn_recall
    from eigenflow.tasks.bodies.worker import warm_nndescent

    X = make_swiss_roll_lifted(args.n, random_state=0)[0]  # (n, 32) float32
    held = np.random.default_rng(1).random(args.n) < args.holdout
    X_fit, Q = X[~held], X[held]
    kc = candidate_count(X_fit.shape[0], args.k)
    res = {"n": args.n, "n_fit": int(X_fit.shape[0]), "n_heldout": int(Q.shape[0]), "shards": args.shards,
           "workers": args.workers, "kc": kc, "block": args.block}
    with local_cluster(args.workers, 1) as cluster, Client(cluster) as client:
        client.run(warm_nndescent, ("float32",))  # pynndescent compiled in every worker, not timed
        t0 = time.perf_counter()
        sharded = build_shard_indexes(X_fit, args.k, n_shards=args.shards, partition="bisection", random_state=0,
                                      queried=True, client=client)
        client.gather(sharded.indexes)
        res["index_build_seconds"] = time.perf_counter() - t0
        res["pruned_seconds"], res["pruned_searches_per_point"], ip, dp = _search(sharded, Q, kc, args.block, client)
        no_cuts = dataclasses.replace(sharded, partition=dataclasses.replace(sharded.partition, splits=()))
        res["unpruned_seconds"], res["unpruned_searches_per_point"], iu, du = _search(no_cuts, Q, kc, args.block,
                                                                                  client)
    res["identical_rows"] = float(np.mean(np.all(ip == iu, axis=1)))
    sample = np.sort(np.random.default_rng(2).choice(Q.shape[0], args.sample, replace=False))
    from sklearn.neighbors import NearestNeighbors

    truth = NearestNeighbors(n_neighbors=kc, algorithm="brute").fit(X_fit).kneighbors(Q[sample],
                                                                                        return_distance=False)
    res["recall_pruned"] = knn_recall(ip[sample], truth)
    res["recall_unpruned"] = knn_recall(iu[sample], truth)
    res["load_average"] = os.getloadavg()
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
