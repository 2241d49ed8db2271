"""Dask preload of a local cluster's workers: the builder worker begins its NN-descent warm-up as it starts.

A run whose kNN index is built before its flow (:mod:`tasks.early_fit`) waits for one worker's warm-up
(:mod:`tasks._warm_up`) before its build. Begun by the client (``Client.run``) it starts only once the whole
cluster is up; begun here, by :func:`dask_setup` in the worker process, it overlaps the worker's own start and
the cluster's. :func:`flows.cluster.local_cluster` adds this preload and names the worker and the X dtypes in
:data:`WARM_AT_START_ENV` (``"<worker name>:<dtype>[,<dtype>]"``); the other workers do nothing here (their
warm-up would take CPU from the build), and :func:`tasks._warm_up.start_warm_up` called again later for the
same dtypes does nothing. Prefect-free.
"""

from __future__ import annotations

import os
from typing import Any

from eigenflow.tasks._warm_up import start_warm_up

#: Environment variable of the worker processes: ``"<worker name>:<dtypes, comma-separated>"``.
WARM_AT_START_ENV = "EIGENFLOW_WARM_AT_START"


def warm_at_start_value(worker_name: Any, dtypes: tuple[str, ...]) -> str:
    """The value of :data:`WARM_AT_START_ENV` that makes worker ``worker_name`` warm up for ``dtypes``."""
    return f"{worker_name}:{','.join(dtypes)}"


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called in the worker process when its worker starts: begin the warm-up (a thread)
    when :data:`WARM_AT_START_ENV` names this worker."""
    name, _, dtypes = os.environ.get(WARM_AT_START_ENV, "").partition(":")
    if dtypes and name == str(worker.name):
        start_warm_up(tuple(dtypes.split(",")))
