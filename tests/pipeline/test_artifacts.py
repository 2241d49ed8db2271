"""Observable runs: the artifacts an embed run publishes, read back through the Prefect client."""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.datasets import make_swiss_roll_lifted
from eigenflow.storage.manifest import read_manifest


def _artifacts(flow_run_id):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))

    return asyncio.run(read())


def test_embed_publishes_summary_stages_progress_and_plot(prefect_api, tmp_path):
    from eigenflow.flows.embed import embed

    X, y, _ = make_swiss_roll_lifted(3000, random_state=0)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    store = str(tmp_path / "s.zarr")
    state = embed(str(tmp_path / "X.npy"), store, labels=str(tmp_path / "y.npy"), params={"knn_method": "exact"},
                  holdout=0.2, chunk_rows=1000, n_workers=1, return_state=True)
    summary = state.result()
    results = read_manifest(store, summary["run"]).results
    assert results["heldout_1nn_accuracy"] > 0.9 and results["peak_rss_flow_process_gb"] > 0
    assert (tmp_path / "s.zarr" / "reports" / summary["run"] / "embedding.png").read_bytes()[:4] == b"\x89PNG"
    artifacts = {a.type: a for a in _artifacts(state.state_details.flow_run_id)}
    assert {"markdown", "table", "progress", "image"} <= set(artifacts)
    markdown = artifacts["markdown"].data
    assert summary["run"] in markdown and "heldout_1nn_accuracy" in markdown and "| knn |" in markdown
    assert "embed-points" in str(artifacts["table"].data)
    assert artifacts["progress"].data == 100.0
    assert artifacts["image"].data.endswith("embedding.png")
