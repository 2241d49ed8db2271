"""What the ``eigenflow`` CLI shows (rich): a flow's progress, a run's summary table, a store's description."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table


def with_progress(console: Console, fn: Callable[[], Any]) -> Any:
    """Run a flow (``fn()``) with a rich progress display of its stages on ``console`` (the CLI's stderr)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from eigenflow.flows._runtime import stage_listener

    progress = Progress(SpinnerColumn(), TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=False)
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

    with progress, stage_listener(listener):
        return fn()


def summary_table(summary: dict, extra: dict | None = None, clock: Any = None) -> Table:
    """The run's stages, its total, its fixed time (``fixed: <name>`` rows, :mod:`flows._fixed_time`; with the
    CLI's ``clock``, ``teardown`` runs until the flow has returned) and ``extra`` rows."""
    table = Table(title=f"{summary['flow']} run {summary['run']} ({summary['status']})", show_lines=False)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, seconds in summary["stages"].items():
        table.add_row(name, "-" if seconds is None else f"{seconds:.2f}")
    table.add_row("[bold]total[/]", f"[bold]{summary.get('total_seconds', summary['seconds'] or 0):.2f}[/]")
    fixed = summary.get("fixed_seconds") or {}
    if clock is not None:
        from eigenflow.flows._fixed_time import cli_teardown

        fixed = cli_teardown(clock, fixed)
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
    for key in ("embedding", "labels", "scores"):
        if key in results:
            rows[key] = f"{store}/{results[key]}"
    return rows


def info_renderables(data: dict) -> list[Any]:
    """What ``eigenflow info`` prints of a store's description ``data`` (:func:`storage.info.info`): its head line,
    its arrays and its runs."""
    head = ", ".join(f"{k}={data.get(k)}" for k in ("n", "d", "dtype", "chunk_rows", "has_labels", "status"))
    out: list[Any] = [f"[bold]{data['store']}[/]  {head}"]
    arrays = Table(title="arrays")
    for col in ("path", "shape", "dtype", "chunks"):
        arrays.add_column(col)
    for a in data["arrays"]:
        arrays.add_row(a["path"], str(tuple(a["shape"])), a["dtype"], str(a["chunks"]))
    out.append(arrays)
    runs = Table(title="runs")
    for col in ("run", "flow", "status", "seconds", "stages"):
        runs.add_column(col)
    for r in data["runs"]:
        stages = ", ".join(f"{s['name']} {s['seconds']:.1f}s" if s["seconds"] is not None else s["name"]
                           for s in r["stages"])
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.1f}"
        runs.add_row(r["run_id"], r["flow"], r["status"] + (f" ({r['error']})" if r["error"] else ""), seconds,
                     stages)
    out.append(runs)
    return out
