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

import io
import json
from typing import Any

import numpy as np

from tasks._worker import peak_rss_bytes

#: Largest number of points drawn in the embedding plot and used as 1-NN queries / references.
PLOT_POINTS = 50_000
QUALITY_QUERIES, QUALITY_REFERENCES = 100_000, 200_000


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


def quality(store: str, run: str, method: str) -> dict[str, float]:
    """Held-out 1-NN accuracy of the embedding (labeled fit points as references, labeled held-out points as
    queries; :func:`spectral.metrics.one_nn_accuracy`, subsampled above :data:`QUALITY_REFERENCES` /
    :data:`QUALITY_QUERIES`) and, for classifiers, the accuracy of their labels on those held-out points."""
    from spectral.metrics import one_nn_accuracy
    from storage import layout
    from storage.arrays import read_labels, read_rows_at
    from storage.embedding_io import read_output
    from storage.store import as_group, has_node

    y = read_labels(store)
    group = as_group(store, "r")
    if y is None or not has_node(group, layout.output_path(run, "held_out")):
        return {}
    y = np.asarray(y)
    held = read_output(store, run, "held_out").astype(bool)
    queries, references = np.flatnonzero(held & (y >= 0)), np.flatnonzero(~held & (y >= 0))
    if queries.size == 0 or references.size == 0:
        return {}
    rng = np.random.default_rng(0)
    queries = np.sort(rng.choice(queries, min(queries.size, QUALITY_QUERIES), replace=False))
    references = np.sort(rng.choice(references, min(references.size, QUALITY_REFERENCES), replace=False))
    Z_ref, Z_query = (read_rows_at(store, layout.embedding_path(run), rows) for rows in (references, queries))
    out = {"heldout_1nn_accuracy": one_nn_accuracy(Z_ref, y[references], Z_query, y[queries]),
           "n_heldout_labeled": int(queries.size)}
    if has_node(group, layout.output_path(run, "labels")):
        labels = read_output(store, run, "labels")
        out["heldout_label_accuracy"] = float(np.mean(labels[queries] == y[queries]))
    return out


def plot_embedding(Z: np.ndarray, labels: np.ndarray | None, held: np.ndarray | None, title: str,
                   n_points: int | None = None) -> bytes:
    """PNG of the first two components of ``Z`` (m, k), coloured by ``labels`` (m,) if given; with a hold-out
    mask ``held`` (m,) bool, fitted and held-out points side by side. ``Z`` may be a sample of ``n_points``
    points (:func:`plot_rows`); the panel titles say so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_points = Z.shape[0] if n_points is None else n_points
    xy = np.column_stack([Z[:, 0], Z[:, 1] if Z.shape[1] > 1 else np.zeros(Z.shape[0])])
    colours = None if labels is None else np.asarray(labels)
    n_labels = 1 if colours is None else int(colours.max()) + 1
    cmap = plt.get_cmap("tab10", max(n_labels, 1))
    panels = [(np.ones(Z.shape[0], dtype=bool), f"all points ({Z.shape[0]} of {n_points})")]
    if held is not None and np.asarray(held).any():
        mask = np.asarray(held)
        panels = [(~mask, f"fitted points ({int((~mask).sum())})"),
                  (mask, f"held-out points, out-of-sample ({int(mask.sum())})")]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5), sharex=True, sharey=True,
                             squeeze=False)
    for ax, (mask, panel_title) in zip(axes[0], panels):
        colour = {} if colours is None else {"c": colours[mask], "cmap": cmap, "vmin": -0.5, "vmax": n_labels - 0.5}
        sc = ax.scatter(xy[mask, 0], xy[mask, 1], s=1.0, rasterized=True, **colour)
        ax.set_title(panel_title)
        ax.set_xlabel("component 1")
    axes[0][0].set_ylabel("component 2")
    if colours is not None:
        fig.colorbar(sc, ax=axes[0].tolist(), label="label", ticks=range(n_labels))
    fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def plot_rows(n: int) -> np.ndarray:
    """The rows a plot of ``n`` points shows: all, or :data:`PLOT_POINTS` drawn with seed 0 (sorted)."""
    rows = np.arange(n)
    return rows if n <= PLOT_POINTS else np.sort(np.random.default_rng(0).choice(rows, PLOT_POINTS, replace=False))


def embedding_png(store: str, run: str, title: str | None = None) -> bytes:
    """:func:`plot_embedding` of the :func:`plot_rows` of ``embeddings/<run>`` (only those rows are read), with the
    store's labels and the run's hold-out; ``title`` (default: the run)."""
    from storage import layout
    from storage.arrays import read_labels, read_rows_at, x_shape
    from storage.store import as_group, has_node

    n = x_shape(store)[0]
    rows = plot_rows(n)
    held_path = layout.output_path(run, "held_out")
    held = read_rows_at(store, held_path, rows).astype(bool) if has_node(as_group(store, "r"), held_path) else None
    labels = read_labels(store)
    return plot_embedding(read_rows_at(store, layout.embedding_path(run), rows),
                          None if labels is None else np.asarray(labels)[rows], held,
                          title or f"run {run}: components 1-2", n_points=n)


def publish_run(summary: dict[str, Any], store: str, method: str, params: dict, sizes: dict) -> dict[str, Any]:
    """The end-of-run artifacts (see the module docstring); returns the quality figures and the plot path."""
    from storage.reports import write_report_file

    run, out = summary["run"], {}
    try:
        out = quality(store, run, method)
        out["plot"] = write_report_file(store, run, "embedding.png", embedding_png(store, run))
    except Exception as exc:  # noqa: BLE001 - the results are in the store; a report must not fail the run
        logger().warning("run %s of %s: quality figures / plot not made: %s", run, store, exc)
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


def _markdown(summary: dict, store: str, method: str, params: dict, sizes: dict, figures: dict) -> str:
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
