"""Arrays one fit stage leaves in its worker's memory for the next, so that the next stage does not read back what
the previous one has just written.

The store stays the record: every stage still writes its outputs (a resumed run, another process, a reader of the
store use those). A stage body that runs on a Dask worker keeps its arrays in that worker's
:class:`HandoffPlugin` under a random token (:func:`keep`), writes the token into the attrs of what it stored, and
returns a small reference ``{"token", "worker"}``; the flow sends the next stage to that worker with the
reference, and that body takes the arrays (:func:`take`) only when the store's attrs carry the same token (the
store holds what was written from them). Otherwise (another worker, a restarted worker, a resumed run, a cluster
without the plugin) it reads the store; the stage's metadata says which (``"memory"`` or ``"store"``).

A stage may also leave its store write running in a thread of its worker (:func:`keep` with ``write``): the next
stage, sent to that worker, takes the arrays at once (:func:`take_pending`) and joins the write before it returns
(its error is raised there), so the write overlaps the next stage's work (the weight matrix's write overlaps the
eigensolve, which keeps one core busy). A write still running when the run ends or the worker closes is waited
for (:func:`drop_run`, the plugin's teardown): what a completed stage wrote is never cut off by the next stage's
failure.

Not Dask futures: a future that the next stage depends on is recomputed from its lineage when its worker dies, and
here that lineage is the whole kNN build for arrays the store already holds. A kept handoff is
never recomputed; a killed worker only loses it. What a flow run left (a failed run) is dropped at its end
(:func:`drop_run`, on every worker).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from eigenflow.spectral.placement import this_worker

#: attrs key of a stored array group holding the token of the handoff it was written with
TOKEN_ATTR = "handoff"
#: name of the plugin on the workers
PLUGIN_NAME = "eigenflow-handoffs"


logger = logging.getLogger(__name__)


class BackgroundWrite:
    """A stage's store write running in a thread of its worker, beside the next stage; :meth:`join` waits for it
    and raises its error."""

    def __init__(self, write: Callable[[], None], name: str) -> None:
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self.thread = threading.Thread(target=self._run, args=(write,), name=f"eigenflow-write-{name}", daemon=True)
        self.thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        try:
            write()
        except BaseException as exc:  # raised by join, in the stage that waits for the write
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - t0

    def join(self, *, raise_error: bool = True) -> float:
        """Wait for the write; returns its seconds. Its error is raised (``raise_error``) or logged."""
        self.thread.join()
        if self.error is not None:
            if raise_error:
                raise self.error
            logger.error("a stage's background store write failed: %s: %s", type(self.error).__name__, self.error)
        return float(self.seconds or 0.0)


class HandoffPlugin(WorkerPlugin):
    """Per worker: ``held[token] = (run, arrays, write)``, what stage bodies kept for the next stage and the store
    write each left running (None if none)."""

    idempotent = True  # registered by every flow run; a second registration keeps the first (and what it holds)

    def setup(self, worker: Any) -> None:
        self.held: dict[str, tuple[str, dict[str, Any], BackgroundWrite | None]] = {}

    def teardown(self, worker: Any) -> None:
        for _, _, write in self.held.values():  # a closing worker finishes what completed stages write
            if write is not None:
                write.join(raise_error=False)
        self.held.clear()


def _plugin(worker: Any) -> HandoffPlugin | None:
    """The plugin of ``worker``; None without a worker or when the flow did not register it."""
    plugin = None if worker is None else worker.plugins.get(PLUGIN_NAME)
    return plugin if isinstance(plugin, HandoffPlugin) else None


def new_token() -> str:
    """A token for :func:`keep`, written into the stored attrs before the arrays are kept."""
    return secrets.token_hex(8)


def keep(run: str, token: str, arrays: dict[str, Any], write: Callable[[], None] | None = None
         ) -> dict[str, str] | None:
    """Keep ``arrays`` in this worker's memory for the next stage of ``run``; returns the reference to pass on
    (``{"token", "worker"}``), or None where nothing can be kept (outside a worker, no plugin).

    ``write``: the stage's store write (which stores ``token`` in the attrs of what it writes). Where the arrays
    are kept it runs in a thread of this worker, joined by the stage that takes them (:func:`take_pending`);
    elsewhere it runs here, before this returns."""
    worker = this_worker()
    plugin = _plugin(worker)
    if plugin is None:
        if write is not None:
            write()
        return None
    plugin.held[token] = (run, arrays, None if write is None else BackgroundWrite(write, token))
    return {"token": token, "worker": worker.address}


def take(ref: dict[str, str] | None, stored_attrs: dict) -> dict[str, Any] | None:
    """The arrays kept under ``ref`` on this worker, once (the worker forgets them, so the taker frees them when it
    is done), when ``stored_attrs`` carry the same token; None otherwise (then read the store)."""
    if not ref or stored_attrs.get(TOKEN_ATTR) != ref.get("token"):
        return None
    plugin = _plugin(this_worker())
    held = None if plugin is None else plugin.held.pop(ref["token"], None)
    if held is not None and held[2] is not None:
        held[2].join()
    return None if held is None else held[1]


def take_pending(ref: dict[str, str] | None) -> tuple[dict[str, Any], BackgroundWrite] | None:
    """The arrays kept under ``ref`` on this worker with the store write their stage left running, once; None when
    this worker holds no such entry (then the store is read, as with :func:`take`). The caller joins the write
    before it returns (and before it reads what the write stores), and checks that the store then carries the
    token (:func:`check_written`)."""
    plugin = _plugin(this_worker())
    if not ref or plugin is None:
        return None
    held = plugin.held.get(ref["token"])
    if held is None or held[2] is None:
        return None
    del plugin.held[ref["token"]]
    return held[1], held[2]


def check_written(ref: dict[str, str], stored_attrs: dict, what: str) -> None:
    """After a joined background write: the store holds what was written from the arrays of ``ref``."""
    if stored_attrs.get(TOKEN_ATTR) != ref.get("token"):
        from eigenflow.storage.errors import StoreFormatError

        raise StoreFormatError(f"{what} was replaced while this run wrote it (handoff token "
                               f"{stored_attrs.get(TOKEN_ATTR)!r}, not {ref.get('token')!r}); run the flow again")


def drop_run(run: str, dask_worker: Any = None) -> int:
    """Forget every handoff of ``run`` on ``dask_worker`` (end of a flow run: ``client.run(drop_run, run)`` passes
    each worker); returns how many there were."""
    plugin = _plugin(dask_worker)
    if plugin is None:
        return 0
    tokens = [token for token, (owner, _, _) in plugin.held.items() if owner == run]
    for token in tokens:
        _, _, write = plugin.held.pop(token)
        if write is not None:  # a completed stage's write: finished, not cut off
            write.join(raise_error=False)
    return len(tokens)


def handoff_workers(ref: dict[str, str] | None) -> list[str] | None:
    """The worker a stage should run on to take ``ref`` (a preference: the scheduler may place it elsewhere, e.g.
    when that worker is gone, and the stage then reads the store); None without a reference."""
    return [ref["worker"]] if ref else None
