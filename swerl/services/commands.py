"""The command line, environment and health probe of each service."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from swerl.services import health, postgres
from swerl.services.config import ServicesConfig

PREFECT_SERVER = "prefect-server"
MLFLOW = "mlflow"
PREFECT_WORKER = "prefect-worker"
POSTGRES = "postgres"

# Settings a caller's environment might carry that would send our server elsewhere than asked
_PREFECT_DB_VARS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
OFFLINE_ENV = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    command: list[str]
    env: dict[str, str]
    port: int | None
    url: str
    probe: Callable[[ServicesConfig], tuple[bool, str]]
    # how a user moves the service to another port, quoted when its port is taken
    port_hint: str = ""
    user: str | None = None  # the account it runs as; None: the caller


def env(config: ServicesConfig) -> dict[str, str]:
    """What clients need to reach the stack."""
    return {"PREFECT_API_URL": config.prefect_api_url, "MLFLOW_TRACKING_URI": config.mlflow_url}


def child_env(config: ServicesConfig) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in _PREFECT_DB_VARS}
    environ.update(OFFLINE_ENV)
    environ.update(env(config))
    environ["PREFECT_HOME"] = str(config.prefect_home)
    if config.postgres:
        # libpq (MLflow's psycopg2) and asyncpg (Prefect) both read the managed cluster's password there
        environ["PGPASSFILE"] = str(postgres.pgpass(config))
    return environ


def _module(name: str) -> list[str]:
    # `python -m` rather than the console script: the recorded command is then exactly the
    # process's /proc cmdline, which is how `down` recognises its own processes
    return [sys.executable, "-m", name]


def prefect_server(config: ServicesConfig) -> ServiceSpec:
    environ = child_env(config)
    if config.prefect_database():
        environ["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = config.prefect_database()
    return ServiceSpec(
        name=PREFECT_SERVER,
        command=[*_module("prefect"), "server", "start", "--host", config.host, "--port", str(config.prefect_port),
                 "--analytics-off"],
        env=environ, port=config.prefect_port, url=config.prefect_url, probe=health.prefect_server,
        port_hint="--prefect-port (ServicesConfig.prefect_port)",
    )


def mlflow_server(config: ServicesConfig) -> ServiceSpec:
    return ServiceSpec(
        name=MLFLOW,
        command=[*_module("mlflow"), "server", "--backend-store-uri", config.mlflow_store_uri(),
                 "--artifacts-destination", config.mlflow_artifacts(), "--serve-artifacts",
                 "--host", config.host, "--port", str(config.mlflow_port), "--workers", str(config.mlflow_workers)],
        env=child_env(config), port=config.mlflow_port, url=config.mlflow_url, probe=health.mlflow_server,
        port_hint="--mlflow-port (ServicesConfig.mlflow_port)",
    )


def prefect_worker(config: ServicesConfig) -> ServiceSpec:
    environ = child_env(config)
    environ["PREFECT_WORKER_QUERY_SECONDS"] = str(config.worker_poll_s)
    return ServiceSpec(
        name=PREFECT_WORKER,
        command=[*_module("prefect"), "worker", "start", "--pool", config.work_pool, "--type", "process",
                 "--name", health.worker_name(config), "--install-policy", "never"],
        env=environ, port=None, url=f"{config.prefect_url}/work-pools/work-pool/{config.work_pool}",
        probe=health.prefect_worker,
    )


def work_pool_create(config: ServicesConfig) -> list[str]:
    return [*_module("prefect"), "work-pool", "create", config.work_pool, "--type", "process"]


def postgres_server(config: ServicesConfig) -> ServiceSpec:
    return ServiceSpec(
        name=POSTGRES, command=postgres.server_command(config), env=child_env(config), port=config.postgres_port,
        url=config.postgres_url("").rstrip("/"), probe=postgres.probe,
        port_hint="--postgres-port (ServicesConfig.postgres_port)", user=postgres.os_user(config),
    )


def all_specs(config: ServicesConfig) -> list[ServiceSpec]:
    specs = [prefect_server(config), mlflow_server(config)]
    if config.postgres:
        specs.insert(0, postgres_server(config))
    return specs + [prefect_worker(config)] if config.worker else specs
