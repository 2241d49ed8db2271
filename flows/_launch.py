"""The ``eigenflow`` console script: for a command that runs a flow, Prefect's temporary server is launched first.

``embed``, ``extend`` and ``demo`` need Prefect's API; without ``PREFECT_API_URL`` that is a temporary server
whose start (~3 s on an idle 2-core machine) is the longest part of a small run's fixed time. :func:`main`
launches it (:func:`flows._prefect_start.start_early`) before the CLI imports typer, rich and its commands, so
that the server's start overlaps all of them (``embed`` launches it itself: for a large source only once its fit
stages begun before the flow reach the eigensolve, :class:`flows._prefect_start.LaterStart`). A flow command on local
workers also launches the server they will be forked from (:func:`flows._local_workers.start_import_server`), which
imports their modules meanwhile. Every other command (``--help``, ``methods``, ``info``, ...) starts nothing. The
environment the servers inherit is the CLI's (:func:`tasks._env.apply_cli_env`).
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

#: The commands that call a flow.
FLOW_COMMANDS = frozenset({"embed", "extend", "demo"})


def _command(args: list[str]) -> str | None:
    """The first word of ``args`` that is not an option."""
    return next((a for a in args if not a.startswith("-")), None)


def runs_a_flow(args: list[str]) -> bool:
    """Whether the command line ``args`` (without the program name) runs a flow: its first word that is not an
    option is one of :data:`FLOW_COMMANDS`, and it does not ask for help."""
    return _command(args) in FLOW_COMMANDS and not {"--help", "-h"} & set(args)


def names_a_scheduler(args: list[str]) -> bool:
    """Whether the command line ``args`` (or ``$EIGENFLOW_SCHEDULER``) names a Dask scheduler: the run then
    starts no local worker."""
    import os

    from eigenflow.flows._local_workers import SCHEDULER_ENV

    return bool(os.environ.get(SCHEDULER_ENV)) or any(a == "--scheduler" or a.startswith("--scheduler=")
                                                       for a in args)


def main() -> NoReturn:
    """The console script: launch Prefect's server for a flow command, then run the typer app, then end the
    process without the interpreter's teardown (:func:`exit_without_teardown`).

    A Ctrl-C before a command has installed its own handling (:class:`flows._stop.RunGuard`: while the CLI
    imports its modules and typer reads the command line, the first 0.3-1 s) ends the process with one line and
    status 130: not Python's traceback, nor typer's silent status 130 (:func:`_unreported_interrupt`).
    """
    try:
        code = _run_cli(sys.argv[1:])
    except KeyboardInterrupt as exc:  # Python's own (SIGINT), or a stop no command handled
        print(f"error: {str(exc) or 'interrupted (SIGINT)'}", file=sys.stderr)
        code = getattr(exc, "exit_code", 130)
    exit_without_teardown(code)


def _run_cli(args: list[str]) -> Any:
    """Launch what a flow command needs early, then run the typer app; returns its exit code."""
    if runs_a_flow(args):
        from eigenflow.tasks._env import apply_cli_env

        apply_cli_env("--verbose" in args or "-v" in args)
        from eigenflow.flows._prefect_start import start_early

        if not names_a_scheduler(args):  # local workers: forks of a server importing their modules from now on
            from eigenflow.flows._local_workers import start_import_server

            start_import_server()
        if _command(args) != "embed":  # embed launches it itself: a large run's once its stages reach the eigensolve
            start_early()
    from eigenflow.flows.cli import app

    try:
        app()
    except SystemExit as exc:
        interrupt = _unreported_interrupt(exc)
        if interrupt is not None:
            raise interrupt from None
        return exc.code
    return 0


def _unreported_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` behind the exit ``exc``, if no one reported it: typer turns one raised before a
    command's run guard (while it parses the command line, or the command prepares) into exit status 130 without
    a word. Followed: each exception's cause, or its context unless suppressed (a stop the run guard reported
    ends with ``typer.Exit(...) from None``)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def exit_without_teardown(code: Any) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, less the interpreter's teardown of its modules.

    What an exit does that can be observed still happens, in the same order: the threads that are not daemons are
    joined, the exit handlers run (``atexit``: Prefect's log and event flush, the temporary server's stop, the
    Dask cluster's close, temporary files), the standard streams are flushed; then the process ends
    (``os._exit``). Once a flow command has imported Prefect, Dask and zarr, the teardown skipped here (freeing
    every module's objects, which writes nothing) took 0.5-0.8 s.
    """
    import atexit
    import os
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - the documented exit handlers, run as the interpreter would
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written to it
            pass
    os._exit(status)
