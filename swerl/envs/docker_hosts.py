"""Sandboxes on a pool of Docker hosts: each one a DockerSandbox on the least-loaded healthy host.

What runs where: this process (the rollout or grading worker) places each sandbox, talks to
every host's daemon over its URL (``tcp://host:2375``, ``ssh://``, ``unix://``) and holds the
images: they are built on the local daemon and made available on a host before its first sandbox
of that image, once per image and host, skipped when the host already has the same image id:
streamed (``docker save`` here, ``docker load`` there, through the SDK), or with ``registry`` set
pushed once to a registry and pulled by each host (``swerl.envs.image_registry``). The hosts only
run containers.

Placement: a sandbox goes to the healthy host with the lowest ``live / max_sandboxes`` (the
earlier host on a tie); when every healthy host is full, the start waits. Sandboxes count
process-wide per host URL, so the agent's and the graders' sandboxes share one bound.

A host that stops answering fails only its own sandboxes, each with HostLost (a SandboxError: an
infrastructure error, never the command's fault); it is left out of placement for
``unhealthy_s``, so the retry that follows (grading's ``infra_retries``, a rollout stage's rerun
of its infrastructure failures) lands on another host; after that it is pinged before its next
sandbox, and left out again while it does not answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import docker
from docker.errors import DockerException, ImageNotFound
from pydantic import BaseModel, ConfigDict, Field, model_validator
from requests.exceptions import RequestException

from swerl.envs.configs_in import configs_in
from swerl.envs.docker_client import docker_client
from swerl.envs.docker_config import DockerSandboxConfig
from swerl.envs.docker_reaper import remember_host
from swerl.envs.docker_sandbox import DockerSandbox
from swerl.envs.image_registry import ImageRegistryConfig, pull_as, push_once
from swerl.envs.sandbox import ExecResult, HostLost, SandboxError

T = TypeVar("T")
_FAILURES = (SandboxError, DockerException, RequestException)


class DockerHostConfig(BaseModel):
    """One Docker daemon of the pool."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^(tcp|unix|ssh|http|https)://\S+$",
                     description="The daemon's address: tcp://10.0.0.2:2375, ssh://user@host, unix:///var/run/docker.sock.")
    max_sandboxes: int = Field(4, ge=1, le=4096, description="Most sandboxes alive on this host at once.")


class DockerHostsConfig(BaseModel):
    """Sandboxes spread over several Docker daemons (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["docker_hosts"] = Field("docker_hosts", description="Selects this backend in a sandbox config.")
    hosts: list[DockerHostConfig] = Field(min_length=1, description="The daemons sandboxes are placed on.")
    container: DockerSandboxConfig = Field(default_factory=DockerSandboxConfig,
                                           description="Limits and behaviour of every container, whatever its host.")
    unhealthy_s: float = Field(60.0, ge=0, le=86400, description="How long a host that stopped answering is left out "
                               "of placement before it is tried again.")
    place_timeout_s: float = Field(3600.0, gt=0, le=86400, description="How long a start waits for room on a healthy "
                                   "host before it fails as an infrastructure error.")
    registry: ImageRegistryConfig | None = Field(None, description="Images go to the hosts through this registry (pushed "
                                                 "once, pulled by each host); None: docker save here, docker load there.")

    @model_validator(mode="after")
    def _distinct_hosts(self) -> DockerHostsConfig:
        urls = [h.url for h in self.hosts]
        if len(set(urls)) != len(urls):
            raise ValueError(f"a Docker host is listed twice: {sorted(u for u in set(urls) if urls.count(u) > 1)}")
        return self

    # the container's, so code that labels or locates sandboxes needs no case for this backend
    @property
    def run_id(self) -> str | None:
        return self.container.run_id

    @run_id.setter
    def run_id(self, value: str | None) -> None:
        self.container.run_id = value

    @property
    def workdir(self) -> str:
        return self.container.workdir


@dataclass(eq=False)
class DockerHost:
    """What this process knows of one daemon: sandboxes alive there, health, images made available."""

    url: str
    live: int = 0
    unhealthy_until: float = 0.0
    images: dict[str, str] = field(default_factory=dict)  # image -> id known to be there
    transfers: list[tuple[str, float]] = field(default_factory=list)  # (image, seconds) of every save/load or pull
    _image_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local)

    def client(self) -> docker.DockerClient:
        """This thread's client of the host (docker-py's HTTP session is not shared across threads)."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = docker.DockerClient(base_url=self.url, timeout=300, max_pool_size=16)
        return client

    def answers(self) -> bool:
        """Whether the daemon answers a ping within a few seconds."""
        try:
            with contextlib.closing(docker.APIClient(base_url=self.url, timeout=5)) as api:
                return bool(api.ping())
        except (DockerException, RequestException, OSError):
            return False

    def image_lock(self, image: str) -> threading.Lock:
        with _placing:
            return self._image_locks.setdefault(image, threading.Lock())


_placing = threading.Condition()
_hosts: dict[str, DockerHost] = {}


def docker_host(url: str) -> DockerHost:
    """The process-wide record of the daemon at ``url``."""
    with _placing:
        if url not in _hosts:
            _hosts[url] = DockerHost(url)
            remember_host(url)
        return _hosts[url]


def place(config: DockerHostsConfig) -> DockerHost:
    """Take room for one sandbox on the least-loaded healthy host, waiting while all are full."""
    hosts = [(docker_host(h.url), h.max_sandboxes) for h in config.hosts]
    deadline = time.monotonic() + config.place_timeout_s
    with _placing:
        while True:
            now = time.monotonic()
            healthy = [(h, m) for h, m in hosts if h.unhealthy_until <= now]
            if not healthy:
                raise SandboxError(f"no Docker host of the pool answers ({', '.join(h.url for h, _ in hosts)} stopped "
                                   f"answering within the last {config.unhealthy_s:.0f}s); check the daemons")
            free = [(h, m) for h, m in healthy if h.live < m]
            if free:
                host = min(free, key=lambda hm: hm[0].live / hm[1])[0]
                host.live += 1
                return host
            if now >= deadline:
                raise SandboxError(f"no room on any healthy Docker host of the pool within {config.place_timeout_s:.0f}s")
            _placing.wait(min(deadline - now, 1.0))  # wakes on a release, and re-checks health each second


def release(host: DockerHost) -> None:
    with _placing:
        host.live -= 1
        _placing.notify_all()


def mark_unhealthy(host: DockerHost, seconds: float) -> None:
    with _placing:
        host.unhealthy_until = time.monotonic() + seconds
        host.images.clear()  # a daemon that comes back may have lost what it had
        _placing.notify_all()


def ensure_image(host: DockerHost, image: str, registry: ImageRegistryConfig | None = None) -> None:
    """Make ``image`` available on ``host`` (streamed from the local daemon, or through ``registry``, unless the host
    has its id); once per image and host in this process, whatever the threads asking."""
    local = docker_client()
    try:
        want = local.images.get(image).id
    except ImageNotFound:
        want = None  # built elsewhere: the host must have it already
    if want is not None and host.images.get(image) == want:
        return
    with host.image_lock(image):
        if want is not None and host.images.get(image) == want:
            return
        remote = host.client()
        try:
            have = remote.images.get(image).id
        except ImageNotFound:
            have = None
        if want is None and have is None:
            raise SandboxError(f"image {image} is neither on the local Docker daemon nor on {host.url}; build it first "
                               "(`swerl images build`)")
        if want is not None and have != want:
            start = time.monotonic()
            if registry is not None:
                push_once(local, image, want, registry)
                have = pull_as(remote, host.url, image, registry)
            else:
                for message in remote.api.load_image(local.api.get_image(image, chunk_size=1 << 20)):
                    if isinstance(message, dict) and message.get("error"):
                        raise SandboxError(f"loading {image} on {host.url} failed: {message['error']}")
                have = remote.images.get(image).id
            if have != want:
                raise SandboxError(f"{image} copied to {host.url} has id {have}, not the local {want}")
            host.transfers.append((image, time.monotonic() - start))
        host.images[image] = have


class HostSandbox:
    """A DockerSandbox on a host of the pool, placed when it starts; the Sandbox protocol, delegated."""

    def __init__(self, image: str, config: DockerHostsConfig, *, slots: threading.BoundedSemaphore | None = None,
                 base_commit: str | None = None, preload: dict[str, tuple[bytes | str, int]] | None = None):
        self.image, self.config = image, config
        self._slots, self._base_commit, self._preload = slots, base_commit, preload
        self._host: DockerHost | None = None
        self._inner: DockerSandbox | None = None
        self._holds_slot = False
        self._closed = False

    @property
    def host_url(self) -> str | None:
        """The daemon this sandbox was placed on (None before it starts)."""
        return self._host.url if self._host else None

    @property
    def workdir(self) -> str:
        return self.config.container.workdir

    @property
    def root(self) -> str:
        return "/"

    @property
    def python(self) -> str:
        return self._inner.python if self._inner else "python3"

    @property
    def base_commit(self) -> str | None:
        return self._inner.base_commit if self._inner else self._base_commit

    # -- lifecycle ---------------------------------------------------------------
    def _placed(self) -> DockerSandbox:
        """Room on a host (a concurrency slot first, so no host room is held while waiting for one), the image
        there, and the DockerSandbox on it, not started."""
        if self._inner is not None or self._closed:
            raise SandboxError("this sandbox was started already; make a new one")
        if self._slots is not None:
            self._slots.acquire()
            self._holds_slot = True
        while True:
            self._host = place(self.config)
            if self._host.unhealthy_until == 0.0 or self._host.answers():  # one that failed before is probed first
                self._host.unhealthy_until = 0.0
                break
            mark_unhealthy(self._host, self.config.unhealthy_s)
            release(self._host)
            self._host = None
        ensure_image(self._host, self.image, self.config.registry)
        self._inner = DockerSandbox(self.image, self.config.container, base_commit=self._base_commit,
                                    preload=self._preload, client=self._host.client())
        return self._inner

    def _starting(self, start: Callable[[DockerSandbox], T]) -> T:
        try:
            return self._guarded(lambda: start(self._placed()))
        except BaseException:
            self.close()
            raise

    def start(self) -> HostSandbox:
        self._starting(lambda sandbox: sandbox.start())
        return self

    def run_once(self, cmd: str, timeout: float | None = None) -> ExecResult:
        return self._starting(lambda sandbox: sandbox.run_once(cmd, timeout))

    def _guarded(self, call: Callable[[], T]) -> T:
        """``call()``; when it fails and the host no longer answers, the host is marked unhealthy and the failure
        becomes HostLost (infrastructure: never blamed on the command, retried elsewhere)."""
        try:
            return call()
        except _FAILURES as e:
            host = self._host
            if host is None or host.answers():
                raise
            mark_unhealthy(host, self.config.unhealthy_s)
            raise HostLost(f"Docker host {host.url} stopped answering ({type(e).__name__}: {str(e)[:300]}); it is "
                               f"left out of placement for {self.config.unhealthy_s:.0f}s") from e

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._inner is not None:
                self._inner.close()
        except _FAILURES:
            if self._host is None or self._host.answers():
                raise
            # the host is gone, and its containers with it (or they end with their lifetime)
        finally:
            if self._host is not None:
                release(self._host)
            if self._holds_slot:
                self._holds_slot = False
                self._slots.release()

    def __enter__(self) -> HostSandbox:
        return self if self._inner is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands and files ------------------------------------------------------
    def _running(self) -> DockerSandbox:
        if self._inner is None:
            raise SandboxError("this sandbox is not running; use it inside `with`")
        return self._inner

    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None,
             env: dict[str, str] | None = None) -> ExecResult:
        return self._guarded(lambda: self._running().exec(cmd, timeout, cwd=cwd, env=env))

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes:
        return self._guarded(lambda: self._running().read_file(path, max_bytes))

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._guarded(lambda: self._running().write_file(path, data, mode))

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        self._guarded(lambda: self._running().write_files(files))

    def diff(self) -> str:
        return self._guarded(lambda: self._running().diff())


def on_agents_pool(agent_sandbox: object, grading_sandbox: T) -> DockerHostsConfig | T:
    """Where a rollout's graders run: on the agents' pool when they have one (with the graders' own container
    settings), else ``grading_sandbox`` as it is."""
    if isinstance(agent_sandbox, DockerHostsConfig) and isinstance(grading_sandbox, DockerSandboxConfig):
        return agent_sandbox.model_copy(update={"container": grading_sandbox}, deep=True)
    return grading_sandbox


def hosts_in(value: Any) -> list[str]:
    """The URL of every Docker host named by a ``docker_hosts`` sandbox config anywhere in ``value`` (a config
    model, or flow parameters as models, dicts and lists): what a reap of that run must cover."""
    return list(dict.fromkeys(h.url for config in configs_in(value, DockerHostsConfig) for h in config.hosts))


__all__ = ["DockerHost", "DockerHostConfig", "DockerHostsConfig", "HostSandbox", "docker_host", "ensure_image",
           "hosts_in", "on_agents_pool"]
