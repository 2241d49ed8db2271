"""The ingest as a Prefect task (:func:`tasks.ingest.ingest_source`, retried on transient I/O errors)."""

from __future__ import annotations

from typing import Any

from prefect import task

from eigenflow.storage.store import Store

from eigenflow.tasks.ingest import ingest_source
from eigenflow.tasks.task_options import IO_TASK


@task(name="ingest", **IO_TASK)
def ingest_task(source: str, store_url: str | Store, *, client: Any = None, **options: Any) -> dict[str, Any]:
    """:func:`ingest_source` (``options``: its keyword arguments) as a Prefect task; with a Dask ``client``, every
    chunk is read, validated and written by a Dask task on its cluster (``client.get_executor()``) for the sources
    that allow it. Whether the store already holds the source is checked on the store itself every time.

    The workers must be able to read ``source`` and write ``store_url`` (true on a local cluster; a shared
    filesystem or object store otherwise, as for every other stage).
    """
    executor = None if client is None else client.get_executor()
    return ingest_source(source, store_url, executor=executor, **options)
