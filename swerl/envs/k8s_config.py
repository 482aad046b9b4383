"""The Kubernetes sandbox's configuration, and the API client it makes from it (one per sandbox).

The settings every container sandbox has (memory, cpus, network, workdir, timeouts, output
limit, lifetime, run id, sweep, activate) are ``ContainerSettings``, declared once for Docker
and Kubernetes; the rest say where the cluster is and how pods are scheduled there.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from swerl.envs.docker_config import ContainerSettings

_DOCKER_UNITS = {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}


def memory_quantity(docker_size: str) -> str:
    """Docker's memory syntax (``512m``, ``2g``: powers of 1024) as a Kubernetes quantity (``512Mi``, ``2Gi``)."""
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", docker_size).groups()
    return number + _DOCKER_UNITS[unit]


def memory_bytes(docker_size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", docker_size).groups()
    return int(number) * 1024 ** " kmg".index(unit or " ")


def cpu_quantity(cores: float) -> str:
    """Cores as Kubernetes millicores: 1.5 -> ``1500m`` (at least 1m)."""
    return f"{max(1, round(cores * 1000))}m"


class KubernetesSandboxConfig(ContainerSettings):
    """One pod per sandbox on a Kubernetes cluster: where the cluster is, the pod's resources and limits."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["kubernetes"] = Field("kubernetes", description="Selects this backend in a sandbox config.")
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                           description="Namespace of the sandboxes' pods (and of the deny-all NetworkPolicy).")
    api_server: str | None = Field(
        None, pattern=r"^https?://", description="The API server's URL (https://host:6443); None: from the kubeconfig, "
        "else the in-cluster service account when swerl itself runs in a pod.")
    token_file: Path | None = Field(None, description="A file holding a bearer token for `api_server` (None: no token, "
                                    "as behind `kubectl proxy`).")
    ca_cert: Path | None = Field(None, description="CA bundle that signed `api_server`'s certificate (None: the system's).")
    verify_tls: bool = Field(True, description="Check `api_server`'s certificate; turn off only for a throw-away cluster.")
    kubeconfig: Path | None = Field(None, description="Kubeconfig file when no `api_server` is given (None: $KUBECONFIG, "
                                    "else ~/.kube/config).")
    context: str | None = Field(None, description="Kubeconfig context (None: the file's current context).")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="The pod's imagePullPolicy: images are tagged by content hash, so IfNotPresent is safe.")
    image_pull_secrets: list[str] = Field(default_factory=list, max_length=16,
                                          description="Names of Secrets in `namespace` for a private registry.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="The pod's nodeSelector (say, a node pool).")
    memory_request: str | None = Field(None, pattern=r"^\d+[kmg]?$", description="Memory the scheduler reserves, "
                                       "docker syntax; None: equal to `memory` (Guaranteed QoS: not evicted first).")
    cpu_request: float | None = Field(None, gt=0, le=64, description="Cores the scheduler reserves; None: equal to `cpus`.")
    start_timeout_s: float = Field(300.0, gt=0, le=3600, description="How long a pod may take to be Running (scheduling "
                                   "and image pull); past it the pod is deleted and start fails.")
    api_retries: int = Field(5, ge=0, le=20, description="Retries of an API call answered 429 or 5xx, or cut off.")
    api_backoff_s: float = Field(0.5, gt=0, le=60, description="First wait between retries; doubled each time "
                                 "(capped at 30 s); a Retry-After header is honoured.")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> KubernetesSandboxConfig:
        if self.cpu_request is not None and self.cpu_request > self.cpus:
            raise ValueError(f"cpu_request {self.cpu_request} is over the limit cpus={self.cpus}; Kubernetes refuses "
                             "such a pod: lower cpu_request or raise cpus")
        if self.memory_request is not None and memory_bytes(self.memory_request) > memory_bytes(self.memory):
            raise ValueError(f"memory_request {self.memory_request} is over the limit memory={self.memory}; Kubernetes "
                             "refuses such a pod: lower memory_request or raise memory")
        return self


def api_client(config: KubernetesSandboxConfig):
    """A new ``kubernetes.client.ApiClient`` for ``config``'s cluster (a sandbox owns one and closes it)."""
    try:
        from kubernetes import client
        from kubernetes import config as kube_config
    except ImportError as e:  # the optional extra
        raise ImportError("the kubernetes sandbox needs the `kubernetes` client: pip install 'swerl[kubernetes]'") from e
    conf = client.Configuration()
    if config.api_server:
        conf.host = config.api_server.rstrip("/")
        conf.verify_ssl = config.verify_tls
        conf.ssl_ca_cert = str(config.ca_cert) if config.ca_cert else None
        if config.token_file:
            conf.api_key = {"authorization": "Bearer " + config.token_file.read_text().strip()}
    elif config.kubeconfig or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
        kube_config.load_kube_config(config_file=str(config.kubeconfig) if config.kubeconfig else None,
                                     context=config.context, client_configuration=conf)
    else:
        kube_config.load_incluster_config(client_configuration=conf)
    return client.ApiClient(conf)


@contextmanager
def session(config: KubernetesSandboxConfig):
    """An ``api_client`` closed after use, connections included."""
    api = api_client(config)
    try:
        yield api
    finally:
        close_client(api)


def close_client(api) -> None:
    """Close the client's connections (its own ``close`` ends only its thread pool)."""
    api.rest_client.pool_manager.clear()
    api.close()


__all__ = ["KubernetesSandboxConfig", "api_client", "close_client", "cpu_quantity", "memory_quantity", "session"]
