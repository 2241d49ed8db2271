"""The ``eigenflow`` console script: for a command that runs a flow, Prefect's temporary server is launched first.

``embed``, ``extend`` and ``demo`` need Prefect's API; without ``PREFECT_API_URL`` that is a temporary server
whose start (~3 s on an idle 2-core machine) is the longest part of a small run's fixed time. :func:`main`
launches it (:func:`flows._prefect_start.start_early`) before the CLI imports typer, rich and its commands, so
that the server's start overlaps all of them (``embed`` launches it itself: for a large source only once its kNN
index is built, :class:`flows._prefect_start.LaterStart`); every other command (``--help``, ``methods``, ``info``, ...)
starts nothing. The environment the server inherits is the CLI's (:func:`tasks._env.apply_cli_env`).
"""

from __future__ import annotations

import sys

#: The commands that call a flow.
FLOW_COMMANDS = frozenset({"embed", "extend", "demo"})


def _command(args: list[str]) -> str | None:
    """The first word of ``args`` that is not an option."""
    return next((a for a in args if not a.startswith("-")), None)


def runs_a_flow(args: list[str]) -> bool:
    """Whether the command line ``args`` (without the program name) runs a flow: its first word that is not an
    option is one of :data:`FLOW_COMMANDS`, and it does not ask for help."""
    return _command(args) in FLOW_COMMANDS and not {"--help", "-h"} & set(args)


def main() -> None:
    """The console script: launch Prefect's server for a flow command, then run the typer app."""
    args = sys.argv[1:]
    if runs_a_flow(args):
        from tasks._env import apply_cli_env

        apply_cli_env("--verbose" in args or "-v" in args)
        from flows._prefect_start import start_early

        if _command(args) != "embed":  # embed launches it itself, after the build of a large run's kNN index
            start_early()
    from flows.cli import app

    app()
