"""What a re-run under the same name reuses: the store's manifest of that run is the one record.

A re-run with the name of a failed or crashed run resumes it: :func:`check_run_identity` refuses it unless its
parameters are those of the first attempt, :func:`finished_stages` lists the stages that attempt completed (a
flow reuses each whose outputs are still intact).
"""

from __future__ import annotations

import json
from typing import Any

from eigenflow.spectral.errors import ParameterError
from eigenflow.storage.errors import DamagedManifestError, StoreFormatError
from eigenflow.storage.manifest import effective_status, list_runs, read_manifest
from eigenflow.storage.store import Store
from eigenflow.tasks.ingest import existing_store_attrs

#: Manifest parameters that do not change a run's result (how it was executed), left out of its identity.
EXECUTION_PARAMETERS = ("source", "chunk_rows", "n_workers", "scheduler")


def check_run_identity(store: str | Store, run: str, identity: dict[str, Any], *, overwrite_run: bool = False) -> None:
    """Refuse to reuse the name of a run of ``store`` that was started with other parameters, or whose manifest
    cannot be read (its parameters are unknown), unless ``overwrite_run``.

    A re-run under the same name resumes that run (finished stages are reused), so it must be the same run:
    the method, labels, hold-out and every method parameter must be equal. The error names the differences.
    """
    if overwrite_run:
        return
    try:
        if existing_store_attrs(store) is None or run not in list_runs(store):
            return
        before = read_manifest(store, run).parameters
    except DamagedManifestError as exc:
        raise StoreFormatError(f"run {run!r} of store {store} cannot be resumed: its manifest {exc.path} cannot be "
                               f"read ({exc.reason}); pass overwrite_run=True (CLI --overwrite-run) to start it "
                               "again from nothing, or choose a new run name") from exc
    except StoreFormatError:
        return  # not a store yet (or not one of ours): the ingest decides
    now = json.loads(json.dumps(identity, default=str))
    keys = (set(before) | set(now)) - set(EXECUTION_PARAMETERS)
    differing = sorted(k for k in keys if before.get(k) != now.get(k))
    if differing:
        changes = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differing)
        raise ParameterError(f"run_name {run!r} of store {store} was started with other parameters ({changes}); "
                             "choose a new run name")


def finished_stages(store: str | Store, run: str) -> dict[str, dict]:
    """``{stage: info}`` of the stages that a previous attempt of ``run`` (failed, or crashed: killed) completed,
    read from its manifest in the store; empty for a new run or one that is still running."""
    try:
        if existing_store_attrs(store) is None or run not in list_runs(store):
            return {}
        previous = read_manifest(store, run)
    except StoreFormatError:
        return {}
    if effective_status(previous) == "running":
        return {}  # a live run: the lock refuses this one
    return {s.name: dict(s.info) for s in previous.stages if s.status == "completed"}
