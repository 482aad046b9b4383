"""The local service stack: a Prefect server with a worker, and an MLflow tracking server, on SQLite or PostgreSQL."""

from swerl.services.config import ServicesConfig, load_config
from swerl.services.stack import ServicesError, ServiceStatus, down, env, status, up

__all__ = ["ServiceStatus", "ServicesConfig", "ServicesError", "down", "env", "load_config", "status", "up"]
