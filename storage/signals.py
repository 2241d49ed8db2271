"""Writes that a signal must not cut in half: the stop signals held in the main thread for their duration.

A run's manifest goes ``running`` -> ``failed`` in one write, the store's lock is removed in one call, a
temporary file is renamed over its target or removed: a Ctrl-C (SIGINT), a SIGTERM or the flows' own stop
signal (:data:`HELD`) arriving in the middle would leave a ``running`` manifest, a lock or a stray temporary
file behind. :func:`signals_held` blocks those signals in the calling thread (``pthread_sigmask``); one that
arrives meanwhile stays pending and is delivered, to whatever handler is installed, when the block ends.
Python runs signal handlers in the main thread only, so the block does nothing in other threads.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: The signals held during a write: Ctrl-C, termination and the flows' stop signal (a lost Prefect API).
HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGUSR1})


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold :data:`HELD` during the block when called in the main thread (delivered at its end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
