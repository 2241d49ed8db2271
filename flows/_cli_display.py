"""What the ``eigenflow`` CLI shows (rich): a flow's progress, a run's summary table, a store's description, and the
one line of a failed or stopped run (what the store records of it, how to resume it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

#: The vertical rules of a rich table's default box, between its cells.
_BOX = re.compile("[\u2502\u2503]")


def with_progress(console: Console, fn: Callable[[], Any]) -> Any:
    """Run a flow (``fn()``) with a rich progress display of its stages on ``console`` (the CLI's stderr), live on a
    terminal and gone at the end (none elsewhere): the summary table gives the stages' seconds, and a failure stays one
    line."""
    if not console.is_terminal:  # a log file or a pipe: nothing live to show, and no blank line left behind
        return fn()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from eigenflow.flows.run import stage_events

    progress = Progress(SpinnerColumn(), TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True)
    ids: dict[str, Any] = {}

    def listener(event: str, stage: str, payload: Any) -> None:
        if event == "start":
            ids[stage] = progress.add_task(stage, total=None)
        elif event == "progress" and stage in ids:
            done, total = payload
            progress.update(ids[stage], completed=done, total=total)
        elif event == "end" and stage in ids:
            task = progress.tasks[ids[stage]]
            progress.update(ids[stage], total=task.total or 1, completed=task.total or 1)
            progress.stop_task(ids[stage])

    with progress, stage_events(listener):
        return fn()


def summary_table(summary: dict, extra: dict | None = None) -> Table:
    """The run's stages, its total, its fixed time (``fixed: <name>`` rows: the workers' load of the kNN kernels)
    and ``extra`` rows."""
    table = Table(title=f"{summary['flow']} run {summary['run']} ({summary['status']})", show_lines=False)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, seconds in summary["stages"].items():
        table.add_row(name, "-" if seconds is None else f"{seconds:.2f}")
    table.add_row("[bold]total[/]", f"[bold]{summary.get('total_seconds', summary['seconds'] or 0):.2f}[/]")
    fixed = summary.get("fixed_seconds") or {}
    for name, seconds in fixed.items():
        table.add_row(f"fixed: {name}", f"{seconds:.2f}")
    for key, value in (extra or {}).items():
        table.add_row(key, str(value))
    return table


def result_rows(store: str, results: dict) -> dict[str, Any]:
    """The summary's rows of a run's results: method, points, fitted points and where its outputs are."""
    rows = {"method": results.get("method"), "points": results.get("n")}
    if "n_fit" in results:
        rows["fitted"] = results["n_fit"]
    if "n_clusters" in results:
        gap = results.get("eigengap")
        rows["clusters"] = results["n_clusters"] if gap is None else f"{results['n_clusters']} (eigengap {gap:.3g})"
    for key in ("embedding", "labels", "scores"):
        if key in results:
            rows[key] = f"{store}/{results[key]}"
    return rows


def info_renderables(data: dict) -> list[Any]:
    """What ``eigenflow info`` prints of a store's description ``data`` (:func:`storage.info.info`): its head line,
    its arrays and its runs. Array paths and run names are never cut: each table is printed as columns when every
    path (run name) fits whole on one line of the console, else as one entry per path (run name) on a line of its
    own with its other fields below (a name wider than the console folds onto the next line, every character kept).
    """
    head = ", ".join(f"{k}={data.get(k)}" for k in ("n", "d", "dtype", "chunk_rows", "has_labels", "status"))
    out: list[Any] = [Text.assemble((str(data["store"]), "bold"), f"  {head}")]

    arrays = [(a["path"], [str(tuple(a["shape"])), a["dtype"], str(a["chunks"])]) for a in data["arrays"]]
    out.append(WholeNames("arrays", ("path", "shape", "dtype", "chunks"), arrays))

    runs = []
    for r in data["runs"]:
        stages = ", ".join(f"{s['name']} {s['seconds']:.1f}s" if s["seconds"] is not None else s["name"]
                           for s in r["stages"])
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.1f}"
        status = r["status"] + (f" ({r['error']})" if r["error"] else "")
        if r.get("drift"):  # an update: the rows it placed and its drift figures
            stages += f"; rows {r['rows'][0]}..{r['rows'][1]}; drift: {drift_text(r['drift'])}"
        runs.append((r["run_id"], ["-" if r["flow"] is None else str(r["flow"]), status, seconds, stages]))
    out.append(WholeNames("runs", ("run", "flow", "status", "seconds", "stages"), runs))
    return out


def drift_text(drift: dict | None) -> str:
    """An update's drift figures (:mod:`tasks.bodies.drift`) in one phrase."""
    if not drift:
        return "-"
    return (f"{drift['share_beyond']:.3f} beyond the fit's q{drift['quantile']:g}, kNN kept "
            f"{drift['preservation']:.2f} ({'DRIFTED' if drift['drifted'] else 'ok'})")


class WholeNames:
    """A rich renderable: a titled table of ``rows`` ``(name, [other fields])`` under ``headers`` (the name's
    first) whose names (array paths, run names: no spaces) are never cut nor split over two lines when the console
    is wide enough for them. As columns when every name, and every word of the other fields, then appears whole on
    one line; else one entry per name: the name on a line of its own (folded only if wider than the console) and
    its fields, labelled, below it."""

    def __init__(self, title: str, headers: tuple[str, ...], rows: list[tuple[str, list[str]]]) -> None:
        self.title, self.headers, self.rows = title, headers, rows

    def columns(self) -> Table:
        """The table as columns: the names' column does not wrap (a name is folded only as a last resort), the
        other columns wrap at their spaces and fold, nothing is cut."""
        table = Table(title=self.title)
        table.add_column(self.headers[0], no_wrap=True, overflow="fold")
        for header in self.headers[1:]:
            table.add_column(header, overflow="fold")
        for name, fields in self.rows:
            table.add_row(Text(name), *(Text(f) for f in fields))
        return table

    def entries(self) -> Table:
        """The table as one entry per name: the name, then ``header value`` of its other fields, indented."""
        table = Table(title=self.title)
        table.add_column(f"{self.headers[0]} / " + ", ".join(self.headers[1:]), overflow="fold")
        for name, fields in self.rows:
            details = Text("  ").join(Text.assemble((f"{h} ", "dim"), f) for h, f in zip(self.headers[1:], fields))
            table.add_row(Group(Text(name, overflow="fold"), Padding(details, (0, 0, 0, 4))))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.columns(), options, pad=False)
        shown = {word for line in lines for word in _BOX.sub(" ", "".join(segment.text for segment in line)).split()}
        words = {word for name, fields in self.rows for word in (name, *" ".join(fields).split())}
        if words | set(" ".join(self.headers).split()) <= shown:
            yield from (segment for line in lines for segment in (*line, Segment.line()))
        else:
            yield self.entries()


# ---- the line of a failed or stopped run ------------------------------------------------------------------------
def with_resume_hint(store: str, run: str, fn: Callable[[], Any]) -> Any:
    """``fn()``; an OSError (a lost scheduler or cluster, a full or read-only disk: the environment, not the input)
    of a run the store records as failed says how to resume it once the cause is gone."""
    try:
        return fn()
    except OSError as exc:
        if _recorded_status(store, run) != "failed":
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OSError(f"{message}; {resumable(run)}") from exc


def resumable(run: str) -> str:
    """What the line of a failed run that can be resumed says of it."""
    return f"run {run} recorded as failed; rerun with --run-name {run} to resume"


def _recorded_status(store: str, run: str) -> str | None:
    """The status the store's manifest of ``run`` records (None when there is none or it cannot be read)."""
    from eigenflow.storage.errors import StorageError
    from eigenflow.storage.manifest import read_manifest

    try:
        return read_manifest(store, run).status
    except (StorageError, OSError):
        return None


def stop_line(stop: BaseException, store: str, run: str) -> str:
    """The one line of a stopped run, saying what the store's manifest of the run records."""
    from eigenflow.flows.stops import RunInterrupted

    status = _recorded_status(store, run)
    if status == "failed":
        where = resumable(run) \
            if isinstance(stop, RunInterrupted) else \
            f"the run is recorded as failed in the store; rerun with --run-name {run}"
    elif status == "completed":
        where = f"run {run} had completed; its results are in {store}"
    else:
        where = f"nothing was recorded in {store} (stopped before the run started)"
    return f"{stop}; {where}"
