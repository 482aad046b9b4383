"""One place that talks to the Docker daemon, with an error that says how to start one."""

from __future__ import annotations

import os
import threading

import docker
from docker.errors import DockerException

_local = threading.local()

START_HINT = (
    "start one with `bash scripts/ensure-docker.sh` (installs Debian's docker.io and runs dockerd), "
    "or point DOCKER_HOST at a running daemon"
)


class DockerUnavailableError(RuntimeError):
    """No Docker daemon answered."""


def docker_client(timeout: int = 300) -> docker.DockerClient:
    """A client for this thread (docker-py's HTTP session is not shared across threads)."""
    client = getattr(_local, "client", None)
    if client is None:
        try:
            client = docker.from_env(timeout=timeout, max_pool_size=16)
            client.ping()
        except DockerException as e:
            where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise DockerUnavailableError(f"no Docker daemon answers at {where}: {e}; {START_HINT}") from e
        _local.client = client
    return client
