"""`swerl pipeline run`: the pipeline flow in this process (a local or ephemeral Prefect API);
`swerl pipeline start`: the pipeline deployment on a worker, followed to its end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from swerl.cli.common import fail, console

DEPLOYMENTS = Path("deployments/prefect.yaml")


def _read_params(path: Path) -> dict:
    import yaml

    if not path.is_file():
        fail(f"--params {path}: no such file")
    text = path.read_text(encoding="utf-8")
    return (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)) or {}


def _validated(data: dict):
    from pydantic import ValidationError

    from swerl.orchestration.params import PipelineParams

    try:
        return PipelineParams.model_validate(data or {})
    except ValidationError as e:
        fail(f"invalid pipeline parameters: {e}")


def _deployment_params(path: Path, deployment: str) -> dict:
    import yaml

    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    for d in spec.get("deployments") or []:
        if d.get("name") == deployment:
            return (d.get("parameters") or {}).get("params") or {}
    fail(f"{path} has no deployment named {deployment!r}")
    return {}


def run(
    params: Optional[Path] = typer.Option(None, "--params", help="PipelineParams as JSON or YAML (default: the `pipeline` "
                                          "deployment's parameters in deployments/prefect.yaml, the embedded default)."),
    name: Optional[str] = typer.Option(None, "--name", help="Pipeline name (run folder, MLflow parent run); a rerun resumes it."),
) -> None:
    """Run the pipeline flow here; with PREFECT_API_URL set it reports to that server, else to an ephemeral one."""
    import os

    # offline unless told otherwise: no telemetry from the client or an ephemeral server
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90", "MLFLOW_DISABLE_TELEMETRY": "true"}.items():
        os.environ.setdefault(key, value)
    if params is not None:
        data = _read_params(params)
    elif DEPLOYMENTS.is_file():
        data = _deployment_params(DEPLOYMENTS, "pipeline")
    else:
        data = {}
    if name:
        data = {**(data or {}), "name": name}
    p = _validated(data)
    from flows.pipeline import pipeline

    console.print(f"pipeline {p.name}: run folder {p.run_dir}")
    state = pipeline(p, return_state=True)
    if not state.is_completed():
        fail(f"pipeline {p.name} ended {state.type.value}: {state.message}", code=1)


def start(
    deployment: str = typer.Option("pipeline/pipeline", "--deployment", help="FLOW/DEPLOYMENT to run (`prefect deploy` made it)."),
    params: Optional[Path] = typer.Option(None, "--params", help="PipelineParams as JSON or YAML (default: the deployment's)."),
    name: Optional[str] = typer.Option(None, "--name", help="Pipeline name (run folder, MLflow parent run); a rerun resumes it."),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Print a line per stage until the run ends."),
    interval: float = typer.Option(5.0, "--interval", min=0.5, help="Seconds between polls of the Prefect API."),
) -> None:
    """Run the pipeline deployment on the worker and follow it: a line per stage; on failure, the reason last."""
    import asyncio

    from swerl.cli.follow import follow_to_the_end, offline_env, require_api

    offline_env()
    overrides = _read_params(params) if params is not None else None  # the input first: its error needs no server
    require_api()
    flow_run = asyncio.run(_create_run(deployment, overrides, name))
    typer.echo(f"flow run {flow_run.name} ({flow_run.id}) of {deployment}; `swerl follow {flow_run.id}` follows it again")
    if follow:
        follow_to_the_end(flow_run.id, interval)


async def _create_run(deployment: str, overrides: dict | None, name: str | None):
    """A flow run of the deployment: its own parameters, or ``overrides``, with ``name`` set; validated first."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            found = await client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            fail(f"no deployment {deployment!r} on the server: run `prefect --no-prompt deploy --all --prefect-file "
                  f"{DEPLOYMENTS}` first")
        data = dict(overrides if overrides is not None else (found.parameters or {}).get("params") or {})
        if name:
            data["name"] = name
        p = _validated(data)
        # named as the flow will rename it, so the follower's lines carry one name from the start
        return await client.create_flow_run_from_deployment(found.id, name=p.run_name,
                                                            parameters={"params": p.model_dump(mode="json", exclude_unset=True)})
