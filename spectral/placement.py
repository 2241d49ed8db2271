"""Where Dask work runs and how its data moves between the workers: worker lists, the least-loaded worker, scatter
to one worker, a small value shared by many tasks, the worker holding a future, the cluster's memory and threads.
The values looked up between the shards (the halo exchange) are :mod:`spectral.graph.halo`'s.

Only the placement: the work itself stays plain functions of the modules that use these helpers (the math of one
shard or one block), submitted with ``workers=[...]``. This module imports nothing of eigenflow (stdlib and
distributed, the latter on demand), so that :mod:`spectral` and :mod:`tasks` share it.
"""

from __future__ import annotations

from typing import Any


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
