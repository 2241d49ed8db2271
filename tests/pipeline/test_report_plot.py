"""The embedding plot of a run (:mod:`eigenflow.tasks.bodies.report`) has tick labels that do not overlap, whatever the
scale of the coordinates: spectral embeddings of many points have coordinates of about 1e-3, whose default
matplotlib labels (``-0.0015``, ``-0.0010``, ...) ran into each other."""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.tasks.bodies.report import embedding_figure, plot_embedding, pyplot


def tick_labels(fig, axis: str) -> list:
    """The drawn, non-empty major tick labels of ``axis`` ("x" or "y") over every panel of ``fig`` (the colour bar
    left out) once the figure is drawn: their tick inside the axes' view."""
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
        for tick in (ax.xaxis if axis == "x" else ax.yaxis).get_major_ticks():
            label = tick.label1
            if label.get_visible() and label.get_text() and lo <= tick.get_loc() <= hi:
                out.append(label)
    return out


def overlapping(fig, axis: str = "x") -> list[tuple[str, str]]:
    """The pairs of tick labels of ``axis`` whose bounding boxes on the rendered figure overlap."""
    renderer = fig.canvas.get_renderer()
    labels = tick_labels(fig, axis)
    boxes = [(label.get_text(), label.get_window_extent(renderer)) for label in labels]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]


def points(scale: float, shift: float, n: int = 2000, seed: int = 0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 2)) * scale + shift
    return Z, rng.integers(0, 6, n), rng.random(n) < 0.1


def test_the_check_finds_matplotlibs_default_labels_overlapping():
    """Guard of the check itself: the same figure with matplotlib's default tick locator and formatter (the plot
    before tick labels were made readable) of coordinates of about 1e-3 has overlapping x tick labels
    (``-0.005-0.004...``), which :func:`overlapping` reports."""
    from matplotlib.ticker import AutoLocator, ScalarFormatter

    Z, y, held = points(1e-3, -1e-3)
    plt = pyplot()
    fig = embedding_figure(Z, y, held, "run r: components 1-2")
    for ax in fig.axes[:2]:
        ax.xaxis.set_major_locator(AutoLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
    try:
        assert overlapping(fig, "x")
    finally:
        plt.close(fig)


@pytest.mark.parametrize("scale, shift", [(1e-3, -1e-3), (1e-3, 0.0), (1e-6, 0.0), (1e-3, 1000.0), (1.0, 0.0),
                                          (0.05, 0.0), (1e5, 3e5), (1e7, -1e7)])
@pytest.mark.parametrize("with_holdout", [True, False])
def test_the_tick_labels_of_the_embedding_plot_do_not_overlap(scale, shift, with_holdout):
    Z, y, held = points(scale, shift)
    plt = pyplot()
    fig = embedding_figure(Z, y, held if with_holdout else None, "run r: components 1-2")
    try:
        assert len(tick_labels(fig, "x")) >= 2 * (2 if with_holdout else 1)
        assert overlapping(fig, "x") == []
        assert overlapping(fig, "y") == []
    finally:
        plt.close(fig)


def test_plot_embedding_is_a_png_of_that_figure():
    Z, y, held = points(1e-3, 0.0, n=300)
    png = plot_embedding(Z, y, held, "t")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
