"""Images to Docker hosts through a registry: pushed once from the local daemon, pulled by each host.

The other way for ``swerl.envs.docker_hosts`` to make an image available (``registry`` on the pool's
config): one upload per image from this machine instead of one ``docker save`` stream per host,
and a host pulls only the layers it lacks (a task image over a base it has costs its own layers).
The registry is the user's: any Docker Registry v2 (``registry:2``, Debian's ``docker-registry``
package: ``docker-registry serve config.yml``). A plain-HTTP registry on a private address needs
``--insecure-registry ADDRESS`` on each host's dockerd (Docker trusts plain HTTP on loopback only),
and this machine's daemon pushes over loopback when the registry runs here (``push_address``).

On a host the pulled image is tagged with its local name (and the registry's name removed), so
sandboxes start from the same name wherever they run; its id must be the local one (a registry keeps
an image's config, hence its id), or the transfer fails.
"""

from __future__ import annotations

import threading

import docker
from docker.errors import APIError
from docker.utils import parse_repository_tag
from pydantic import BaseModel, ConfigDict, Field

from swerl.envs.sandbox import SandboxError

_ADDRESS = r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:\d{1,5})?$"


class ImageRegistryConfig(BaseModel):
    """Where the pool's images go through (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    address: str = Field(pattern=_ADDRESS, max_length=255, description="host:port the hosts pull from, e.g. 10.0.0.5:5000 "
                         "(each host's dockerd needs --insecure-registry 10.0.0.5:5000 for a plain-HTTP registry).")
    push_address: str | None = Field(None, pattern=_ADDRESS, max_length=255, description="host:port this machine's daemon "
                                     "pushes to, when it differs: 127.0.0.1:5000 for a registry running here (plain HTTP is "
                                     "trusted on loopback without configuration); None: address.")
    repository_prefix: str = Field("swerl", pattern=r"^[a-z0-9]+([._-][a-z0-9]+)*$", max_length=64,
                                   description="Repository prefix of the images in the registry.")

    @property
    def pusher(self) -> str:
        return self.push_address or self.address


def registry_repository(image: str, prefix: str) -> tuple[str, str]:
    """(repository inside the registry, tag) of a local image name: ``swerl-task/x:abc`` -> (``swerl/swerl-task/x``, ``abc``).
    A registry host in the name (``quay.io/org/x``) is dropped: the image goes to this registry whatever its origin."""
    repo, tag = parse_repository_tag(image)
    first, _, rest = repo.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        repo = rest
    return f"{prefix}/{repo}", tag or "latest"


_pushed: dict[tuple[str, str], str] = {}  # (registry, image) -> image id pushed by this process
_push_locks: dict[tuple[str, str], threading.Lock] = {}
_guard = threading.Lock()


def push_once(local: docker.DockerClient, image: str, image_id: str, config: ImageRegistryConfig) -> None:
    """Push ``image`` (whose local id is ``image_id``) to the registry unless this process pushed that id already."""
    key = (config.pusher, image)
    with _guard:
        lock = _push_locks.setdefault(key, threading.Lock())
    with lock:
        if _pushed.get(key) == image_id:
            return
        repo, tag = registry_repository(image, config.repository_prefix)
        ref = f"{config.pusher}/{repo}"
        local.api.tag(image, ref, tag)
        try:
            for message in local.api.push(ref, tag=tag, stream=True, decode=True):
                if isinstance(message, dict) and message.get("error"):
                    raise SandboxError(f"pushing {image} to the registry {config.pusher} failed: {message['error']}; is it "
                                       "running, and reachable from this machine's daemon?")
        except APIError as e:
            raise SandboxError(f"pushing {image} to the registry {config.pusher} failed: {e}") from e
        finally:
            local.api.remove_image(f"{ref}:{tag}")  # the tag only: the image keeps its own name
        _pushed[key] = image_id


def pull_as(remote: docker.DockerClient, host_url: str, image: str, config: ImageRegistryConfig) -> str:
    """Pull ``image`` from the registry onto the host and name it ``image`` there; its id on the host."""
    repo, tag = registry_repository(image, config.repository_prefix)
    ref = f"{config.address}/{repo}"
    hint = (f"; the host's dockerd must reach {config.address} and, for a plain-HTTP registry, run with "
            f"--insecure-registry {config.address}")
    try:
        for message in remote.api.pull(ref, tag=tag, stream=True, decode=True):
            if isinstance(message, dict) and message.get("error"):
                raise SandboxError(f"{host_url} could not pull {ref}:{tag}: {message['error']}{hint}")
        name, own_tag = parse_repository_tag(image)
        remote.api.tag(f"{ref}:{tag}", name, own_tag or "latest")
        remote.api.remove_image(f"{ref}:{tag}")
        return remote.images.get(image).id
    except APIError as e:
        raise SandboxError(f"{host_url} could not pull {ref}:{tag}: {e}{hint}") from e


__all__ = ["ImageRegistryConfig", "pull_as", "push_once", "registry_repository"]
