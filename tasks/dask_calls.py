"""Running eigenflow's work on the Dask cluster from its Prefect tasks: stage bodies, per-chunk maps and
published futures.

Tasks run in the flow process and only orchestrate: a heavy stage's body runs as one Dask task on a worker
(:func:`run_on_worker`), per-chunk work as one Dask task per row chunk of X (:func:`map_row_chunks`), each
writing whole aligned chunks of the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eigenflow.tasks.bodies.worker import call_on_worker

#: Progress callback of :func:`map_row_chunks`: ``(n_done, n_total)``.
ProgressFn = Callable[[int, int], None]


def map_row_chunks(
    fn: Callable[..., Any],
    bounds: Sequence[tuple[int, int]],
    *,
    args: Sequence[Any] = (),
    per_chunk: Sequence[tuple] | None = None,
    client: Any = None,
    name: str = "chunk",
    on_progress: ProgressFn | None = None,
) -> list[Any]:
    """Run ``fn(*args, start, stop, *per_chunk[i])`` on the Dask cluster for every row chunk, in order.

    Parameters
    ----------
    fn : callable
        A module-level function (importable on the workers) that reads its rows from the store,
        computes and writes whole aligned chunks; it returns small metadata.
    bounds : sequence of (start, stop)
        Row chunks (``storage.arrays.row_chunks``).
    args : sequence
        Arguments shared by every call (store handle, run id, a scattered model future, ...).
    per_chunk : sequence of tuples, optional
        Extra arguments of chunk ``i`` (small arrays: sent with that task only).
    client : distributed.Client, optional
        Default: the flow's client (``distributed.get_client()``).
    name : str
        Prefix of the Dask task keys (shown on the dashboard).
    on_progress : callable, optional
        Called with ``(n_done, n_total)`` as chunks finish.

    Returns
    -------
    list
        The results of ``fn`` in chunk order. The first failing chunk's exception is raised (the other
        chunks are cancelled).
    """
    from distributed import as_completed, get_client

    client = client or get_client()
    extras = per_chunk if per_chunk is not None else [()] * len(bounds)
    futures = [
        client.submit(fn, *args, start, stop, *extra, key=f"{name}-{start}-{_token()}", pure=False)
        for (start, stop), extra in zip(bounds, extras)
    ]
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            if future.status == "error":
                future.result()  # raises the worker's exception here
            if on_progress is not None:
                on_progress(done, len(futures))
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])


def submit_to_worker(fn: Callable[..., Any], *args: Any, name: str, client: Any = None,
                     workers: list[str] | None = None, **kwargs: Any):
    """Submit ``fn(*args, **kwargs)`` as one Dask task (key ``<name>-<hex>``); returns its future.

    ``fn`` is a module-level function of a Prefect-free module (the workers import it). The scheduler picks the
    worker (among ``workers`` if it can: a preference, not a restriction) and reruns the task elsewhere if that
    worker dies (:mod:`tasks.bodies.worker`).
    """
    from distributed import get_client

    client = client or get_client()
    return client.submit(call_on_worker, fn, args, kwargs, key=f"{name}-{_token()}", pure=False, workers=workers,
                         allow_other_workers=workers is not None)


def run_on_worker(fn: Callable[..., Any], *args: Any, name: str, client: Any = None,
                  workers: list[str] | None = None, **kwargs: Any) -> Any:
    """Run one stage body on a Dask worker and wait for its (small) result: :func:`submit_to_worker` + result.

    A dict result carries the worker's address, seconds and peak memory (:func:`tasks.bodies.worker.call_on_worker`).
    """
    return submit_to_worker(fn, *args, name=name, client=client, workers=workers, **kwargs).result()


def publish_future(future: Any, name: str, client: Any = None) -> None:
    """Keep the result of ``future`` on the cluster under ``name`` (replacing an older one) for a later stage.

    The scheduler keeps a published key wanted: if the worker holding it dies, the task is run again.
    """
    from distributed import get_client

    client = client or get_client()
    unpublish(name, client)
    client.publish_dataset(future, name=name)


def published_future(name: str, client: Any = None) -> Any:
    """The future published under ``name`` on the flow's cluster, or None."""
    from distributed import get_client

    client = client or get_client()
    return client.get_dataset(name) if name in client.list_datasets() else None


def unpublish(name: str, client: Any = None) -> None:
    """Drop the dataset ``name`` from the cluster (no-op if there is none)."""
    from distributed import get_client

    client = client or get_client()
    if name in client.list_datasets():
        client.unpublish_dataset(name)


def _token() -> str:
    import secrets

    return secrets.token_hex(4)
