"""What a CLI command that runs a flow starts beside its argument checks, and stops at its end
(:class:`Infrastructure`): Prefect's local server and the local Dask cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

#: Seconds Prefect's local server gets to answer.
SERVER_START_SECONDS = 120.0


class Infrastructure:
    """What a flow command starts at once, side by side, and stops at its end: Prefect's local server (launched by
    :func:`options` as the command is chosen, ``ctx.obj``, when no API is configured) and the local Dask cluster
    (unless ``scheduler``), started in a thread while the command checks its arguments, its workers then loading
    the kNN kernels from the compiled-code cache (:func:`tasks.bodies.worker.warm_nndescent`) while Prefect
    starts. :meth:`ready` waits for both and gives the scheduler address the flow receives (its errors: the
    cluster's or the server's start, for the CLI's one line)."""

    def __init__(self, ctx: typer.Context, scheduler: str | None, n_workers: int, dtype: str):
        import threading
        from concurrent.futures import Future

        from eigenflow.flows.cluster import resolve_scheduler

        align_client_logs()
        self.server, self.stack = ctx.obj, contextlib.ExitStack()
        self.address: Future = Future()
        self._release = threading.Event()
        self._thread = None
        address = resolve_scheduler(scheduler)
        if address is not None:
            self.address.set_result(address)
        else:
            self._thread = threading.Thread(target=self._hold, args=(n_workers, dtype), daemon=True,
                                            name="eigenflow-local-cluster")
            self._thread.start()

    def _hold(self, n_workers: int, dtype: str) -> None:
        from distributed import Client

        from eigenflow.flows.cluster import local_cluster
        from eigenflow.tasks.bodies.worker import warm_nndescent

        try:
            with local_cluster(n_workers) as cluster, Client(cluster, set_as_default=False) as client:
                warm = [client.submit(warm_nndescent, (dtype,), ("euclidean",), ("exact", "nndescent"), pure=False,
                                      workers=[w]) for w in cluster.scheduler_info["workers"]]
                self.address.set_result(cluster.scheduler_address)
                self._release.wait()
                del warm
        except BaseException as exc:  # reported by ready()
            if not self.address.done():
                self.address.set_exception(exc)

    def ready(self) -> str:
        """The scheduler address, once the cluster and Prefect's server are up; the server's URL is then the run's
        Prefect API (without flow-run heartbeats: the server ends with the command)."""
        from eigenflow.flows.prefect_api import configured_api_url

        address = self.address.result()
        if self.server is not None and configured_api_url() is None:
            from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

            url = self.server.ready(timeout=SERVER_START_SECONDS)
            self.stack.enter_context(temporary_settings(updates={PREFECT_API_URL: url,
                                                                 PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        elif self.server is not None:  # an API configured in the active profile
            self.server.stop()
        return address

    def close(self) -> None:
        """Stop the cluster (waits for it) and leave the run's Prefect settings."""
        self.stack.close()
        self._release.set()
        if self._thread is not None:
            self._thread.join()


def align_client_logs() -> None:
    """Dask's client logger at the level the CLI gave distributed's loggers (``DASK_LOGGING__DISTRIBUTED``): Dask's
    defaults set it to ``warning`` on its own, so a lost scheduler's ERROR line would print before the command's one
    line without ``-v``."""
    import logging

    import distributed  # noqa: F401  (configures its loggers from Dask's settings)

    logging.getLogger("distributed.client").setLevel(logging.getLogger("distributed").level)


@contextlib.contextmanager
def flow_infrastructure(ctx: typer.Context, scheduler: str | None, n_workers: int,
                        dtype: str = "float32") -> Iterator[Infrastructure]:
    """:class:`Infrastructure` for the block (``dtype``: the X dtype whose kernels the workers load)."""
    infrastructure = Infrastructure(ctx, scheduler, n_workers, dtype)
    try:
        yield infrastructure
    finally:
        infrastructure.close()
