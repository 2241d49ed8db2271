"""The options of eigenflow's Prefect tasks and their cache keys.

``IO_TASK`` (ingest, write-back: retried on transient I/O errors) and ``COMPUTE_TASK`` (no retries: a
mathematical failure does not go away by retrying) both persist their results with the cache policy
``TASK_SOURCE + INPUTS`` (STACK.md "Resume after a crash"). A task's inputs always include the store (its
:class:`storage.store.Store` handle, keyed by its location), the run id and the
:func:`storage.ingest.store_token` of the store,
so

- re-running a failed run (same ``run_name``) on the same store reuses every task that had finished and
  recomputes only what is missing;
- a new run, or a store that was re-ingested (new token), recomputes everything.

Tasks return small JSON-able metadata, never big arrays: the cached results are small files in Prefect's local
result storage (``$PREFECT_HOME/storage``, or ``PREFECT_RESULTS_LOCAL_STORAGE_PATH``).
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import INPUTS, TASK_SOURCE

#: Cache policy of every eigenflow task (no RUN_ID: a re-run of the same run reuses finished tasks).
CACHE_POLICY = TASK_SOURCE + INPUTS
#: Retries of I/O tasks and the delay between them (seconds): covers transient object-store errors.
IO_RETRIES = 2
IO_RETRY_DELAY_SECONDS = 2

IO_TASK: dict[str, Any] = {
    "retries": IO_RETRIES,
    "retry_delay_seconds": IO_RETRY_DELAY_SECONDS,
    "persist_result": True,
    "cache_policy": CACHE_POLICY,
}
COMPUTE_TASK: dict[str, Any] = {"persist_result": True, "cache_policy": CACHE_POLICY}
#: A compute task with a ``handoff`` parameter (:mod:`tasks.stage_handoff`: a worker address and a random token,
#: where its input may be in memory): not part of the cache key, which names what the task computes.
HANDOFF_TASK: dict[str, Any] = {"persist_result": True, "cache_policy": TASK_SOURCE + (INPUTS - "handoff")}
