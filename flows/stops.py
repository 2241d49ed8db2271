"""How a run stops from outside its work: a signal (SIGINT, SIGTERM), or a Prefect API that stopped answering
(:class:`PrefectAPILost`, raised by :mod:`flows.prefect_api`).

:func:`stop_on_signals` follows the pattern of distributed's ``_signals`` module: the first SIGINT / SIGTERM puts
the previous handlers back (a second signal then ends the process as it would without eigenflow) and raises
:class:`RunInterrupted` in the main thread. It unwinds the run: the run context records the run as failed with
that reason and releases the store's lock, the Dask cluster is closed, and the CLI prints one line and exits with
128 + the signal's number. During a Prefect flow run Prefect's engine turns SIGTERM into its own
``TerminationSignal`` first and then delivers the signal again to this handler; :func:`stop_of` names both.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

#: The signals that stop a run.
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


class Received:
    """The stop signal a :func:`stop_on_signals` block received (:attr:`signum`, None while none)."""

    signum: int | None = None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[Received]:
    """Raise :class:`RunInterrupted` in the main thread on the first SIGINT / SIGTERM of the block (the previous
    handlers are put back at once, so a second signal acts as it would without the block); yields a
    :class:`Received`. Elsewhere than in the main thread, nothing is installed."""
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def on_signal(signum: int, frame: Any) -> None:
        restore()
        received.signum = signum
        raise RunInterrupted(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    try:
        yield received
    finally:
        restore()


def stop_of(exc: BaseException) -> RunStopped | None:
    """The stop ``exc`` is, or was caused by: a :class:`RunStopped`, or Prefect's ``TerminationSignal`` (its engine's
    form of SIGTERM) as :class:`RunInterrupted`; None for any other failure."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RunStopped):
            return exc
        if type(exc).__name__ == "TerminationSignal" and isinstance(getattr(exc, "signal", None), int):
            return RunInterrupted(exc.signal)
        exc = exc.__cause__ or exc.__context__
    return None
