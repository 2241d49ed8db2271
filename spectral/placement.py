"""Where Dask work runs and how its data moves between the workers: worker lists, the least-loaded worker, scatter
to one worker, a small value shared by many tasks, the worker holding a future, the cluster's memory and threads,
and the shard-to-shard lookup of values by column.

Only the placement: the work itself stays plain functions of the modules that use these helpers (the math of one
shard or one block), submitted with ``workers=[...]``. This module imports nothing of eigenflow (stdlib, numpy and
distributed, the latter on demand), so that :mod:`spectral` and :mod:`tasks` share it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

def worker_list(client) -> list[str]:
    """The addresses of the workers of ``client``, sorted (empty when it has none)."""
    return sorted(client.scheduler_info()["workers"])


def least_loaded_worker(client, workers: list[str], rows) -> str | None:
    """The running worker to give one more task's data: the one holding the fewest rows of the shards
    (``workers[i]`` holds ``rows[i]``; a worker without a shard holds none), ties broken by the smaller process
    memory of its last heartbeat, then by address. Used for the two-level coarse problem, so that it does not land
    on a worker that already holds more shards than the others and push it to Dask's pause threshold. None when
    no worker is running."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    held = {address: 0 for address, w in info.items() if w.get("status", "running") == "running"}
    for worker, n_rows in zip(workers, rows):
        if worker in held:
            held[worker] += int(n_rows)
    if not held:
        return None
    return min(held, key=lambda a: (held[a], info[a].get("metrics", {}).get("memory", 0), a))


def scatter_to(client, data, worker: str):
    """A future of ``data`` on ``worker``, sent there directly (unique key: no hashing of the data, and no
    reuse of a key that the scheduler may be releasing)."""
    return client.scatter(data, workers=[worker], direct=True, hash=False)


def shared_value(client, value) -> Any:
    """A future of ``value``, a small object that many tasks read (the rows left out of a fit, a list of row
    hashes), made by a task that returns it: the workers fetch it as their tasks need it, and the scheduler computes
    it again if the workers holding it die.

    In place of ``client.scatter(value, broadcast=True)``: Dask's replication of a broadcast retries for ever when
    a worker dies during it (dask/distributed#5704, open), and a scattered value whose workers die is lost: a worker
    restarted by its Nanny for memory would leave the run waiting in that scatter for ever.
    """
    return client.submit(_value, value, pure=False)


def _value(value: Any) -> Any:
    """Task: ``value`` (see :func:`shared_value`)."""
    return value


def worker_of(client, future) -> str:
    from distributed import wait

    wait([future])
    if future.status == "error":
        future.result()  # re-raises the task's exception
    return sorted(client.who_has([future])[future.key])[0]


def is_future(obj) -> bool:
    from distributed import Future

    return isinstance(obj, Future)


def shape_of(block):
    """Task: the shape of a block, as a tuple."""
    return tuple(block.shape)


def smallest_memory_limit(client) -> int | None:
    """The smallest ``memory_limit`` (bytes) of the workers of ``client``; None when none has one."""
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    return min((m for m in limits if m > 0), default=None)


def n_worker_threads(client) -> int:
    """Total number of worker threads of the cluster behind ``client`` (at least 1)."""
    info = client.scheduler_info(n_workers=-1)
    return max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))


def this_worker() -> Any:
    """The Dask worker running this task; None outside a worker."""
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


def item(items, j: int) -> Any:
    """Task: ``items[j]`` (a piece of a task's result, moved alone)."""
    return items[j]


# ------------------------------------------------------------------------------------ values between the shards
# Shard ``i`` cuts what it needs into one request per owning shard ``q`` (on its own worker), the request moves to
# ``q``'s worker, the answer moves back, and shard ``i`` puts the answers together. The driver only learns the
# (P, P) request sizes (to skip the empty pairs); no (n,) array passes through it. Bytes moved: the halo (columns
# of shard ``i`` owned by other shards) twice, not ``n``.


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
