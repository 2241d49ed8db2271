"""The end-of-run figures of a run (Prefect-free, so that they are made on a Dask worker): held-out 1-NN accuracy
when the store has labels (label accuracy for classifiers), and the PNG of the embedding written into the store
(``reports/<run>/embedding.png``). :mod:`flows.reporting` publishes them as Prefect artifacts.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from eigenflow.storage.store import Store

#: Largest number of points drawn in the embedding plot and used as 1-NN queries / references.
PLOT_POINTS = 50_000
QUALITY_QUERIES, QUALITY_REFERENCES = 100_000, 200_000
#: Resolution of the embedding plot's PNG.
PLOT_DPI = 110
#: Largest number of intervals between the major ticks of an axis of the embedding plot.
TICK_BINS = 5


def report_figures(store: Store, run: str, method: str) -> dict[str, Any]:
    """:func:`quality` of the run and the path of its plot (``plot``), written into the store; reads the store's
    labels and the run's hold-out mask (n,) where it runs."""
    from eigenflow.storage.reports import write_report_file

    out = quality(store, run, method)
    out["plot"] = write_report_file(store, run, "embedding.png", embedding_png(store, run))
    return out


def quality(store: Store, run: str, method: str) -> dict[str, float]:
    """Held-out 1-NN accuracy of the embedding (labeled fit points as references, labeled held-out points as
    queries; :func:`spectral.metrics.one_nn_accuracy`, subsampled above :data:`QUALITY_REFERENCES` /
    :data:`QUALITY_QUERIES`) and, for classifiers, the accuracy of their labels on those held-out points."""
    from eigenflow.storage import layout
    from eigenflow.storage.arrays import read_labels, read_rows_at
    from eigenflow.storage.embedding_io import read_output
    from eigenflow.storage.store import as_group, has_node

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
    # scikit-learn: imported only for a run that has these figures
    from eigenflow.spectral.metrics import one_nn_accuracy

    out = {"heldout_1nn_accuracy": one_nn_accuracy(Z_ref, y[references], Z_query, y[queries]),
           "n_heldout_labeled": int(queries.size)}
    if has_node(group, layout.output_path(run, "labels")):
        labels = read_output(store, run, "labels")
        out["heldout_label_accuracy"] = float(np.mean(labels[queries] == y[queries]))
    return out


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_embedding(Z: np.ndarray, labels: np.ndarray | None, held: np.ndarray | None, title: str,
                   n_points: int | None = None) -> bytes:
    """PNG of :func:`embedding_figure` (same arguments)."""
    plt = pyplot()
    fig = embedding_figure(Z, labels, held, title, n_points)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI)
    plt.close(fig)
    return buf.getvalue()


def embedding_figure(Z: np.ndarray, labels: np.ndarray | None, held: np.ndarray | None, title: str,
                     n_points: int | None = None) -> Any:
    """The matplotlib figure of the first two components of ``Z`` (m, k), coloured by ``labels`` (m,) if given;
    with a hold-out mask ``held`` (m,) bool, fitted and held-out points side by side. ``Z`` may be a sample of
    ``n_points`` points (:func:`plot_rows`); the panel titles say so. Its tick labels stay apart at any scale of
    the coordinates (:func:`readable_ticks`). The caller closes it."""
    plt = pyplot()

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
        readable_ticks(ax)
    axes[0][0].set_ylabel("component 2")
    if colours is not None:
        fig.colorbar(sc, ax=axes[0].tolist(), label="label", ticks=range(n_labels))
    fig.suptitle(title)
    return fig


def readable_ticks(ax: Any) -> None:
    """Tick labels of ``ax`` that stay apart whatever the scale of the coordinates: at most :data:`TICK_BINS`
    intervals per axis, and below 1e-2 or from 1e3 scientific notation, whose factor (and offset) is written once
    at the end of the axis (``×10⁻³``), so that each label is a few characters long."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=TICK_BINS, steps=[1, 2, 2.5, 5, 10]))
        formatter = ScalarFormatter(useMathText=True, useOffset=True)
        formatter.set_powerlimits((-2, 3))
        axis.set_major_formatter(formatter)


def plot_rows(n: int) -> np.ndarray:
    """The rows a plot of ``n`` points shows: all, or :data:`PLOT_POINTS` drawn with seed 0 (sorted)."""
    rows = np.arange(n)
    return rows if n <= PLOT_POINTS else np.sort(np.random.default_rng(0).choice(rows, PLOT_POINTS, replace=False))


def embedding_png(store: Store, run: str, title: str | None = None) -> bytes:
    """:func:`plot_embedding` of the :func:`plot_rows` of ``embeddings/<run>`` (only those rows are read), with the
    store's labels and the run's hold-out; ``title`` (default: the run)."""
    from eigenflow.storage import layout
    from eigenflow.storage.arrays import read_labels, read_rows_at, x_shape
    from eigenflow.storage.store import as_group, has_node

    n = x_shape(store)[0]
    rows = plot_rows(n)
    held_path = layout.output_path(run, "held_out")
    held = read_rows_at(store, held_path, rows).astype(bool) if has_node(as_group(store, "r"), held_path) else None
    labels = read_labels(store)
    return plot_embedding(read_rows_at(store, layout.embedding_path(run), rows),
                          None if labels is None else np.asarray(labels)[rows], held,
                          title or f"run {run}: components 1-2", n_points=n)
