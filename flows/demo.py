"""The demo (``eigenflow demo``, ``make demo``): the embed flow on a generated, labeled 100k-point manifold.

Steps: generate a Swiss roll of ``n_points`` points lifted to 32-D with 6 label bands
(:func:`spectral.datasets.make_swiss_roll_lifted`), save it as ``.npy`` files (the way a user's data would
arrive), run :func:`flows.embed.embed` on a local Dask cluster with ``holdout`` of the points left out of the
fit, then score the embedding: 1-NN accuracy of the held-out points' out-of-sample embedding, with a 1-NN
classifier trained on the fitted points' embedding, and a PNG scatter plot coloured by label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.embedding_io import read_output
from eigenflow.storage.store import Store
from eigenflow.tasks.bodies.fit_rows import HELD_OUT

from eigenflow.flows.embed import embed
from eigenflow.tasks.bodies.report import embedding_png

DEFAULT_N_POINTS = 100_000
DEFAULT_HOLDOUT = 0.1
N_CLASSES = 6


#: The library's own choice (``knn_method="auto"``: exact or NN-descent by the data's size and dimension): the
#: NN-descent kernels load from the compiled-code cache that the set-up commands fill (``eigenflow warm``).
DEFAULT_KNN_METHOD = "auto"


def run_demo(
    n_points: int = DEFAULT_N_POINTS,
    out: str = "demo-output",
    *,
    holdout: float = DEFAULT_HOLDOUT,
    seed: int = 0,
    scheduler: str | None = None,
    n_workers: int = 2,
    knn_method: str = DEFAULT_KNN_METHOD,
) -> dict[str, Any]:
    """Run the demo into the directory ``out``; returns the flow summary plus ``accuracy`` and ``plot``.

    ``knn_method`` defaults to :data:`DEFAULT_KNN_METHOD`; ``"exact"`` / ``"nndescent"`` force either search.
    """
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    X, y, _ = make_swiss_roll_lifted(n_points, n_classes=N_CLASSES, random_state=seed)
    x_path, y_path = out_dir / "demo_X.npy", out_dir / "demo_y.npy"
    np.save(x_path, X)
    np.save(y_path, y)
    store = str(out_dir / "demo.zarr")
    summary = embed(str(x_path), store, labels=str(y_path), holdout=holdout, random_state=seed,
                    scheduler=scheduler, n_workers=n_workers, params={"knn_method": knn_method}, overwrite=True)
    opened = Store.open(store)
    held = read_output(opened, summary["run"], HELD_OUT).astype(bool)
    plot = out_dir / "demo_embedding.png"
    plot.write_bytes(embedding_png(opened, summary["run"],
                                   "eigenflow demo: Laplacian eigenmap of a Swiss roll lifted to 32-D"))
    accuracy = summary["results"]["heldout_1nn_accuracy"]  # tasks.bodies.report.quality, recorded in the manifest
    return {**summary, "accuracy": accuracy, "plot": str(plot), "n_heldout": int(held.sum())}
