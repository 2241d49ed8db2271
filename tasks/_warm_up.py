"""A run's NN-descent warm-up on each Dask worker, begun in a thread so that it overlaps the ingest.

:func:`tasks._worker.warm_nndescent` loads (or, on a machine's first use, compiles) the kNN search's numba
kernels. A flow that will build or query an NN-descent index calls :func:`start_warm_up` on every worker
(``Client.run``) as soon as its cluster is up: each worker begins the warm-up in a thread of its own and returns
at once, so its task thread stays free for the ingest's chunks. Before the first stage that needs the kernels,
the flow submits :func:`finish_warm_up` to each worker as a task (the stages queue behind it): it waits for that
thread and returns the warm-up's own seconds. A worker without such a thread (started or restarted since, or
a run that decided to warm up only after its ingest) warms up in the task itself. Prefect-free: runs on the
workers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from eigenflow.tasks._priority import call_at_lower_priority
from eigenflow.tasks._worker import warm_nndescent


@dataclass
class _WarmUp:
    """One warm-up of this process (run in its thread, or in the caller) and its outcome: ``seconds`` from its
    start to its end, the import of the kNN modules (numba, pynndescent) included."""

    dtypes: tuple[str, ...]
    seconds: float | None = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self.run, name="eigenflow-warm-up", daemon=True)

    def run(self) -> None:
        """Warm up (the thread's target); the outcome goes to ``seconds`` and ``error``."""
        t0 = time.perf_counter()
        try:
            warm_nndescent(self.dtypes)
        except BaseException as exc:  # re-raised in the task that waits for it
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - t0


_LOCK = threading.Lock()
#: Warm-ups begun in this process and not yet waited for, by X dtypes.
_STARTED: dict[tuple[str, ...], _WarmUp] = {}


def start_warm_up(dtypes: tuple[str, ...]) -> None:
    """Begin :func:`~tasks._worker.warm_nndescent` for the X ``dtypes`` in a daemon thread of this process and
    return at once (one thread per ``dtypes`` until :func:`finish_warm_up` collects it)."""
    key = tuple(dtypes)
    with _LOCK:
        if key in _STARTED:
            return
        warm = _STARTED[key] = _WarmUp(key)
    warm.thread.start()


def finish_warm_up(dtypes: tuple[str, ...]) -> float:
    """Wait for the warm-up :func:`start_warm_up` began in this process for ``dtypes`` and return its seconds
    (the warm-up's duration, not the wait); without one, run the warm-up now and return its seconds (measured
    the same way: the kNN modules' import included)."""
    with _LOCK:
        warm = _STARTED.pop(tuple(dtypes), None)
    if warm is None:
        warm = _WarmUp(tuple(dtypes))
        warm.run()
    else:
        warm.thread.join()
    if warm.error is not None:
        raise warm.error
    return float(warm.seconds)


def ended_warm_up_seconds(dtypes: tuple[str, ...]) -> list[float]:
    """``[seconds]`` of the warm-up begun in this process for ``dtypes`` once it has ended (collected, as by
    :func:`finish_warm_up`), else ``[]`` (none begun, or still running): never waits and never warms up, so that
    ``Client.run`` can ask a worker that is busy with a task."""
    with _LOCK:
        warm = _STARTED.get(tuple(dtypes))
        if warm is None or warm.thread.is_alive() or warm.error is not None:
            return []
        del _STARTED[tuple(dtypes)]
    return [float(warm.seconds)]


def import_point_modules(method: str) -> float:
    """Import on this worker what writing the per-point outputs of a ``method`` run and its plot need (the stage
    bodies, the fitted model's estimator module, with scikit-learn and numba's modules, and matplotlib), without
    loading NN-descent's kernels (the run maps no point outside its fit set); returns the seconds. Done beside the
    one-core eigensolve, it saves the points stage about 1 s on a worker that has not imported them; the imports
    run at a lower priority (:func:`tasks._priority.call_at_lower_priority`), so that they take the core the
    eigensolve leaves free, and the worker's executor thread keeps its own."""
    t0 = time.perf_counter()
    call_at_lower_priority(_import_point_modules, method)
    return time.perf_counter() - t0


def _import_point_modules(method: str) -> None:
    from eigenflow.tasks.registry import get_entry
    from eigenflow.tasks.report import pyplot

    import eigenflow.tasks.fitted_model  # noqa: F401
    import eigenflow.tasks.point_writeback  # noqa: F401

    get_entry(method).estimator_class  # noqa: B018 - imports the estimator's module
    pyplot()  # the run's plot (tasks.report), made at its end on a worker that imported this
