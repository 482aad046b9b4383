"""Where runs, checkpoints and the model registry are recorded."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swerl.util.paths import MLFLOW_DB

SQLITE_PREFIX = "sqlite:///"
# Backends the MlflowClient can reach without a plugin. MLflow 3 refuses a bare folder (the
# file store) unless told otherwise, so a path is rejected here with the fix in the message.
_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql")


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI when set, else a SQLite database under ./.swerl (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"{SQLITE_PREFIX}{MLFLOW_DB.resolve()}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, None for other backends (and in-memory SQLite)."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    path = uri[len(SQLITE_PREFIX):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


class TrackingConfig(BaseModel):
    """The MLflow tracking server or database, the experiment, and the registered model name."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(
        None, min_length=1, max_length=2048,
        description="MLflow tracking URI: `http(s)://host:port`, `sqlite:///path.db`, `postgresql://user:pw@host/db`. "
        "None: `$MLFLOW_TRACKING_URI`, else `sqlite:///<abs>/.swerl/mlflow.db` (its folder is created on use), resolved "
        "where the runs are recorded (a form's default names no machine's folder).",
    )
    experiment: str = Field("swerl", min_length=1, max_length=500, description="MLflow experiment the runs go to; created when missing.")
    registered_model: str = Field(
        "swerl-policy", min_length=1, max_length=256, description="Registered model name checkpoints are registered under.",
    )
    log_weights: bool = Field(
        False, description="False: a logged checkpoint records its folder's path and digest only; "
        "True: the model folder's files are also copied into the logged model's artifacts.",
    )
    artifact_location: str | None = Field(
        None, min_length=1, max_length=2048,
        description="Artifact root of the experiment when it is created (ignored for an existing one). "
        "None: `<database folder>/mlartifacts` for SQLite, the server's default otherwise.",
    )

    @field_validator("tracking_uri")
    @classmethod
    def _known_backend(cls, uri: str | None) -> str | None:
        if uri is None:
            return None
        scheme = urlparse(uri).scheme.split("+", 1)[0].lower()
        if scheme not in _SCHEMES:
            raise ValueError(
                f"tracking_uri {uri!r} is not a tracking server or database URI; use http(s)://host:port, "
                f"sqlite:///path/to/mlflow.db or postgresql://user:pw@host/db"
            )
        path = sqlite_path(uri)
        if path is not None and not path.is_absolute():
            # Threads, workers and flows may run from other folders: a relative database would split
            _, sep, query = uri.partition("?")
            return f"{SQLITE_PREFIX}{path.resolve()}{sep}{query}"
        return uri

    def resolved(self) -> TrackingConfig:
        """This config with its tracking URI resolved (the environment's, else the local SQLite database)."""
        if self.tracking_uri is not None:
            return self
        return self.model_copy(update={"tracking_uri": self._known_backend(default_tracking_uri())})

    def resolved_artifact_location(self) -> str | None:
        """The artifact root for a new experiment. MLflow's own SQLite default is ./mlruns of
        whichever process created the store, so artifacts would scatter over working folders."""
        if self.artifact_location is not None:
            return self.artifact_location
        db = sqlite_path(self.resolved().tracking_uri)
        return str(db.parent / "mlartifacts") if db is not None else None
