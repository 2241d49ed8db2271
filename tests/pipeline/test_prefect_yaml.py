"""The repository's ``prefect.yaml`` (``prefect deploy --all``): every deployment's entrypoint is a flow of eigenflow,
and its parameters are parameters of that flow."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_deployment_names_a_flow_and_its_parameters():
    from prefect.flows import Flow, load_flow_from_entrypoint

    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert config["deployments"]
    for deployment in config["deployments"]:
        path, _, name = deployment["entrypoint"].partition(":")
        flow = load_flow_from_entrypoint(f"{ROOT / path}:{name}")
        assert isinstance(flow, Flow), deployment["name"]
        accepted = set(inspect.signature(flow.fn).parameters)
        assert set(deployment.get("parameters", {})) <= accepted, (deployment["name"], accepted)
        env = deployment["work_pool"].get("job_variables", {}).get("env", {})
        assert int(env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]) >= 30, deployment["name"]
