"""Finding and removing swerl's containers: those of one run, those whose owner died, those past
their lifetime. Sandboxes label themselves (``swerl.envs.labels``); nothing here touches a container
without swerl's label."""

from __future__ import annotations

import os
import socket
import time

from docker.errors import APIError, NotFound

from swerl.envs import labels
from swerl.envs.docker_client import docker_client


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_containers(*, run_id: str | None = None, everything: bool = False, within_run: str | None = None) -> list[str]:
    """Remove swerl containers whose owner died, whose lifetime passed, or (with ``run_id``) of one run.

    ``within_run`` looks only at that run's containers, so a caller (a test) that shares the daemon
    with other work removes nothing it did not create."""
    host, now, removed = socket.gethostname(), time.time(), []
    scope = [f"{labels.MANAGED}=1"] + ([f"{labels.RUN_ID}={within_run}"] if within_run else [])
    for c in _listed(filters={"label": scope}):
        lbl = c.attrs.get("Labels") or {}
        dead_owner = lbl.get(labels.OWNER_HOST) == host and not _pid_alive(int(lbl.get(labels.OWNER_PID, "0") or 0))
        expired = float(lbl.get(labels.EXPIRES_AT, "inf")) < now
        ours = run_id is not None and lbl.get(labels.RUN_ID) == run_id
        if everything or dead_owner or expired or ours:
            try:
                c.remove(force=True)
                removed.append(_name(c))
            except (NotFound, APIError):
                pass
    return removed


def running_containers(run_id: str) -> list[str]:
    """Names of containers still alive for ``run_id`` (leak checks)."""
    return [_name(c) for c in _listed(filters={"label": f"{labels.RUN_ID}={run_id}"})]


def _listed(filters: dict) -> list:
    """Containers from one list call; sparse, because a full listing inspects each container
    and fails when one removes itself in between (sandboxes auto-remove)."""
    return docker_client().containers.list(all=True, sparse=True, filters=filters)


def _name(container) -> str:
    names = container.attrs.get("Names") or [container.id]
    return names[0].lstrip("/")


__all__ = ["reap_containers", "running_containers"]
