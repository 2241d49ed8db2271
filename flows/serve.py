"""Scheduled runs: the ``update`` flow (or the ``embed`` flow) and the ``extend`` flow served as Prefect deployments.

``eigenflow serve SOURCE STORE --method M -p ... --interval 86400`` (or ``--cron "0 2 * * *"``) registers two
deployments with the Prefect server of ``PREFECT_API_URL`` and serves them from one long-lived process
(``prefect.serve``): the scheduled one, and ``extend/<name>-extend`` on demand (``prefect deployment run
extend/<name>-extend --param store=... --param new_source=... --param out_store=...``).

The scheduled deployment is ``update/<name>`` by default (``flow="update"``): each run appends the rows the growing
source gained, places them with the store's model and refits by its policy (:mod:`flows.update`); the store is
embedded once with the given method and parameters when ``serve`` starts, if it holds no fit yet. With
``flow="embed"`` it is ``embed/<name>``: a full fit of the source on every run (for an AnnData source with
``use_rep`` and ``labels_obs``, as ``eigenflow embed --use-rep --labels-obs``), the ingest skipped while the source is
unchanged. ``extend`` and ``export`` keep using the previous completed run until the new one completes.

With ``keep_cluster`` (the default) the serving process also keeps one local Dask cluster up between runs and
passes its address to every run: the runs skip the cluster start, and the workers, warmed once
(:func:`tasks.bodies.worker.warm_nndescent`), keep the kNN search's kernels loaded. Every heavy stage (kNN build,
weights, eigensolve, write-back) runs on those workers (:func:`tasks.dask_calls.run_on_worker`), so a scheduled run
pays neither the kernels' load nor the cluster start. Prefect's runner starts each run in a fresh subprocess; it
claims scheduled runs a few seconds early, so for a scheduled run the subprocess's start is hidden.

A served run whose process died (the serving process killed with SIGKILL, say) would stay *Running* in Prefect
and hold the scheduled deployment's one concurrency slot. Served runs send Prefect's flow-run heartbeats every
:data:`HEARTBEAT_SECONDS`, and ``serve`` makes sure the server holds Prefect's documented zombie-run automation
(:func:`ensure_zombie_automation`): a run silent for :data:`ZOMBIE_SECONDS` is marked *Crashed*, which frees the
slot, whatever host it ran on; the next scheduled run then takes over the store's stale lock. It needs a server
that runs its services (``prefect server start``, Prefect Cloud), not one started with ``--no-services``.
SIGTERM and SIGINT stop ``serve`` within seconds: the run in progress is ended (its manifest ``failed``, the
store's lock released; *Cancelled* / *Crashed* in Prefect), its subprocess and the local Dask cluster are stopped
and the schedules paused.

``prefect deploy`` with the repository's ``prefect.yaml`` serves the same flows from a
work pool instead (docs/operations.md, "Scheduled runs").
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import Any

from eigenflow.spectral._validation import check_choice
from eigenflow.tasks.checks import check_embed_arguments
from eigenflow.tasks.update import REFIT_CHOICES

from eigenflow.flows.embed import embed
from eigenflow.flows.extend import extend
from eigenflow.flows.stops import stop_on_signals
from eigenflow.flows.update import update

logger = logging.getLogger("eigenflow.serve")

#: Deployment names: ``update/<name>`` (or ``embed/<name>``) and ``extend/<name>-extend``.
EXTEND_SUFFIX = "-extend"
#: The flows a schedule may run.
SCHEDULED_FLOWS = ("update", "embed")
#: Seconds between two heartbeats of a served run (Prefect's minimum), and the silence after which the zombie-run
#: automation marks the run *Crashed* (Prefect's documented value).
HEARTBEAT_SECONDS = 30
ZOMBIE_SECONDS = 90
#: The name of the automation :func:`ensure_zombie_automation` creates.
ZOMBIE_AUTOMATION = "eigenflow: crash flow runs without heartbeats"


def deployments(source: str, store: str, *, name: str, method: str, params: dict, labels: str | None,
                holdout: float, interval: float | None, cron: str | None, scheduler: str | None,
                n_workers: int, use_rep: str | None = None, labels_obs: str | None = None, flow: str = "update",
                refit: str = "auto") -> list[Any]:
    """The two :class:`prefect.deployments.runner.RunnerDeployment` objects (parameters checked first): the
    scheduled ``flow`` (``"update"`` or ``"embed"``) and ``extend`` on demand.

    ``use_rep`` / ``labels_obs`` (an AnnData source: X from ``obsm[use_rep]``, the labels from the ``obs`` column
    ``labels_obs``) are parameters of every scheduled run, as for ``eigenflow embed``."""
    check_embed_arguments(source, store, method, params, labels=labels, holdout=holdout, n_workers=n_workers,
                          random_state=0, use_rep=use_rep, labels_obs=labels_obs)
    check_choice("flow", flow, SCHEDULED_FLOWS)
    check_choice("refit", refit, REFIT_CHOICES)
    if (interval is None) == (cron is None):
        raise ValueError("give exactly one schedule: --interval SECONDS or --cron EXPR")
    schedule = {"interval": interval} if interval is not None else {"cron": cron}
    selection = {k: v for k, v in (("use_rep", use_rep), ("labels_obs", labels_obs)) if v is not None}
    if flow == "update":
        scheduled = update.to_deployment(
            name=name, parameters={"source": source, "store": store, "scheduler": scheduler, "n_workers": n_workers,
                                   "refit": refit, **selection}, **schedule, concurrency_limit=1,
            description=f"eigenflow update of {store} with the new rows of {source}")
    else:
        scheduled = embed.to_deployment(
            name=name, parameters={"source": source, "store": store, "method": method, "params": params,
                                   "labels": labels, "holdout": holdout, "scheduler": scheduler,
                                   "n_workers": n_workers, **selection}, **schedule, concurrency_limit=1,
            description=f"eigenflow embed of {source} into {store} with {method}")
    return [
        scheduled,
        extend.to_deployment(name=f"{name}{EXTEND_SUFFIX}", parameters={"store": store, "scheduler": scheduler,
                                                                         "n_workers": n_workers},
                             description=f"eigenflow extend with the latest model of {store}"),
    ]


@contextlib.contextmanager
def warm_cluster(n_workers: int) -> Iterator[str]:
    """A local Dask cluster kept up while serving, its workers' kNN kernels loaded once; yields its address. A
    worker that its Nanny restarts loads them again from the compiled-code cache when it first builds an index."""
    from distributed import Client

    from eigenflow.storage.signals import signals_held
    from eigenflow.tasks.bodies.worker import warm_nndescent

    from eigenflow.flows.cluster import local_cluster

    with contextlib.ExitStack() as stack:
        with signals_held():  # a stop signal during the start is raised once the cluster can be closed cleanly
            cluster = stack.enter_context(local_cluster(n_workers, 1))
        stack.callback(stop_workers_now, cluster)  # before the cluster's own close
        client = stack.enter_context(Client(cluster, set_as_default=False))
        client.run(warm_nndescent)
        yield cluster.scheduler_address


#: Seconds a served cluster's worker gets to stop when serve exits, before its Nanny kills it.
WORKER_STOP_SECONDS = 1.0


def stop_workers_now(cluster: Any) -> None:
    """Stop the workers of a local cluster with a :data:`WORKER_STOP_SECONDS` timeout (the cluster's own close
    gives each 5 s, waiting for the task it is running). When serve exits every run has ended, so a task still
    running on a worker belongs to none."""
    import asyncio

    async def close_all() -> None:
        await asyncio.gather(*(worker.close(timeout=WORKER_STOP_SECONDS) for worker in list(cluster.workers.values())))

    try:
        cluster.sync(close_all)
    except Exception:  # noqa: BLE001 - the cluster's own close follows and reports what is wrong
        logger.warning("serve: stopping the local workers failed; the cluster's close follows", exc_info=True)


def serve(source: str, store: str, *, name: str, method: str, params: dict, labels: str | None = None,
          holdout: float = 0.0, interval: float | None = None, cron: str | None = None,
          scheduler: str | None = None, n_workers: int = 2, keep_cluster: bool = True,
          use_rep: str | None = None, labels_obs: str | None = None, flow: str = "update",
          refit: str = "auto") -> None:
    """Serve the deployments until SIGTERM / Ctrl-C (see the module docstring)."""
    options = dict(name=name, method=method, params=params, labels=labels, holdout=holdout, interval=interval,
                   cron=cron, n_workers=n_workers, use_rep=use_rep, labels_obs=labels_obs, flow=flow, refit=refit)
    deployments(source, store, scheduler=scheduler, **options)  # the arguments are checked before a cluster starts
    ensure_zombie_automation()
    try:
        _serve(source, store, keep_cluster=keep_cluster, scheduler=scheduler, options=options)
    except KeyboardInterrupt:  # SIGTERM / Ctrl-C before a runner took over the signals: stopped, not failed
        logger.info("serve stopped by a signal")


def _serve(source: str, store: str, *, keep_cluster: bool, scheduler: str | None, options: dict) -> None:
    """The cluster and the runner of :func:`serve`, each stopped in turn at the end."""
    with contextlib.ExitStack() as stack, stop_on_signals():  # a stop during the cluster's start closes it
        if keep_cluster and scheduler is None:
            scheduler = stack.enter_context(warm_cluster(options["n_workers"]))
        served = deployments(source, store, scheduler=scheduler, **options)
        if options["flow"] == "update" and not has_fit(store):  # the first fit, that the updates follow
            logger.info("serve: embedding %s into %s before the first scheduled update", source, store)
            embed(source, store, method=options["method"], params=options["params"], labels=options["labels"],
                  holdout=options["holdout"], scheduler=scheduler, n_workers=options["n_workers"],
                  use_rep=options["use_rep"], labels_obs=options["labels_obs"])
        serve_with_prefect_runner(served)


def has_fit(store: str) -> bool:
    """Whether ``store`` holds a completed ``embed`` run (the model that scheduled updates follow)."""
    from eigenflow.storage.manifest import readable_manifests
    from eigenflow.tasks.ingest import existing_store_attrs

    return existing_store_attrs(store) is not None and any(
        m.flow == "embed" and m.status == "completed" for m in readable_manifests(store))


def serve_with_prefect_runner(served: list[Any]) -> None:
    """``prefect.serve(*served)``, except that SIGINT stops the runner as SIGTERM does (Prefect's runner handles
    only SIGTERM: on a bare SIGINT it returned at once and left the run in progress *Running* in Prefect, its
    manifest ``running`` and its lock behind). Both end the run subprocesses (SIGTERM: the flow marks its manifest
    ``failed`` and releases the store's lock, Prefect's runner marks the run *Cancelled*) and pause the schedules."""
    import asyncio

    from prefect.exceptions import TerminationSignal
    from prefect.runner import Runner

    class _Runner(Runner):
        async def start(self, *args: Any, **kwargs: Any) -> None:
            signal.signal(signal.SIGINT, self.handle_sigterm)
            await super().start(*args, **kwargs)

    runner = _Runner(pause_on_shutdown=True, heartbeat_seconds=HEARTBEAT_SECONDS)
    for deployment in served:
        runner.add_deployment(deployment)
    print("serving " + ", ".join(f"{d.flow_name}/{d.name}" for d in served) + "; stop with Ctrl-C or SIGTERM",
          flush=True)  # in place of prefect.serve's start message
    try:
        asyncio.run(runner.start())
    except (KeyboardInterrupt, TerminationSignal):  # a signal before the runner started
        pass


def ensure_zombie_automation() -> None:
    """Create on the Prefect server, unless it has it, the automation of Prefect's guide "detect zombie flows": a
    flow run that sent a heartbeat and then neither a heartbeat nor a final state for :data:`ZOMBIE_SECONDS` is
    set *Crashed*."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    with get_client(sync_client=True) as client:
        if client.read_automations_by_name(ZOMBIE_AUTOMATION):
            return
    final = {f"prefect.flow-run.{state}" for state in ("Completed", "Failed", "Cancelled", "Crashed")}
    Automation(name=ZOMBIE_AUTOMATION, trigger=EventTrigger(
        after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat", *final},
        match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
        for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
        within=timedelta(seconds=ZOMBIE_SECONDS)), actions=[ChangeFlowRunState(
            state=StateType.CRASHED, message=f"no heartbeat for {ZOMBIE_SECONDS} s: its process is gone "
                                             "(marked by eigenflow serve's zombie-run automation)")]).create()
