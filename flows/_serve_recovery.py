"""Served runs whose process died: found, marked *Crashed* in Prefect, their deployment's concurrency slot freed.

A served run's process can die without telling the server (SIGKILL, OOM killer, power loss): the run stays
*Running* (or *Pending*) and keeps its deployment's one concurrency slot (``concurrency_limit=1``), so every
later scheduled run waits in ``AwaitingConcurrencySlot``. ``eigenflow serve`` repairs that by itself:

- **owner record**: the process that executes a served run writes itself on its flow run as it starts
  (:func:`record_served_run`), as the label :data:`OWNER_LABEL` (JSON of :func:`storage.lock.process_identity`:
  host, pid, process start time) and as Prefect's ``infrastructure_pid`` (``host:pid``, shown by the UI).
- **recovery** (:func:`recover_crashed_runs`, when ``serve`` starts and every :data:`RECOVER_SECONDS` while it
  serves): every *Pending* / *Running* / *Cancelling* run of the served deployments whose owner record names a
  process of this host that no longer exists (no process with that pid, or one with another start time: the pid
  was reused) is set *Crashed* with a message naming that process; the server then frees the concurrency slot.
  A run without an owner record (killed before its flow started), or owned by a live process or by another host,
  is left alone: it is never marked on a guess. Prefect's own detection of dead runs (flow-run heartbeats and a
  zombie-run automation on the server) sees such runs only after their heartbeats have been missed for minutes;
  this check, which knows the process, frees the schedule at once.

The store side needs no repair: the dead run's manifest stays ``running``, which
:func:`storage.manifest.effective_status` reads as ``crashed`` (same owner rule), and its lock is stale, so the
next scheduled run takes it over as ``eigenflow embed`` does. A scheduled run has a new run name, so it does not
resume the dead run's stages: it reuses the store's ingest (skipped while the source is unchanged) and recomputes
the fit stages.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

logger = logging.getLogger("eigenflow.serve")

#: Flow-run label holding the owner record (JSON: host, pid, process_start).
OWNER_LABEL = "eigenflow.owner"
#: Seconds between two recoveries while serving.
RECOVER_SECONDS = 30.0


def record_owner(client: Any, flow_run_id: UUID, owner: dict[str, Any]) -> None:
    """Write ``owner`` (a :func:`storage.lock.process_identity` record) on the flow run."""
    client.update_flow_run(flow_run_id, infrastructure_pid=f"{owner['host']}:{owner['pid']}")
    client.update_flow_run_labels(flow_run_id, {OWNER_LABEL: json.dumps(owner, sort_keys=True)})


def run_owner(flow_run: Any) -> dict[str, Any] | None:
    """The owner record of ``flow_run``; None when it has none (or an unreadable one)."""
    raw = (flow_run.labels or {}).get(OWNER_LABEL)
    try:
        owner = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not owner.get("host"):
        return None
    return owner


def owner_gone(owner: dict[str, Any]) -> bool:
    """True only when the owner's process provably no longer exists: it ran on this host and no process with
    its pid and start time is alive (:func:`storage.lock.owner_alive`); a process of another host is never gone."""
    import socket

    from eigenflow.storage.lock import owner_alive

    return owner.get("host") == socket.gethostname() and not owner_alive(owner, taken=None)


def served_deployment_ids(client: Any, names: Sequence[str]) -> list[UUID]:
    """The ids of the deployments ``"<flow>/<deployment>"`` that exist on the server (others are skipped)."""
    from prefect.exceptions import ObjectNotFound

    ids = []
    for name in names:
        try:
            ids.append(client.read_deployment_by_name(name).id)
        except ObjectNotFound:
            continue
    return ids


def active_runs(client: Any, deployment_ids: Sequence[UUID]) -> list[Any]:
    """The *Pending* / *Running* / *Cancelling* flow runs of the deployments."""
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterDeploymentId, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    if not deployment_ids:
        return []
    active = [StateType.PENDING, StateType.RUNNING, StateType.CANCELLING]
    return client.read_flow_runs(flow_run_filter=FlowRunFilter(
        deployment_id=FlowRunFilterDeploymentId(any_=list(deployment_ids)),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=active))))


def recover_crashed_runs(client: Any, deployment_ids: Sequence[UUID]) -> list[UUID]:
    """Set *Crashed* every active run of the deployments whose owner process is provably gone (module
    docstring); returns their ids."""
    from prefect.states import Crashed

    crashed = []
    for flow_run in active_runs(client, deployment_ids):
        owner = run_owner(flow_run)
        if owner is None or not owner_gone(owner):
            continue
        message = (f"its process is gone (pid {owner['pid']} on {owner['host']}, started at "
                   f"{owner.get('process_start')}: no process with that pid and start time now); "
                   "marked by eigenflow serve")
        client.set_flow_run_state(flow_run.id, Crashed(message=message), force=True)
        logger.warning("flow run %s (%s) crashed: %s", flow_run.name, flow_run.id, message)
        crashed.append(flow_run.id)
    return crashed


def record_served_run() -> None:
    """Record this process as the owner of the served flow run it executes (called at the start of the flows; a
    run that is not a deployment's, e.g. a CLI run, records nothing). Prefect names the run through its public
    ``prefect.runtime``."""
    from prefect.runtime import deployment, flow_run

    if deployment.id is None or flow_run.id is None:
        return
    from prefect.client.orchestration import get_client

    from eigenflow.storage.lock import process_identity

    with get_client(sync_client=True) as client:
        record_owner(client, UUID(str(flow_run.id)), process_identity())


class ServeWatch(threading.Thread):
    """While serving: recovers crashed runs every ``recover_seconds``."""

    def __init__(self, names: Sequence[str], *, recover_seconds: float = RECOVER_SECONDS):
        super().__init__(name="eigenflow-serve-watch", daemon=True)
        self.names = tuple(names)
        self.recover_seconds = recover_seconds
        self._stop_event = threading.Event()
        self._context = contextvars.copy_context()  # Prefect's settings (API URL) of the serving thread

    def run(self) -> None:
        self._context.run(self._loop)

    def stop(self) -> None:
        """Stop the watch (returns at once)."""
        self._stop_event.set()

    def _loop(self) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while not self._stop_event.wait(self.recover_seconds):
                try:
                    recover_crashed_runs(client, served_deployment_ids(client, self.names))
                except Exception:  # noqa: BLE001 - the server may be briefly unreachable: try again next time
                    logger.warning("serve watch: the Prefect server call failed; retrying", exc_info=True)
