"""The store's one table of results: every row of X once, with the output of the run that placed it.

A store's latest completed ``embed`` run (or ``extend`` run, in a store of new points) gives the rows it held; each
completed ``update`` run that mapped the rows appended after them with that run's model gives its rows
``[rows_start, n)``, recorded in its manifest (``results.rows``). Rows are placed ``fitted`` (the model was fitted on
them), ``held_out`` (left out of the fit and mapped by the same run) or ``mapped`` (by an ``extend`` or ``update``
run). A failed update's rows are left to the update that finishes them (the next one starts where the last
completed one ended), so every row has exactly one result. :func:`table_segments` lists the runs' row ranges;
:func:`iter_table` streams the table chunk by chunk (``export``, the AnnData export).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import layout
from .arrays import read_rows, x_shape
from .errors import StoreFormatError
from .manifest import RunManifest, readable_manifests, remove_manifest
from .store import as_group, has_node

#: Placements of a row, by the run that gave its result.
FITTED, HELD_OUT, MAPPED = "fitted", "held_out", "mapped"
#: Flows whose runs give the results of all the store's rows at their time (the base of the table).
BASE_FLOWS = ("embed", "extend")
UPDATE_FLOW = "update"


@dataclass(frozen=True)
class Segment:
    """Rows ``start:stop`` of the table come from ``run`` (``flow``: ``embed``, ``extend`` or ``update``)."""

    run: str
    flow: str
    start: int
    stop: int


def _node(run: str, output: str) -> str:
    return layout.embedding_path(run) if output == "embedding" else layout.output_path(run, output)


def table_segments(store: Any, output: str = "embedding") -> list[Segment]:
    """The runs that give ``output`` for every row of ``store``, in row order (module docstring); refuses a store
    whose last rows no completed run has placed yet, naming them."""
    segments = placed_segments(store, output)
    n = x_shape(store)[0]
    if segments[-1].stop < n:
        raise StoreFormatError(f"rows {segments[-1].stop}..{n - 1} of store {store} have no {output!r} result yet (an "
                               "update did not finish); run `eigenflow update` to place them")
    return segments


def placed_segments(store: Any, output: str = "embedding") -> list[Segment]:
    """The segments of the rows placed so far, from row 0 (the base run first); an update places the rows after
    the last one."""
    group = as_group(store, "r")
    done = [m for m in readable_manifests(store) if m.status == "completed" and has_node(group, _node(m.run_id, output))]
    bases = [m for m in done if m.flow in BASE_FLOWS]
    if not bases:
        raise StoreFormatError(f"store {store} has no completed run with a {output!r} output")
    base = max(bases, key=lambda m: m.started)
    segments = [Segment(base.run_id, base.flow, 0, int(base.results.get("n") or _rows_of(group, base, output)))]
    updates = [m for m in done if m.flow == UPDATE_FLOW and m.results.get("model_run") == base.run_id]
    while True:
        covered = segments[-1].stop
        starting = [m for m in updates if m.results["rows"][0] <= covered < m.results["rows"][1]]
        if not starting:
            return segments
        last = max(starting, key=lambda m: m.started)
        segments.append(Segment(last.run_id, last.flow, covered, int(last.results["rows"][1])))


def _rows_of(group: Any, manifest: RunManifest, output: str) -> int:
    return int(group[_node(manifest.run_id, output)].shape[0])


def iter_table(store: Any, segments: list[Segment], output: str = "embedding"
               ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """``(start, stop, values, run index, placement)`` blocks of the table in row order, at most one row chunk each:
    ``run index`` (rows,) int32 into ``segments``, ``placement`` (rows,) of :data:`FITTED` / :data:`HELD_OUT` /
    :data:`MAPPED`."""
    group = as_group(store, "r")
    for i, seg in enumerate(segments):
        node = group[_node(seg.run, output)]
        step = int(node.chunks[0])
        in_fit_path = layout.output_path(seg.run, "in_fit")
        masked = seg.flow == "embed" and has_node(group, in_fit_path)  # every embed run writes it
        bounds = [seg.start, *range((seg.start // step + 1) * step, seg.stop, step), seg.stop]
        for start, stop in zip(bounds[:-1], bounds[1:]):  # the segment cut at the row chunks
            values = read_rows(store, _node(seg.run, output), start, stop)
            if masked:
                placement = np.where(read_rows(store, in_fit_path, start, stop), FITTED, HELD_OUT).astype(object)
            else:
                placement = np.full(stop - start, FITTED if seg.flow == "embed" else MAPPED, dtype=object)
            yield start, stop, values, np.full(stop - start, i, dtype=np.int32), placement


def read_table(store: Any, output: str = "embedding") -> np.ndarray:
    """The table's ``output`` of every row, ``(n, ...)`` in memory (a refit's warm start and alignment)."""
    return np.concatenate([read_rows(store, _node(seg.run, output), seg.start, seg.stop)
                           for seg in table_segments(store, output)])


def table_info(segments: list[Segment]) -> dict[str, Any]:
    """What ``export`` reports of a table: the base run and the update runs with their rows."""
    return {"run": segments[0].run, "updates": [{"run": s.run, "rows": [s.start, s.stop]} for s in segments[1:]]}


#: The drift figures an update's history shows (:func:`update_history`).
HISTORY_FIGURES = ("share_beyond", "median_ratio", "preservation", "preservation_fitted", "drifted")


def update_history(store: Any, last: int = 10) -> list[dict[str, Any]]:
    """The last ``last`` completed update runs of ``store``, oldest first: run, start time, rows placed, model and
    drift figures (what ``eigenflow info`` and the drift artifact show)."""
    updates = sorted((m for m in readable_manifests(store) if m.flow == UPDATE_FLOW and m.status == "completed"),
                     key=lambda m: m.started)[-last:]
    history = []
    for m in updates:
        drift = m.results.get("drift") or {}
        history.append({"run": m.run_id, "started": m.started, "model_run": m.results.get("model_run"),
                        "rows": m.results.get("rows"), "n_new": m.results.get("n_new"),
                        **{k: drift.get(k) for k in HISTORY_FIGURES}})
    return history


def prune(store: Any, keep: int) -> list[str]:
    """Remove the results and manifests of the completed runs older than the ``keep`` latest completed fits (``embed``
    or ``extend`` runs) and of the updates that placed rows with them; returns the removed runs, oldest first. The
    kept fits' updates, and runs that did not complete (a failed run can be resumed), stay."""
    from .run_outputs import drop_run_outputs

    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise StoreFormatError(f"keep must be an integer >= 1 (the latest fits kept); got {keep!r}")
    done = sorted((m for m in readable_manifests(store) if m.status == "completed"), key=lambda m: m.started)
    fits = [m.run_id for m in done if m.flow in BASE_FLOWS]
    kept = set(fits[-keep:])
    removed = [m.run_id for m in done if m.run_id not in kept and m.results.get("model_run") not in kept]
    for run in removed:
        drop_run_outputs(store, run)
        remove_manifest(store, run)
    return removed
