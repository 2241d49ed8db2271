"""What a run leaves in Prefect's UI: logs naming the run, store and stage, and artifacts.

Every run publishes (keys ``eigenflow-<flow>-...``, so a deployment's runs line up in the UI):

- a **progress** artifact per per-chunk stage, updated as chunks finish (:class:`StageReporter`);
- a **markdown** summary: method and parameters, sizes, stage timings, peak memory of the flow process, quality
  figures (held-out 1-NN accuracy when the store has labels, label accuracy of classifiers) and the embedding plot;
- a **table** artifact of the stages;
- a **PNG** of the embedding (first two components, coloured by label when there are labels), written into the
  store (``reports/<run>/embedding.png``) and linked as an image artifact.

Artifacts need a Prefect run context: outside one (a unit test calling the pieces) they are skipped, and a
failure to publish one is logged, never fatal to the run (the results are in the store already).
"""

from __future__ import annotations

import json
from typing import Any

from eigenflow.storage.store import Store
from eigenflow.tasks.bodies.worker import peak_rss_bytes
from eigenflow.tasks.bodies.report import report_figures



def logger():
    """Prefect's run logger inside a run, else the module logger."""
    import logging

    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # noqa: BLE001 - no run context (a direct call): plain logging
        return logging.getLogger("eigenflow")


def _in_run() -> bool:
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None


class StageReporter:
    """Per-chunk progress of one stage as a Prefect progress artifact (created on the first report)."""

    def __init__(self, run: str, stage: str):
        self.key = _key(f"{run}-{stage}-progress")
        self.stage, self.run = stage, run
        self.artifact_id = None
        self.last = -1.0

    def __call__(self, done: int, total: int) -> None:
        if not _in_run() or total <= 0:
            return
        percent = round(100.0 * done / total, 1)
        if percent - self.last < 5.0 and done < total:  # at most ~20 updates per stage
            return
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        try:
            if self.artifact_id is None:
                self.artifact_id = create_progress_artifact(percent, key=self.key,
                                                            description=f"{self.stage} of run {self.run}: chunks")
            else:
                update_progress_artifact(self.artifact_id, percent)
            self.last = percent
        except Exception as exc:  # noqa: BLE001 - reporting must not fail the run
            logger().warning("progress artifact of %s not updated: %s", self.stage, exc)


def _key(text: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and dashes."""
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def figures_on_worker(client: Any, store: Store, run: str, method: str) -> dict[str, Any]:
    """The run's quality figures and plot (:func:`tasks.bodies.report.report_figures`) made on a worker of
    ``client``, so
    that the flow process reads no (n,) labels or mask and imports no plotting library; ``{"error": ...}`` if that
    failed (the run's results are in the store already)."""
    try:
        return client.submit(report_figures, store, run, method, pure=False).result()
    except Exception as exc:  # noqa: BLE001 - a report must not fail the run
        return {"error": str(exc)}


def publish_run(summary: dict[str, Any], store: Store, method: str, params: dict, sizes: dict,
                figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """The end-of-run artifacts (see the module docstring); returns the quality figures and the plot path.
    ``figures``: those made on a worker (:func:`figures_on_worker`); None: made here."""
    run = summary["run"]
    if figures is None:
        try:
            figures = report_figures(store, run, method)
        except Exception as exc:  # noqa: BLE001 - the results are in the store; a report must not fail the run
            figures = {"error": str(exc)}
    out = dict(figures)
    if "error" in out:
        logger().warning("run %s of %s: quality figures / plot not made: %s", run, store, out.pop("error"))
    out["peak_rss_flow_process_gb"] = round(peak_rss_bytes() / 1e9, 3)
    if not _in_run():
        return out
    from prefect.artifacts import create_image_artifact, create_markdown_artifact, create_table_artifact

    stages = [{"stage": k, "seconds": None if v is None else round(v, 3)} for k, v in summary["stages"].items()]
    base = _key(f"eigenflow-{summary['flow']}")
    try:
        create_table_artifact(stages, key=f"{base}-stages", description=f"stages of run {run} ({store})")
        create_markdown_artifact(_markdown(summary, store, method, params, sizes, out), key=f"{base}-summary",
                                 description=f"run {run} of {store}")
        if "plot" in out:
            create_image_artifact(out["plot"], key=f"{base}-embedding", description=f"embedding of run {run}")
    except Exception as exc:  # noqa: BLE001
        logger().warning("run %s: artifacts not published: %s", run, exc)
    return out


def publish_drift(store: Store, last: int = 10) -> None:
    """A table artifact of the drift figures of the store's last ``last`` updates (the trend, oldest first)."""
    if not _in_run():
        return
    from prefect.artifacts import create_table_artifact

    from eigenflow.storage.results_table import update_history

    try:
        create_table_artifact(update_history(store, last), key="eigenflow-update-drift",
                              description=f"drift of the last {last} updates of {store}")
    except Exception as exc:  # noqa: BLE001 - the results are in the store; a report must not fail the run
        logger().warning("drift artifact of %s not published: %s", store, exc)


def _markdown(summary: dict, store: Store, method: str, params: dict, sizes: dict, figures: dict) -> str:
    lines = [f"# eigenflow {summary['flow']} run `{summary['run']}`", "",
             f"- store: `{store}`", f"- method: `{method}`", f"- status: {summary['status']}",
             *(f"- {k}: {v}" for k, v in sizes.items()),
             *(f"- {k}: {v:.4f}" if isinstance(v, float) else f"- {k}: {v}" for k, v in figures.items() if k != "plot"),
             "", "## Stages", "", "| stage | seconds |", "|---|---|",
             *(f"| {k} | {'-' if v is None else f'{v:.2f}'} |" for k, v in summary["stages"].items()),
             "", "## Parameters", "", "```json", json.dumps(params, indent=1, default=str), "```"]
    if "plot" in figures:
        lines += ["", f"![embedding]({figures['plot']})"]
    return "\n".join(lines)
