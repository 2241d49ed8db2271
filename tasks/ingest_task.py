"""The ingest as a Prefect task (:func:`tasks.ingest.ingest_source`, retried on transient I/O errors)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from eigenflow.storage.store import Store

from eigenflow.tasks.ingest import ingest_source
from eigenflow.tasks.task_options import IO_RETRIES, IO_RETRY_DELAY_SECONDS


# Not cached by Prefect: whether the store already exists is checked on the store itself every time.
@task(name="ingest", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAY_SECONDS, cache_policy=NO_CACHE)
def ingest_task(source: str, store_url: str | Store, *, scheduler_address: str | None = None,
                **options: Any) -> dict[str, Any]:
    """:func:`ingest_source` (``options``: its keyword arguments) as a Prefect task; with ``scheduler_address``,
    every chunk is read, validated and written by a Dask task on that cluster (``client.get_executor()``) for the
    sources that allow it.

    The workers must be able to read ``source`` and write ``store_url`` (true on a local cluster; a shared
    filesystem or object store otherwise, as for every other stage).
    """
    if scheduler_address is None:
        return ingest_source(source, store_url, **options)
    from distributed import Client

    with Client(scheduler_address, set_as_default=False) as client:
        return ingest_source(source, store_url, executor=client.get_executor(), **options)
