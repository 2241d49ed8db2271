"""Environment defaults for Prefect and Dask, applied before either is imported.

Only ``os.environ.setdefault`` is used: a value the user (or ``make``) already set always wins. The
values keep a run local, quiet and off the network:

- ``PREFECT_SERVER_ANALYTICS_ENABLED=false``: the only setting that reaches the internet; with it on,
  every ephemeral run prints a "database is locked" traceback.
- ``PREFECT_SERVER_UI_ENABLED=false``: the ephemeral server never serves the UI.
- ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90``: room for a busy 2-core machine.
- ``DASK_LOGGING__DISTRIBUTED=warning``: silences distributed's INFO logs.
- ``NUMBA_CACHE_DIR``: eigenflow's compiled-code cache (:func:`spectral.neighbours.jit_cache.numba_cache_dir`, a
  user cache directory, movable with ``EIGENFLOW_CACHE_DIR``), so that pynndescent's own cached kernels land beside
  eigenflow's; read by numba when it is first imported, so set before that.

Without ``PREFECT_API_URL``, Prefect runs in ephemeral mode (a temporary local server with a sqlite
database under ``$PREFECT_HOME``); with it, flows report to that server.
"""

from __future__ import annotations

import os

ENV_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "DASK_LOGGING__DISTRIBUTED": "warning",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def apply_env_defaults() -> None:
    """Set each of :data:`ENV_DEFAULTS` unless the environment already has a value for it.

    Also creates ``$PREFECT_HOME`` (with its parents) when it is set: Prefect itself creates only the last
    path component and otherwise prints a "Failed to create the Prefect home directory" warning.
    """
    from eigenflow.spectral.neighbours.jit_cache import numba_cache_dir

    for key, value in {**ENV_DEFAULTS, "NUMBA_CACHE_DIR": str(numba_cache_dir())}.items():
        os.environ.setdefault(key, value)
    home = os.environ.get("PREFECT_HOME")
    if home:
        os.makedirs(os.path.expanduser(home), exist_ok=True)


def apply_cli_env(verbose: bool) -> None:
    """The ``eigenflow`` CLI's environment: Prefect's and Dask's log levels (quiet unless ``verbose``), then
    :func:`apply_env_defaults`. Only ``setdefault``: a value already set wins."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO" if verbose else "CRITICAL")
    # Prefect's internal services (e.g. its events worker) log each failed delivery at ERROR: a lost API is
    # reported in one line by the CLI instead (flows.stops)
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "ERROR" if verbose else "CRITICAL")
    # a task's failure reaches the user as the command's one line; without -v the workers do not also log it
    # (distributed logs "Compute Failed" with its traceback at ERROR). Replaces the package's own default (set when
    # eigenflow.tasks was imported), not a value of the user's
    if os.environ.get("DASK_LOGGING__DISTRIBUTED") in (None, ENV_DEFAULTS["DASK_LOGGING__DISTRIBUTED"]):
        os.environ["DASK_LOGGING__DISTRIBUTED"] = "warning" if verbose else "critical"
    # Prefect's client retries a failed API call up to 5 times with exponential back-off (a minute): a run whose
    # API is gone would wait that long at each call; 2 retries still ride out a brief restart of the server
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", "2")
    apply_env_defaults()
