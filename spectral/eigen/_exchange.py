"""Worker-to-worker lookups of :mod:`.distributed`: per-column values and the renumbering of neighbour lists,
between the shards, so that no (n,) array passes through the driving process.

Both follow the pattern of the halo products: shard ``i`` cuts what it needs into one request per owning shard
``q`` (on its own worker), the request moves to ``q``'s worker, the answer moves back, and shard ``i`` puts the
answers together. The driver only learns the (P, P) request sizes (to skip the empty pairs). Bytes moved: the
halo (columns of shard ``i`` owned by other shards) twice, not ``n``.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputDataError
from ..partition_parts import item


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


def foreign_ids(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Task: the sorted distinct entries of ``idx`` (original row numbers) that are not rows of this shard
    (``rows`` ascending): the ones to look up in the other shards."""
    ids = np.unique(np.asarray(idx, dtype=np.int64))
    return ids[~np.isin(ids, rows, assume_unique=True)]


def lookup_ids(rows: np.ndarray, ids: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Task on shard ``q``: ``(which, numbers)``: the positions in ``ids`` of the ids that are rows of this
    shard (``rows`` ascending, operator rows ``start..``), and their operator numbers."""
    pos = np.minimum(np.searchsorted(rows, ids), max(rows.size - 1, 0))
    hit = rows[pos] == ids if rows.size else np.zeros(ids.size, dtype=bool)
    return np.flatnonzero(hit), start + pos[hit]


def renumbered(idx: np.ndarray, rows: np.ndarray, start: int, ids: np.ndarray, *found) -> np.ndarray:
    """Task on shard ``i``: its neighbour lists ``idx`` (m, k) in operator numbers, from its own rows (``rows``
    ascending, operator rows ``start..``) and the other shards' answers ``found`` for its foreign ``ids``."""
    idx = np.asarray(idx, dtype=np.int64)
    numbers = np.full(ids.size, -1, dtype=np.int64)
    for which, nums in found:
        numbers[which] = nums
    if np.any(numbers < 0):
        raise InputDataError(f"kNN indices must be rows of the shards; {int(np.sum(numbers < 0))} are not, e.g. "
                             f"{int(ids[np.flatnonzero(numbers < 0)[0]])}")
    flat = idx.ravel()
    pos = np.minimum(np.searchsorted(rows, flat), rows.size - 1)
    own = rows[pos] == flat
    out = np.where(own, start + pos, -1)
    out[~own] = numbers[np.searchsorted(ids, flat[~own])]
    return out.reshape(idx.shape)


def renumber_by_parts(client, idx: list, rows: list, bounds: np.ndarray, workers: list) -> list:
    """Per shard a future of its neighbour lists ``idx[i]`` (original row numbers) renumbered into the operator's
    order, where shard ``q`` holds the original rows ``rows[q]`` (futures, ascending) as operator rows
    ``bounds[q]..``. Only each shard's foreign ids (its halo) are sent to the other shards."""
    P = len(idx)
    ids = [client.submit(foreign_ids, a, r, workers=[w], pure=False) for a, r, w in zip(idx, rows, workers)]
    out = []
    for i in range(P):
        found = [client.submit(lookup_ids, rows[q], ids[i], int(bounds[q]), workers=[workers[q]], pure=False)
                 for q in range(P) if q != i]
        out.append(client.submit(renumbered, idx[i], rows[i], int(bounds[i]), ids[i], *found, workers=[workers[i]],
                                 pure=False))
    return out
