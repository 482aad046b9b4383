"""Finding and removing swerl's containers: those of one run, those whose owner died, those past
their lifetime. Sandboxes label themselves (``swerl.envs.labels``); nothing here touches a container
without swerl's label.

Every call covers the local daemon, the Docker hosts named in ``hosts``, and every host a pool of
this process placed a sandbox on (``remember_host``); a host that does not answer is skipped (its
containers end with their lifetime, or are reaped when it answers again)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable

import docker
from docker.errors import APIError, DockerException, NotFound
from requests.exceptions import RequestException

from swerl.envs import labels
from swerl.envs.docker_client import docker_client

log = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


_hosts_lock = threading.Lock()
_known_hosts: dict[str, None] = {}  # ordered set: Docker host URLs this process placed sandboxes on


def remember_host(url: str) -> None:
    """Add ``url`` to the hosts every later reap of this process covers."""
    with _hosts_lock:
        _known_hosts[url] = None


def reap_containers(*, run_id: str | None = None, everything: bool = False, hosts: Iterable[str] = (),
                    within_run: str | None = None) -> list[str]:
    """Remove swerl containers whose owner died, whose lifetime passed, or (with ``run_id``) of one run,
    on the local daemon and every host of ``hosts`` and of this process's pools.

    ``within_run`` looks only at that run's containers, so a caller (a test) that shares the daemon
    with other work removes nothing it did not create."""
    host, now, removed = socket.gethostname(), time.time(), []
    scope = [f"{labels.MANAGED}=1"] + ([f"{labels.RUN_ID}={within_run}"] if within_run else [])
    for c in _listed_everywhere({"label": scope}, hosts):
        lbl = c.attrs.get("Labels") or {}
        dead_owner = lbl.get(labels.OWNER_HOST) == host and not pid_alive(int(lbl.get(labels.OWNER_PID, "0") or 0))
        expired = float(lbl.get(labels.EXPIRES_AT, "inf")) < now
        ours = run_id is not None and lbl.get(labels.RUN_ID) == run_id
        if everything or dead_owner or expired or ours:
            try:
                c.remove(force=True)
                removed.append(_name(c))
            except (NotFound, APIError):
                pass
    return removed


def running_containers(run_id: str, hosts: Iterable[str] = ()) -> list[str]:
    """Names of containers still alive for ``run_id`` on the local daemon and the known hosts (leak checks)."""
    return [_name(c) for c in _listed_everywhere({"label": f"{labels.RUN_ID}={run_id}"}, hosts)]


def _listed(filters: dict, client: docker.DockerClient | None = None) -> list:
    """Containers from one list call; sparse, because a full listing inspects each container
    and fails when one removes itself in between (sandboxes auto-remove)."""
    return (client or docker_client()).containers.list(all=True, sparse=True, filters=filters)


def _listed_everywhere(filters: dict, hosts: Iterable[str]) -> list:
    found = {c.id: c for c in _listed(filters)}
    with _hosts_lock:
        urls = dict.fromkeys([*hosts, *_known_hosts])
    for url in urls:
        try:
            # left open: the containers listed remove themselves through it
            found.update((c.id, c) for c in _listed(filters, docker.DockerClient(base_url=url, timeout=30)))
        except (DockerException, RequestException) as e:
            log.warning("Docker host %s skipped by the reaper, it does not answer: %s", url, e)
    return list(found.values())


def _name(container) -> str:
    names = container.attrs.get("Names") or [container.id]
    return names[0].lstrip("/")


__all__ = ["reap_containers", "remember_host", "running_containers"]
