"""Where the local service stack lives and how it is reached."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator, model_validator

from swerl.util.paths import SERVICES_HOME
from swerl.util.settings import HostSettings

SAVED_CONFIG = "services.json"
# The managed PostgreSQL cluster: its superuser, and one database per service
PG_SUPERUSER = "swerl"
PG_DATABASES = ("prefect", "mlflow")
# Drivers each server can use: Prefect's server is async (asyncpg, aiosqlite); MLflow's is SQLAlchemy's sync one
_PREFECT_SCHEMES = ("postgresql+asyncpg", "sqlite+aiosqlite")
_MLFLOW_SCHEMES = ("postgresql", "sqlite", "mysql", "mssql")
_ASYNC_DRIVERS = ("asyncpg", "aiosqlite", "aiomysql", "asyncmy")
# Hosts that bind every interface: clients on this machine reach them through loopback
_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


class ServicesConfig(HostSettings):
    """A local Prefect server with a worker and an MLflow server, under one home folder; both servers bind `host`."""

    model_config = ConfigDict(extra="forbid")

    home: Path = Field(
        SERVICES_HOME,
        description="Pid files, logs, the default SQLite databases and artifacts, and PREFECT_HOME of the server and worker.",
    )
    prefect_port: int = Field(4200, ge=1, le=65535, description="Port of the Prefect server (API under /api, UI at /).")
    mlflow_port: int = Field(5000, ge=1, le=65535, description="Port of the MLflow tracking server (API and UI).")
    prefect_database_url: str | None = Field(
        None, min_length=1, max_length=2048,
        description="PREFECT_SERVER_DATABASE_CONNECTION_URL, e.g. postgresql+asyncpg://user:pw@host/db; None: SQLite under home.",
    )
    mlflow_backend_store_uri: str | None = Field(
        None, min_length=1, max_length=2048,
        description="MLflow --backend-store-uri, e.g. `postgresql://user:pw@host/db`; None: `sqlite:///<home>/mlflow.db`.",
    )
    mlflow_artifacts_destination: str | None = Field(
        None, min_length=1, max_length=2048,
        description="Where the MLflow server stores the artifacts it proxies (--serve-artifacts); None: `<home>/mlartifacts`.",
    )
    postgres: bool = Field(
        False, description="Run a PostgreSQL cluster under home/postgres (initdb on first use) and keep Prefect's and "
        "MLflow's databases there instead of SQLite; `down` stops it, its data stays.",
    )
    postgres_port: int = Field(5432, ge=1, le=65535, description="Port of the managed PostgreSQL cluster (on 127.0.0.1).")
    postgres_os_user: str = Field(
        "postgres", min_length=1, max_length=32, pattern=r"^[a-z_][a-z0-9_-]*$",
        description="Account the managed cluster runs as when `swerl up` runs as root (initdb refuses root); "
        "created as a system account when missing. Unused otherwise: the cluster runs as the caller.",
    )
    mlflow_workers: int = Field(
        1, ge=1, le=32, description="MLflow server worker processes; its default of 4 costs memory a laptop stack does not need."
    )
    work_pool: str = Field(
        "swerl-local", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Prefect `process` work pool the worker polls; created when missing.",
    )
    worker: bool = Field(True, description="Start a Prefect worker on work_pool.")
    worker_poll_s: float = Field(2.0, ge=0.5, le=300, description="Seconds between the worker's polls for scheduled flow "
                                 "runs (PREFECT_WORKER_QUERY_SECONDS; Prefect's default 10 s: a run started from the UI "
                                 "or `swerl pipeline start` waits 5 s on average before it is picked up).")
    startup_timeout_s: float = Field(120.0, gt=0, le=3600, description="Seconds each service may take to answer its health check.")
    stop_timeout_s: float = Field(15.0, gt=0, le=600, description="Seconds between SIGTERM and SIGKILL when stopping a service.")

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        # Services run with cwd=home and outlive the shell that started them: relative paths would drift
        return Path(os.path.abspath(home.expanduser()))

    @field_validator("prefect_database_url")
    @classmethod
    def _prefect_driver(cls, url: str | None) -> str | None:
        if url is not None and _scheme(url) not in _PREFECT_SCHEMES:
            raise ValueError(
                f"prefect_database_url: scheme {_scheme(url)!r} is not one Prefect's server can use (it needs an async "
                "driver); use postgresql+asyncpg://user:password@host:5432/prefect or "
                "sqlite+aiosqlite:////abs/path/prefect.db (--prefect-database-url), or --postgres for a managed cluster"
            )
        return url

    @field_validator("mlflow_backend_store_uri")
    @classmethod
    def _mlflow_driver(cls, uri: str | None) -> str | None:
        dialect, _, driver = _scheme(uri).partition("+") if uri is not None else ("", "", "")
        if uri is not None and (dialect not in _MLFLOW_SCHEMES or driver in _ASYNC_DRIVERS):
            raise ValueError(
                f"mlflow_backend_store_uri: scheme {_scheme(uri)!r} is not a database MLflow's server can use (it needs "
                "a synchronous driver); use postgresql://user:password@host:5432/mlflow (psycopg2) or "
                "sqlite:////abs/path/mlflow.db (--mlflow-backend-store-uri), or --postgres for a managed cluster"
            )
        return uri

    @model_validator(mode="after")
    def _one_source_of_databases(self) -> "ServicesConfig":
        if self.postgres and (self.prefect_database_url or self.mlflow_backend_store_uri):
            raise ValueError(
                "postgres: the managed cluster holds both databases, so prefect_database_url and mlflow_backend_store_uri "
                "must be left unset; drop --postgres to use the given URLs, or drop the URLs"
            )
        return self

    @property
    def client_host(self) -> str:
        return "127.0.0.1" if self.host in _WILDCARD_HOSTS else self.host

    def _base(self, port: int) -> str:
        host = f"[{self.client_host}]" if ":" in self.client_host else self.client_host
        return f"http://{host}:{port}"

    @property
    def prefect_url(self) -> str:
        """The Prefect UI."""
        return self._base(self.prefect_port)

    @property
    def prefect_api_url(self) -> str:
        return f"{self.prefect_url}/api"

    @property
    def mlflow_url(self) -> str:
        """The MLflow UI and tracking URI."""
        return self._base(self.mlflow_port)

    @property
    def prefect_home(self) -> Path:
        return self.home / "prefect"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def postgres_dir(self) -> Path:
        """The managed cluster: data/ (owned by the account it runs as) and pgpass (its password, mode 0600)."""
        return self.home / "postgres"

    def postgres_url(self, database: str, driver: str = "") -> str:
        """A managed database's URL; the password comes from postgres_dir/pgpass (PGPASSFILE), never the URL."""
        return f"postgresql{driver}://{PG_SUPERUSER}@127.0.0.1:{self.postgres_port}/{database}"

    def prefect_database(self) -> str | None:
        """Prefect's database URL; None: Prefect's default, SQLite under PREFECT_HOME."""
        return self.postgres_url("prefect", "+asyncpg") if self.postgres else self.prefect_database_url

    def mlflow_store_uri(self) -> str:
        if self.postgres:
            return self.postgres_url("mlflow")
        return self.mlflow_backend_store_uri or f"sqlite:///{self.home / 'mlflow.db'}"

    def mlflow_artifacts(self) -> str:
        return self.mlflow_artifacts_destination or str(self.home / "mlartifacts")


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else ""


def save_config(config: ServicesConfig) -> Path:
    """Record the stack's settings in its home, so `down` and `status` need only --home."""
    path = config.home / SAVED_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    # Database URLs may carry passwords
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(config.model_dump_json(indent=2))
    return path


def load_config(home: Path) -> ServicesConfig:
    """The settings the stack in `home` was last started with; the defaults when it never was."""
    home = Path(os.path.abspath(Path(home).expanduser()))
    path = home / SAVED_CONFIG
    if not path.is_file():
        return ServicesConfig(home=home)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not readable JSON ({e}); delete it and run `swerl up` again") from e
    # The folder may have moved since it was written; the one asked for wins
    return ServicesConfig.model_validate({**data, "home": home})
