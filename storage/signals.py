"""Writes that a signal must not cut in half: the stop signals held in the main thread for their duration.

A run's manifest goes ``running`` -> ``failed`` in one write, the store's lock is removed in one call, a
temporary file is renamed over its target or removed: a Ctrl-C (SIGINT), a SIGTERM or the flows' own stop
signal (:data:`HELD`) arriving in the middle would leave a ``running`` manifest, a lock or a stray temporary
file behind. Python runs signal handlers in the main thread only, between two bytecodes; :func:`signals_held`
replaces the handlers of :data:`HELD` by one that only records the signal for the duration of the block, then
restores them and raises the recorded signals again (``signal.raise_signal``), so that whatever handler is
installed (eigenflow's, Prefect's, Python's default) sees them as the block ends. In other threads it does
nothing. (Blocking the signals with ``pthread_sigmask`` would not do: a signal sent to the process is delivered
by any thread that does not block it, and the main thread then runs the handler anyway.)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: The signals held during a write: Ctrl-C, termination and the flows' stop signal (a lost Prefect API).
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold :data:`HELD` during the block when called in the main thread (raised again at its end, in order)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda number, frame: received.append(number)) for signum in HELD}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for signum in dict.fromkeys(received):  # each signal once, as the kernel would have merged them
            signal.raise_signal(signum)
