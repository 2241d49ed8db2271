"""Small helpers of :mod:`.distributed` around the ``distributed.Client``: placement, scatter, the shard-pair
transpose exchange."""

from __future__ import annotations

import scipy.sparse as sp

from ..errors import InputDataError, ParameterError
from . import _shards

#: Bytes per float64 entry (the traffic counters of :mod:`.distributed`).
FLOAT_BYTES = 8
#: Relative asymmetry max|W - W^T| / max|W| tolerated by ``check_symmetric`` (as graph_laplacian's check).
SYMMETRY_RTOL = 1e-10


def active_client(client):
    """``client``, or the active ``distributed.Client`` (ParameterError when there is none)."""
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError as exc:
        raise ParameterError("the distributed eigensolver needs an active distributed.Client (or client=...)") from exc


def transpose_exchange(client, futures, bounds, how):
    """Shard-pair exchange of transposed entries: symmetrize (``how``) or check symmetry (``how=None``)."""
    P = len(futures)
    workers = [worker_of(client, f) for f in futures]
    pieces = [[client.submit(_shards.column_piece, futures[j], int(bounds[i]), int(bounds[i + 1]),
                             workers=[workers[j]], pure=False) for j in range(P)] for i in range(P)]
    if how is not None:
        return [client.submit(_shards.shard_symmetrize, futures[i], pieces[i], how, workers=[workers[i]], pure=False)
                for i in range(P)]
    worst = max(client.gather([client.submit(_shards.shard_asymmetry, futures[i], pieces[i], workers=[workers[i]],
                                             pure=False) for i in range(P)]))
    scale = max(client.gather([client.submit(max_abs, f, pure=False) for f in futures]))
    if worst > SYMMETRY_RTOL * max(scale, 1e-300):
        raise InputDataError(f"W must be symmetric; max |W - W^T| = {worst:.3g} over the row blocks "
                             "(pass symmetrize='or', 'and' or 'mean' for directed kNN weights)")
    return futures


def worker_list(client) -> list[str]:
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ParameterError("the distributed.Client has no workers")
    return workers


def least_loaded_worker(client, workers: list[str], rows) -> str:
    """The running worker to give one more task's data: the one holding the fewest rows of the shards
    (``workers[i]`` holds ``rows[i]``; a worker without a shard holds none), ties broken by the smaller process
    memory of its last heartbeat, then by address. Used for the two-level coarse problem, which the first shard's
    worker took before whatever it held (at 1e7 on 4 workers the paused worker held 5 shards and the coarse
    problem)."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    held = {address: 0 for address, w in info.items() if w.get("status", "running") == "running"}
    for worker, n_rows in zip(workers, rows):
        if worker in held:
            held[worker] += int(n_rows)
    if not held:
        raise ParameterError("the distributed.Client has no running workers")
    return min(held, key=lambda a: (held[a], info[a].get("metrics", {}).get("memory", 0), a))


def scatter_to(client, data, worker: str):
    """A future of ``data`` on ``worker``, sent there directly (unique key: no hashing of the data, and no
    reuse of a key that the scheduler may be releasing)."""
    return client.scatter(data, workers=[worker], direct=True, hash=False)


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
    return tuple(block.shape)


def max_abs(block) -> float:
    block = sp.csr_matrix(block)
    return float(abs(block).max()) if block.nnz else 0.0
