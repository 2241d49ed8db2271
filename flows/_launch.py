"""The ``eigenflow`` console script: for a command that runs a flow, Prefect's temporary server is launched first.

``embed``, ``extend`` and ``demo`` need Prefect's API; without ``PREFECT_API_URL`` that is a temporary server
whose start (~3 s on an idle 2-core machine) is the longest part of a small run's fixed time. :func:`main`
launches it (:func:`flows._prefect_start.start_early`) before the CLI imports typer, rich and its commands, so
that the server's start overlaps all of them; every other command (``--help``, ``methods``, ``info``, ...)
starts nothing. The environment the server inherits is the CLI's (:func:`cli_environment`).
"""

from __future__ import annotations

import os
import sys

#: The commands that call a flow.
FLOW_COMMANDS = frozenset({"embed", "extend", "demo"})


def cli_environment(verbose: bool) -> None:
    """The CLI's environment defaults: Prefect's and Dask's log levels (quiet unless ``verbose``), then
    :func:`tasks._env.apply_env_defaults`. Only ``setdefault``: a value already set wins."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO" if verbose else "CRITICAL")
    # Prefect's internal services (e.g. its events worker) log each failed delivery at ERROR: a lost API is
    # reported in one line by flows._stop instead
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "ERROR" if verbose else "CRITICAL")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning" if verbose else "error")
    from tasks._env import apply_env_defaults

    apply_env_defaults()


def runs_a_flow(args: list[str]) -> bool:
    """Whether the command line ``args`` (without the program name) runs a flow: its first word that is not an
    option is one of :data:`FLOW_COMMANDS`, and it does not ask for help."""
    command = next((a for a in args if not a.startswith("-")), None)
    return command in FLOW_COMMANDS and not {"--help", "-h"} & set(args)


def main() -> None:
    """The console script: launch Prefect's server for a flow command, then run the typer app."""
    args = sys.argv[1:]
    if runs_a_flow(args):
        cli_environment("--verbose" in args or "-v" in args)
        from flows._prefect_start import start_early

        start_early()
    from flows.cli import app

    app()
