"""`swerl up`, `swerl down`, `swerl status`: the local Prefect server, worker and MLflow server.

Tables and messages go to stderr and the `export` lines to stdout, so `eval "$(swerl up)"`
points the calling shell at the stack.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from swerl.cli.common import fail, console
from swerl.util.paths import SERVICES_HOME

HomeOpt = typer.Option(SERVICES_HOME, "--home",
                       help="Folder of the stack: pid files, logs, SQLite databases or the PostgreSQL cluster.")


# ServicesConfig fields whose option is not simply --field-name
_OPTION = {"startup_timeout_s": "--timeout", "worker": "--worker/--no-worker", "postgres": "--postgres"}


def _shown(field: str, value) -> str:
    """An option's value for an error message; a database URL's password is left out."""
    if field.endswith(("_url", "_uri")) and isinstance(value, str):
        return repr(re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", value))
    return repr(value)


def _invalid(e: ValidationError) -> None:
    def one(err) -> str:
        if not err["loc"]:  # a rule across fields: its message names them
            return err["msg"].removeprefix("Value error, ")
        field = str(err["loc"][0])
        return f"{_OPTION.get(field, '--' + field.replace('_', '-'))} {_shown(field, err.get('input'))}: {err['msg']}"

    fail("; ".join(one(err) for err in e.errors()))


def _show(statuses, config) -> None:
    from swerl.services import env

    table = Table("service", "pid")
    for column in ("url", "healthy", "log"):
        table.add_column(column, overflow="fold")  # a cut URL or path is no use to copy
    for s in statuses:
        healthy = "yes" if s.healthy else f"[red]no[/] ({escape(s.detail)})"
        if s.healthy and s.startup_s is not None:
            healthy += f" (started in {s.startup_s:g}s)"
        table.add_row(s.name, str(s.pid) if s.pid is not None else "-", s.url, healthy, str(s.log))
    console.print(table)
    console.print(f"Prefect UI: {config.prefect_url}   MLflow UI: {config.mlflow_url}")
    if config.postgres:
        from swerl.services.postgres import pgpass

        console.print(f"PostgreSQL: Prefect {config.prefect_database()}   MLflow {config.mlflow_store_uri()}   "
                      f"(their password: PGPASSFILE={pgpass(config)})")
    typer.echo("export " + " ".join(f"{k}={v}" for k, v in env(config).items()))


def up_command(
    home: Path = HomeOpt,
    host: Optional[str] = typer.Option(None, "--host", help="Interface both servers bind (default 127.0.0.1)."),
    prefect_port: Optional[int] = typer.Option(None, "--prefect-port", help="Prefect server port (default 4200)."),
    mlflow_port: Optional[int] = typer.Option(None, "--mlflow-port", help="MLflow server port (default 5000)."),
    prefect_database_url: Optional[str] = typer.Option(
        None, "--prefect-database-url", help="e.g. postgresql+asyncpg://user:pw@host/db (default: SQLite in --home)."),
    mlflow_backend_store_uri: Optional[str] = typer.Option(
        None, "--mlflow-backend-store-uri", help="e.g. postgresql://user:pw@host/db (default: sqlite:///<home>/mlflow.db)."),
    mlflow_artifacts_destination: Optional[str] = typer.Option(
        None, "--mlflow-artifacts-destination", help="Where proxied artifacts are stored (default: <home>/mlartifacts)."),
    work_pool: Optional[str] = typer.Option(None, "--work-pool", help="Prefect process work pool, created when missing (default swerl-local)."),
    worker: bool = typer.Option(True, "--worker/--no-worker", help="Start a worker on the work pool."),
    postgres: bool = typer.Option(
        False, "--postgres", help="Keep both databases in a PostgreSQL cluster under --home (made with initdb, started "
        "and stopped with the stack) instead of SQLite."),
    postgres_port: Optional[int] = typer.Option(None, "--postgres-port", help="Port of the --postgres cluster on 127.0.0.1 (default 5432)."),
    postgres_os_user: Optional[str] = typer.Option(
        None, "--postgres-os-user", help="Account the --postgres cluster runs as when swerl runs as root (default postgres, created when missing)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds each service may take to become healthy (default 120)."),
) -> None:
    """Start the local Prefect server, a worker and the MLflow server (services already up are left alone)."""
    from swerl.services import ServicesConfig, ServicesError, up

    given = dict(host=host, prefect_port=prefect_port, mlflow_port=mlflow_port, prefect_database_url=prefect_database_url,
                 mlflow_backend_store_uri=mlflow_backend_store_uri, mlflow_artifacts_destination=mlflow_artifacts_destination,
                 work_pool=work_pool, startup_timeout_s=timeout, postgres_port=postgres_port,
                 postgres_os_user=postgres_os_user)
    try:
        # Only what was given: ServicesConfig holds the one copy of the defaults
        config = ServicesConfig(home=home, worker=worker, postgres=postgres, **{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        _invalid(e)
    console.print(f"starting services in {config.home} ...")
    try:
        statuses = up(config)
    except ServicesError as e:
        fail(str(e), code=1)
    _show(statuses, config)


def down_command(home: Path = HomeOpt) -> None:
    """Stop the services `swerl up` started in --home."""
    from swerl.services import down, load_config

    try:
        config = load_config(home)
    except (ValueError, ValidationError) as e:
        fail(str(e))
    stopped = down(config)
    console.print(f"stopped {', '.join(stopped)}" if stopped else f"nothing was running in {config.home}")


def status_command(home: Path = HomeOpt) -> None:
    """Show each service's pid, URL and health; exit 1 when any is not healthy."""
    from swerl.services import load_config, status

    try:
        config = load_config(home)
    except (ValueError, ValidationError) as e:
        fail(str(e))
    statuses = status(config)
    _show(statuses, config)
    raise typer.Exit(0 if all(s.healthy for s in statuses) else 1)
