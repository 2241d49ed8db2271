"""``eigenflow info STORE`` in an 80-column terminal (:func:`eigenflow.flows._cli_display.info_renderables`): every
array path and run name is printed whole, so that it can be copied (rich used to cut them with "…")."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console

from eigenflow.flows._cli_display import info_renderables
from eigenflow.storage import layout
from eigenflow.storage.embedding_io import create_output, write_embedding
from eigenflow.storage.info import info
from eigenflow.storage.ingest import ingest
from eigenflow.storage.manifest import RunManifest, StageRecord, write_manifest
from eigenflow.storage.models import write_model

N = 400
#: The arrays of a Laplacian eigenmaps model as the embed flow writes them (their names and shapes).
MODEL = {"component_eigenvalues": (1, 2), "component_labels": (N,), "component_offsets": (1, 2), "degrees": (N,),
         "embedding": (N, 2), "fit_rows": (N,), "radii": (N,), "scales": (N,)}
STAGES = {"ingest": 0.12, "cluster": 16.4, "knn": 24.71, "weights": 4.2, "eigensolve": 0.63, "embed-points": 0.1}


def add_run(store, run: str, flow: str = "embed", error: str | None = None) -> None:
    """A run of ``flow`` as the pipeline leaves it: its model, embedding, per-point outputs and manifest."""
    write_model(store, run, {name: np.zeros(shape) for name, shape in MODEL.items()}, {"method": "laplacian_eigenmaps"})
    write_embedding(store, run, np.zeros((N, 2)))
    for name, dtype in (("held_out", "bool"), ("in_fit", "bool")):
        create_output(store, run, name, dtype=dtype)
    create_output(store, run, "weight_scales", 2, dtype="float64")
    manifest = RunManifest.start(run, flow=flow, parameters={"n_components": 2})
    for name, seconds in STAGES.items():
        manifest.stages.append(StageRecord(name=name, start=manifest.started, seconds=seconds, status="completed"))
    manifest.finish("failed" if error else "completed", error)
    write_manifest(store, manifest)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small store with the arrays and runs of real ones: a default run id, an ``extend`` run, a run named with
    ``--run-name``, and a failed run."""
    d = tmp_path_factory.mktemp("info")
    np.save(d / "points.npy", np.random.default_rng(0).normal(size=(N, 8)).astype("float32"))
    path = d / "points.zarr"
    ingest(str(d / "points.npy"), str(path), labels=np.arange(N) % 3)
    error = "ValueError: n_neighbors=15 exceeds the 10 [fit] points"
    runs = [(layout.new_run_id("embed"), "embed", None), (layout.new_run_id("extend"), "extend", None),
            ("usps-lfda-kernel-gamma1.0-nightly", "embed", None), (layout.new_run_id("embed"), "embed", error)]
    for run, flow, error in runs:
        add_run(str(path), run, flow, error)
    return str(path)


def render(data: dict, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    for renderable in info_renderables(data):
        console.print(renderable)
    return console.export_text()


def lines_of(text: str) -> set[str]:
    """The words of each line of a rendered text, table rules left out."""
    return {word for line in text.splitlines() for word in re.sub("[\u2502\u2503]", " ", line).split()}


@pytest.mark.parametrize("width", [80, 100, 200])
def test_every_array_path_and_run_name_is_printed_whole(store, width):
    data = info(store)
    names = [a["path"] for a in data["arrays"]] + [r["run_id"] for r in data["runs"]]
    assert len(data["runs"]) == 4 and max(map(len, names)) > 50  # models/<run>/component_eigenvalues: 58
    text = render(data, width)
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= width
    words = lines_of(text)
    assert [name for name in names if name not in words] == []  # each one on one line, in one piece
    for a in data["arrays"]:
        assert str(tuple(a["shape"])) in text
    for r in data["runs"]:
        assert r["status"] in text
    error = "ValueError: n_neighbors=15 exceeds the 10 [fit] points"  # "[fit]" printed, not read as rich markup
    assert set(f"failed ({error})".split()) <= words and {"embed-points", "24.7s,"} <= words


def test_columns_on_a_wide_console(store):
    """With room for them, the arrays and runs are a table of columns, one line per array."""
    data = info(store)
    text = render(data, 200)
    assert re.search(r"\bpath\s+\S\s+shape\s+\S\s+dtype\s+\S\s+chunks\b", text)
    run = next(r for r in data["runs"] if r["flow"] == "extend")["run_id"]
    assert re.search(rf"{re.escape(run)}\s+\S\s+extend\s+\S\s+completed", text)


def test_a_name_wider_than_the_console_keeps_every_character(store):
    """A run name of 128 characters (the longest allowed) cannot fit in 80 columns: it folds, nothing is cut."""
    data = info(store)
    long = "nightly-" + "x" * 99 + "-usps-lfda-kernel-gam"
    assert len(long) == 128
    data["runs"].append(dict(data["runs"][0], run_id=long))
    data["arrays"].append(dict(data["arrays"][0], path=f"embeddings/{long}"))
    text = render(data, 80)
    assert "…" not in text
    flat = "".join(re.sub("[\u2502\u2503]", " ", text).split())
    assert long in flat and f"embeddings/{long}" in flat
    assert [a["path"] for a in info(store)["arrays"] if a["path"] not in lines_of(text)] == []
