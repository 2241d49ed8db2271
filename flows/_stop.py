"""How a CLI ``embed`` / ``extend`` run stops: on a signal, or when its Prefect API goes away.

:class:`RunGuard` (``with RunGuard(store, run, resume=...) as guard:`` around the flow call) turns

- SIGINT (Ctrl-C) and SIGTERM, sent to the CLI's process group or to its pid alone, into :class:`RunInterrupted`
  in the main thread: the run's manifest records it as failed (:func:`storage.manifest.run_context`), the
  store's lock is released, the Dask cluster closed; exit code 128 + the signal's number (130, 143). The
  children do not receive the group's signal: Prefect's temporary server runs in its own session
  (:mod:`flows._prefect_start`), the local Dask workers ignore it (:mod:`tasks.worker_signals`); the flow
  closes the cluster, an ``atexit`` handler stops the server, the forced exit kills what is left. During the flow Prefect's own SIGTERM handler raises its
  ``TerminationSignal`` first and then delivers the signal again to this handler.
- a Prefect API that does not answer its ``/health`` for :func:`api_timeout` seconds (default 30,
  ``$EIGENFLOW_PREFECT_API_TIMEOUT``) into :class:`PrefectAPILost`, raised in the main thread by a watchdog
  thread (through :data:`API_LOST_SIGNAL`): without it Prefect's client retries every state report of the run
  for minutes.

Either way the run gets :data:`FORCED_EXIT_SECONDS` to unwind and the process to exit (the ``atexit``
stop of its temporary server included); after that the guard records the run as failed itself if it is still
``running``, releases the lock, kills the remaining children and ends the process.
Completed stages stay in the store's manifest: ``--run-name`` resumes from them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import datetime
from typing import Any

from eigenflow.flows._prefect_start import api_answers, env_seconds, imported_module, running_server

#: Environment variable: seconds an unreachable Prefect API is tolerated before the run fails.
API_TIMEOUT_ENV = "EIGENFLOW_PREFECT_API_TIMEOUT"
DEFAULT_API_TIMEOUT = 30.0
#: Seconds between two probes of the Prefect API's health.
PROBE_SECONDS = 2.0
#: Seconds a stopping run has to unwind before the guard ends the process itself.
FORCED_EXIT_SECONDS = 10.0
#: The signal the watchdog sends to the main thread when the API is lost (held by :mod:`storage.signals`).
API_LOST_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(KeyboardInterrupt):
    """A run stopped from outside its work (a base exception: no ``except Exception`` of a library keeps it)."""

    exit_code = 1


class RunInterrupted(RunStopped):
    """SIGINT or SIGTERM received; exit code 128 + the signal's number."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted ({signal.Signals(signum).name})")


class PrefectAPILost(RunStopped):
    """The Prefect API did not answer for the configured time."""

    def __init__(self, url: str, since: float):
        self.url, self.since = url, since
        super().__init__(f"Prefect API at {url} unreachable since {datetime.fromtimestamp(since):%H:%M:%S}")


def api_timeout() -> float:
    """``$EIGENFLOW_PREFECT_API_TIMEOUT`` (seconds > 0) or :data:`DEFAULT_API_TIMEOUT`."""
    return env_seconds(API_TIMEOUT_ENV, DEFAULT_API_TIMEOUT)


def configured_api_url() -> str | None:
    """``$PREFECT_API_URL`` or the active profile's API URL; None in ephemeral mode (or while Prefect is not
    imported, or still being imported by another thread, and the variable is unset). The URL of this process's own
    temporary server (:mod:`flows._prefect_start`, which sets the variable) is not a configured one."""
    own = _own_server_url()
    url = os.environ.get("PREFECT_API_URL")
    if url and url.rstrip("/") != own:
        return url.rstrip("/")
    settings = imported_module("prefect.settings")
    if settings is not None:
        configured = settings.get_current_settings().api.url
        if configured and str(configured).rstrip("/") != own:
            return str(configured).rstrip("/")
    return None


def _own_server_url() -> str | None:
    """The API URL of the temporary server this process started and has not stopped, if any."""
    server = running_server()
    return None if server is None else server.api_url


def prefect_api_url() -> str | None:
    """The API the run reports to: :func:`configured_api_url`, or this process's temporary server once its
    process exists; None while unknown."""
    return configured_api_url() or _own_server_url()


_CURRENT: RunGuard | None = None


def current_stop() -> RunStopped | None:
    """The stop of the run guarded in this process, if it is stopping (for the CLI's error reporting)."""
    return None if _CURRENT is None else _CURRENT.stopping


def raise_if_stopping() -> None:
    """Raise the stop of the run guarded in this process if it is stopping: the check at each stage's start
    (:meth:`flows._runtime.RunContext.stage`), for a stop whose exception was lost on its way (Python ignores an
    exception that a signal handler raises inside a garbage-collection callback or a ``__del__`` method)."""
    stop = current_stop()
    if stop is not None:
        raise stop


def bridge_prefect_sigterm() -> None:
    """Called at the start of a flow run: when a guarded CLI run's SIGTERM handler has been replaced by Prefect's
    engine (its handler raises ``TerminationSignal`` and delivers the signal again to the guard once that
    exception reaches the engine), wrap Prefect's handler so that the guard records the stop first: its forced
    exit and :func:`raise_if_stopping` then stop the run even when that exception is lost. The engine puts the
    guard's handler back at the end of the flow run."""
    if _CURRENT is not None and threading.current_thread() is threading.main_thread():
        _CURRENT.record_before(signal.SIGTERM)


class RunGuard:
    """Signal handlers and the Prefect API watchdog of one CLI run (see the module docstring).

    ``store`` / ``run``: where the run's manifest is (``run`` may be set once known, before the flow starts).
    """

    def __init__(self, store: str, run: str | None = None, *, timeout: float | None = None):
        self.store, self.run = store, run
        self.timeout = api_timeout() if timeout is None else timeout
        self.stopping: RunStopped | None = None
        self.down_since: float | None = None
        self.down_url: str | None = None
        self._answered: set[str] = set()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._reported = False
        self._previous: dict[int, Any] = {}
        self._previous_unraisable = sys.unraisablehook

    def __enter__(self) -> "RunGuard":
        global _CURRENT
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self._previous[API_LOST_SIGNAL] = signal.signal(API_LOST_SIGNAL, self._on_api_lost)
        self._previous_unraisable, sys.unraisablehook = sys.unraisablehook, self._on_unraisable
        _CURRENT = self
        threading.Thread(target=self._watch_api, name="eigenflow-api-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        """A run that ended by itself: the watchdog stops, the handlers are restored. A stopping run keeps both
        until the process ends: the forced exit also bounds the interpreter's exit (Prefect's ``atexit`` flushes
        of logs and events to its API, the stop of its temporary server)."""
        global _CURRENT
        if self.stopping is not None:
            return
        self._done.set()
        _CURRENT = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = self._previous_unraisable

    def record_before(self, signum: int) -> None:
        """Wrap the handler of ``signum`` installed over this guard's (Prefect's, during a flow run) so that this
        guard records the stop before that handler runs (:func:`bridge_prefect_sigterm`). Main thread only."""
        handler = signal.getsignal(signum)
        if not callable(handler) or handler == self._on_signal:
            return

        def record_then_handler(received: int, frame: Any) -> None:
            self._begin(RunInterrupted(received))
            handler(received, frame)

        signal.signal(signum, record_then_handler)

    def _on_unraisable(self, unraisable: Any) -> None:
        """A stop raised by a signal handler inside a garbage-collection callback or a ``__del__`` method, where
        Python ignores it: recorded by the guard already (:func:`raise_if_stopping` and the forced exit act on
        it), so not printed; anything else goes to the previous hook."""
        kind = unraisable.exc_type
        if kind is not None and (issubclass(kind, RunStopped) or kind.__name__ == "TerminationSignal") \
                and self.stopping is not None:
            return
        self._previous_unraisable(unraisable)

    # ---- stopping -------------------------------------------------------------------------------------------
    def _begin(self, stop: RunStopped) -> bool:
        """Record the first stop and start the forced-exit timer; False when the run is already stopping."""
        with self._lock:
            if self.stopping is not None:
                return False
            self.stopping = stop
        threading.Thread(target=self._force_exit, name="eigenflow-forced-exit", daemon=True).start()
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        """SIGINT / SIGTERM: raise :class:`RunInterrupted` once; later signals wait for the stop under way."""
        if self._begin(RunInterrupted(signum)):
            raise self.stopping

    def _on_api_lost(self, signum: int, frame: Any) -> None:
        """The watchdog's signal: raise its :class:`PrefectAPILost` in the main thread."""
        if isinstance(self.stopping, PrefectAPILost) and not getattr(self.stopping, "raised", False):
            self.stopping.raised = True
            raise self.stopping

    def _watch_api(self) -> None:
        """Probe the Prefect API every :data:`PROBE_SECONDS`; lost after :attr:`timeout` seconds without answer
        (a temporary server still starting up is not probed as lost before it has answered once)."""
        while not self._done.wait(PROBE_SECONDS):
            url = prefect_api_url()
            if url is None or self.stopping is not None:
                continue
            if api_answers(url, timeout=min(5.0, self.timeout)):
                self.down_since = None
                self._answered.add(url)
                continue
            if url not in self._answered and url != configured_api_url():
                continue
            if self.down_since is None:
                self.down_since, self.down_url = time.time(), url
            elif time.time() - self.down_since >= self.timeout:
                if self._begin(PrefectAPILost(url, self.down_since)):
                    signal.pthread_kill(threading.main_thread().ident, API_LOST_SIGNAL)
                return

    def stop_of(self, exc: BaseException) -> RunStopped | None:
        """The stop that ended the run with ``exc``: the guard's own, or a lost API when the run failed while the
        API was not answering (e.g. Prefect's client gave up first); None for any other failure."""
        if isinstance(exc, RunStopped) and self.stopping is None:
            return exc
        if self.stopping is not None:
            return self.stopping
        if self.down_since is not None and not api_answers(self.down_url, timeout=2.0):
            return PrefectAPILost(self.down_url, self.down_since)
        return None

    # ---- reporting and the end of the process ---------------------------------------------------------------
    def line(self, stop: RunStopped) -> str:
        """The one-line message of ``stop``, saying what the store's manifest of the run records."""
        if self.run is None:
            return f"{stop}; nothing was recorded in {self.store} (stopped before the run started)"
        status = self._status()
        hint = f"; rerun with --run-name {self.run} to resume"
        if status == "failed":
            where = f"run {self.run} recorded as failed{hint}" if isinstance(stop, RunInterrupted) else \
                f"the run is recorded as failed in the store{hint.replace(' to resume', '')}"
        elif status == "completed":
            where = f"run {self.run} had completed; its results are in {self.store}"
        else:
            where = f"run {self.run} was not recorded in {self.store} (stopped before it started)"
        return f"{stop}; {where}"

    def _status(self) -> str | None:
        """Status of the run's manifest in the store (None: no manifest)."""
        from eigenflow.storage.errors import StorageError
        from eigenflow.storage.manifest import read_manifest

        try:
            return read_manifest(self.store, self.run).status
        except (StorageError, OSError):
            return None

    def report_once(self, stop: RunStopped) -> str | None:
        """The line of ``stop`` the first time it is asked for (the main thread or the forced exit), else None."""
        with self._lock:
            if self._reported:
                return None
            self._reported = True
        return self.line(stop)

    def _force_exit(self) -> None:
        """After :data:`FORCED_EXIT_SECONDS` of a stop still unwinding: record the run failed, release the lock,
        kill the children, print the line and end the process."""
        if self._done.wait(FORCED_EXIT_SECONDS):
            return
        stop = self.stopping
        if self.run is not None:
            mark_failed(self.store, self.run, f"{type(stop).__name__}: {stop}")
            release_lock(self.store, self.run)
        kill_children()
        text = self.report_once(stop)
        if text is not None:
            sys.stderr.write(f"error: {text}\n")
            sys.stderr.flush()
        os._exit(stop.exit_code)


def mark_failed(store: str, run: str, error: str) -> None:
    """Record ``run`` as failed with ``error`` if its manifest in ``store`` is still ``running`` in this process."""
    from eigenflow.storage.errors import StorageError
    from eigenflow.storage.manifest import read_manifest, write_manifest

    try:
        manifest = read_manifest(store, run)
        if manifest.status == "running" and manifest.pid == os.getpid():
            manifest.finish("failed", error)
            write_manifest(store, manifest)
    except (StorageError, OSError):
        pass


def release_lock(store: str, run: str) -> None:
    """Remove the store's lock if ``run`` of this process holds it."""
    from eigenflow.storage.errors import StorageError
    from eigenflow.storage.lock import LOCK_KEY, read_lock
    from eigenflow.storage.store import filesystem

    try:
        holder = read_lock(store)
        if holder and holder.get("run") == run and holder.get("pid") == os.getpid():
            fs, root = filesystem(store)
            fs.rm_file(f"{root.rstrip('/')}/{LOCK_KEY}")
    except (StorageError, OSError):
        pass


def kill_children() -> None:
    """SIGKILL every descendant process of this one that is still alive, and reap them."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=5)
