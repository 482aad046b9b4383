"""`swerl follow FLOW_RUN_ID`: a flow run as a person reads it, instead of `prefect ... --watch`'s raw events."""

from __future__ import annotations

import os
import uuid

import typer

from swerl.cli import _fail, app

IntervalOpt = typer.Option(5.0, "--interval", min=0.5, help="Seconds between polls of the Prefect API.")


def offline_env() -> None:
    """No telemetry from the Prefect client."""
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)


def require_api() -> str:
    """The Prefect server's API URL; following a run on an ephemeral server of our own would show nothing."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        _fail("PREFECT_API_URL is not set: export the URL `swerl up` prints, e.g. http://127.0.0.1:4200/api")
    return url


def follow_to_the_end(flow_run_id: uuid.UUID, interval: float) -> None:
    """Print the run's lines until it ends; exit 0 when it completed, 1 otherwise."""
    from swerl.orchestration.follow import follow

    final = follow(flow_run_id, emit=lambda line: typer.echo(line), interval=interval)
    raise typer.Exit(0 if final.state_type == "COMPLETED" else 1)


@app.command("follow")
def follow_cmd(flow_run_id: str = typer.Argument(..., help="The flow run's id (`prefect deployment run` prints it)."),
               interval: float = IntervalOpt) -> None:
    """Follow a flow run: a line per stage and per state change; when it fails, the end of its error log and the reason."""
    offline_env()
    try:
        run_id = uuid.UUID(flow_run_id)
    except ValueError:
        _fail(f"{flow_run_id!r} is not a flow run id (a UUID)")
    require_api()
    follow_to_the_end(run_id, interval)
