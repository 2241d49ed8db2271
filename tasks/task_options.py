"""The options of eigenflow's Prefect tasks.

What a resumed run reuses is decided by the store's run manifest alone (its completed stages, whose outputs are
checked intact), so no task result is cached by Prefect: ``cache_policy=NO_CACHE``, nothing persisted. Prefect
records each task's state, logs and artifacts.

``IO_TASK`` (ingest, write-back) is retried on transient I/O errors; ``COMPUTE_TASK`` is not (a mathematical
failure does not go away by retrying).
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NO_CACHE

#: Retries of I/O tasks and the delay between them (seconds): covers transient object-store errors.
IO_RETRIES = 2
IO_RETRY_DELAY_SECONDS = 2

IO_TASK: dict[str, Any] = {
    "retries": IO_RETRIES,
    "retry_delay_seconds": IO_RETRY_DELAY_SECONDS,
    "persist_result": False,
    "cache_policy": NO_CACHE,
}
COMPUTE_TASK: dict[str, Any] = {"persist_result": False, "cache_policy": NO_CACHE}
