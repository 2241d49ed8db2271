"""Values looked up between the shards: each shard gets the values at its operator columns from the shards that
own those rows (its halo, and its own rows), on the workers.

Shard ``i`` cuts what it needs into one request per owning shard ``q`` (on its own worker), the request moves to
``q``'s worker, the answer moves back, and shard ``i`` puts the answers together. The driver only learns the
(P, P) request sizes (to skip the empty pairs); no (n,) array passes through it. Bytes moved: the halo (columns
of shard ``i`` owned by other shards) twice, not ``n``. Where the tasks run is :mod:`spectral.placement`'s.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.placement import item


def split_by_owner(cols: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    """Task: sorted operator columns ``cols`` (c,) cut into the runs owned by each shard (``bounds`` (P + 1,):
    shard ``q`` owns ``[bounds[q], bounds[q + 1])``)."""
    cuts = np.searchsorted(cols, bounds)
    return [cols[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def sizes_of(pieces: list) -> list[int]:
    """Task: the lengths of a list of arrays."""
    return [int(np.asarray(p).size) for p in pieces]


def values_at(values: np.ndarray, request: np.ndarray, start: int) -> np.ndarray:
    """Task on the owner: ``values[request - start]`` (its rows' values at the requested operator columns)."""
    return np.asarray(values)[np.asarray(request, dtype=np.int64) - start]


def join(*answers) -> np.ndarray:
    """Task: the answers of the owners in owner order (the order of the sorted columns)."""
    return np.concatenate([np.asarray(a, dtype=np.float64) for a in answers]) if answers else np.zeros(0)


def values_at_columns(client, values: list, cols: list, bounds: np.ndarray, workers: list) -> list:
    """Per shard ``i`` a future of ``(c_i,)``: the values at its sorted operator columns ``cols[i]`` (futures),
    where ``values[q]`` (futures, ``(n_q,)``) are the values of shard ``q``'s rows. Each answer is computed on
    its owner's worker and joined on shard ``i``'s."""
    P = len(values)
    requests = [client.submit(split_by_owner, c, bounds, workers=[w], pure=False) for c, w in zip(cols, workers)]
    sizes = np.array(client.gather([client.submit(sizes_of, r, pure=False) for r in requests]))  # (P, P)
    out = []
    for i in range(P):
        answers = [client.submit(values_at, values[q], client.submit(item, requests[i], q, workers=[workers[i]],
                                                                     pure=False),
                                 int(bounds[q]), workers=[workers[q]], pure=False)
                   for q in range(P) if sizes[i, q]]
        out.append(client.submit(join, *answers, workers=[workers[i]], pure=False))
    return out
