"""`swerl follow FLOW_RUN_ID`: a flow run as a person reads it, instead of `prefect ... --watch`'s raw events."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import typer

from swerl.cli.common import fail
from swerl.util.paths import SERVICES_HOME

IntervalOpt = typer.Option(5.0, "--interval", min=0.5, help="Seconds between polls of the Prefect API.")


def offline_env() -> None:
    """No telemetry from the Prefect client."""
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}.items():
        os.environ.setdefault(key, value)


HomeOpt = typer.Option(SERVICES_HOME, "--home",
                       help="Folder of the stack `swerl up` started, whose server is followed when PREFECT_API_URL is not set.")
HEALTH_TIMEOUT_S = 3.0


def require_api(home: Path = SERVICES_HOME) -> str:
    """The Prefect server's API URL: PREFECT_API_URL, else the server `swerl up` runs from ``home`` (exported
    for the client); one health probe says at once when nobody answers there. Following a run on an
    ephemeral server of our own would show nothing."""
    import httpx

    url = os.environ.get("PREFECT_API_URL")
    if not url:  # before Prefect is imported: its settings are read once, so the URL must be in place by then
        from swerl.services import load_config
        from swerl.services.commands import PREFECT_SERVER
        from swerl.services.processes import is_ours, read_record

        config = load_config(home)
        record = read_record(config.run_dir, PREFECT_SERVER)
        if record is not None and is_ours(record):
            url = os.environ["PREFECT_API_URL"] = config.prefect_api_url
    if not url:
        from prefect.settings import PREFECT_API_URL

        url = PREFECT_API_URL.value()  # a Prefect profile may name one
    if not url:
        fail(f"no Prefect server to follow: PREFECT_API_URL is not set and `swerl up` runs none in "
              f"{os.path.abspath(home)}; start one with `swerl up` (or give its --home), or export the server's URL, "
              "e.g. PREFECT_API_URL=http://127.0.0.1:4200/api")
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=HEALTH_TIMEOUT_S).raise_for_status()
    except httpx.HTTPError as e:
        fail(f"the Prefect server at {url} does not answer ({type(e).__name__}: {e}); is it running? `swerl status` "
              "shows the stack `swerl up` started")
    return url


def follow_to_the_end(flow_run_id: uuid.UUID, interval: float) -> None:
    """Print the run's lines until it ends; exit 0 when it completed, 1 otherwise."""
    from swerl.orchestration.follow import follow

    final = follow(flow_run_id, emit=lambda line: typer.echo(line), interval=interval)
    raise typer.Exit(0 if final.state_type == "COMPLETED" else 1)


def follow_cmd(flow_run_id: str = typer.Argument(..., help="The flow run's id (`prefect deployment run` prints it)."),
               interval: float = IntervalOpt, home: Path = HomeOpt) -> None:
    """Follow a flow run: a line per stage and per state change, each stage's result; when it fails, the end of
    its error log and the reason."""
    offline_env()
    try:
        run_id = uuid.UUID(flow_run_id)
    except ValueError:
        fail(f"{flow_run_id!r} is not a flow run id (a UUID)")
    require_api(home)
    follow_to_the_end(run_id, interval)
