"""`swerl pipeline run`: the pipeline flow in this process (a local or ephemeral Prefect API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from swerl.cli import _fail, app, console

DEPLOYMENTS = Path("deployments/prefect.yaml")
pipeline_app = typer.Typer(no_args_is_help=True, help="The whole loop: images, RFT, DAPO iterations, evaluations.")
app.add_typer(pipeline_app, name="pipeline")


def _deployment_params(path: Path, deployment: str) -> dict:
    import yaml

    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    for d in spec.get("deployments") or []:
        if d.get("name") == deployment:
            return (d.get("parameters") or {}).get("params") or {}
    _fail(f"{path} has no deployment named {deployment!r}")
    return {}


@pipeline_app.command("run")
def run(
    params: Optional[Path] = typer.Option(None, "--params", help="PipelineParams as JSON or YAML (default: the `pipeline` "
                                          "deployment's parameters in deployments/prefect.yaml, the embedded default)."),
    name: Optional[str] = typer.Option(None, "--name", help="Pipeline name (run folder, MLflow parent run); a rerun resumes it."),
) -> None:
    """Run the pipeline flow here; with PREFECT_API_URL set it reports to that server, else to an ephemeral one."""
    import os

    import yaml

    # offline unless told otherwise: no telemetry from the client or an ephemeral server
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90", "MLFLOW_DISABLE_TELEMETRY": "true"}.items():
        os.environ.setdefault(key, value)
    from pydantic import ValidationError

    from swerl.orchestration.params import PipelineParams

    if params is not None:
        if not params.is_file():
            _fail(f"--params {params}: no such file")
        text = params.read_text(encoding="utf-8")
        data = json.loads(text) if params.suffix == ".json" else yaml.safe_load(text)
    elif DEPLOYMENTS.is_file():
        data = _deployment_params(DEPLOYMENTS, "pipeline")
    else:
        data = {}
    if name:
        data = {**(data or {}), "name": name}
    try:
        p = PipelineParams.model_validate(data or {})
    except ValidationError as e:
        _fail(f"invalid pipeline parameters: {e}")
    from flows.pipeline import pipeline

    console.print(f"pipeline {p.name}: run folder {p.run_dir}")
    state = pipeline(p, return_state=True)
    if not state.is_completed():
        _fail(f"pipeline {p.name} ended {state.type.value}: {state.message}", code=1)
