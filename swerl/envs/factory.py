"""One sandbox config type for every backend, and the one place that turns a config into a sandbox.

``SandboxConfig`` is a union tagged by ``kind``: ``docker`` (the default, also for a config
without a ``kind``), ``docker_hosts`` (docker on a pool of daemons), ``local`` (a repository
copy on this machine, no isolation), ``kubernetes`` (one pod per sandbox on a cluster) and
``flaky`` (fault injection around another). Code that needs a sandbox calls ``make_sandbox``;
a new backend is a config class, a sandbox class and a line here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import Discriminator, Tag

from swerl.envs.docker_hosts import DockerHostsConfig, HostSandbox
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig
from swerl.envs.flaky_sandbox import FlakySandbox, FlakySandboxConfig
from swerl.envs.k8s_config import KubernetesSandboxConfig
from swerl.envs.local_sandbox import LocalSandbox, LocalSandboxConfig
from swerl.envs.sandbox import Sandbox, config_kind

SandboxConfig = Annotated[
    Annotated[DockerSandboxConfig, Tag("docker")]
    | Annotated[DockerHostsConfig, Tag("docker_hosts")]
    | Annotated[LocalSandboxConfig, Tag("local")]
    | Annotated[KubernetesSandboxConfig, Tag("kubernetes")]
    | Annotated[FlakySandboxConfig, Tag("flaky")],
    Discriminator(config_kind),
]

Preload = dict[str, tuple[bytes | str, int]]
_Maker = Callable[..., Sandbox]


def _kubernetes(config: KubernetesSandboxConfig, image: str, **kw) -> Sandbox:
    from swerl.envs.k8s_sandbox import KubernetesSandbox  # the client is an optional extra

    return KubernetesSandbox(image, config, **kw)


def _flaky(config: FlakySandboxConfig, image: str, **kw) -> Sandbox:
    return FlakySandbox(make_sandbox(config.inner, image, **kw), config)


_MAKERS: dict[type, _Maker] = {
    DockerSandboxConfig: lambda config, image, **kw: DockerSandbox(image, config, **kw),
    DockerHostsConfig: lambda config, image, **kw: HostSandbox(image, config, **kw),
    LocalSandboxConfig: lambda config, image, **kw: LocalSandbox(image, config, **kw),
    KubernetesSandboxConfig: _kubernetes,
    FlakySandboxConfig: _flaky,
}


def make_sandbox(config: SandboxConfig, image: str, *, base_commit: str | None = None, preload: Preload | None = None,
                 slots: threading.BoundedSemaphore | None = None) -> Sandbox:
    """A sandbox of ``config``'s backend, not started yet (``with`` or ``start()`` starts it).

    ``image``: what the backend starts from (a Docker image tag; a repository folder for a local
    sandbox); ``base_commit``: the commit ``diff`` compares with; ``preload``: ``{path: (data, mode)}``
    written as it starts; ``slots``: a semaphore held from start to close (bounded concurrency).
    """
    maker = _MAKERS.get(type(config))
    if maker is None:
        raise TypeError(f"no sandbox backend for {type(config).__name__}; "
                        "known kinds: docker, docker_hosts, local, kubernetes, flaky")
    return maker(config, image, base_commit=base_commit, preload=preload, slots=slots)


def environment_kind(config: SandboxConfig) -> Literal["image", "repository"]:
    """What a backend's sandboxes start from: a built Docker image, or a task's repository folder."""
    if isinstance(config, FlakySandboxConfig):
        return environment_kind(config.inner)
    return "repository" if isinstance(config, LocalSandboxConfig) else "image"


__all__ = ["SandboxConfig", "environment_kind", "make_sandbox"]
