"""Fault injection: a sandbox backend whose starts fail at a fixed rate.

Every ``fail_every``-th start made from one configuration raises SandboxError before the
inner sandbox is touched, the way a lost Docker daemon or a full disk would; every other
start is the inner backend's own. It exists to test what the rest of swerl does with
infrastructure failures (a rollout stage fails as retryable, a rerun redoes only the
failed pairs, no Pass@1 counts them) against a real backend instead of mocks.

Starts are counted per process and per configuration value (equal configs share one
count), so a rerun in the same process goes on counting where the last run stopped.
"""

from __future__ import annotations

import itertools
import threading
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from swerl.envs.docker_sandbox import DockerSandboxConfig
from swerl.envs.local_sandbox import LocalSandboxConfig
from swerl.envs.sandbox import ExecResult, Sandbox, SandboxError, config_kind


InnerSandboxConfig = Annotated[
    Annotated[DockerSandboxConfig, Tag("docker")] | Annotated[LocalSandboxConfig, Tag("local")],
    Discriminator(config_kind),
]


class FlakySandboxConfig(BaseModel):
    """An inner backend whose every ``fail_every``-th start fails (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["flaky"] = Field("flaky", description="Selects this backend in a sandbox config.")
    fail_every: int = Field(3, ge=2, le=1_000_000, description="Starts 'fail_every', 2 x 'fail_every', ... fail "
                            "(3: one start in three).")
    inner: InnerSandboxConfig = Field(default_factory=LocalSandboxConfig, description="The backend that does the work.")

    # the inner backend's, so code that labels or locates sandboxes needs no case for this one
    @property
    def run_id(self) -> str | None:
        return self.inner.run_id

    @run_id.setter
    def run_id(self, value: str | None) -> None:
        self.inner.run_id = value

    @property
    def workdir(self) -> str:
        """Where the inner backend keeps the repository (a local sandbox: its repository folder's name)."""
        inner = self.inner
        return inner.repo_folder if isinstance(inner, LocalSandboxConfig) else inner.workdir


_counts_lock = threading.Lock()
_counts: dict[str, itertools.count] = {}


def _next_start(config: FlakySandboxConfig) -> int:
    with _counts_lock:
        return next(_counts.setdefault(config.model_dump_json(), itertools.count(1)))


class FlakySandbox:
    """``inner`` with injected start failures; everything else is the inner sandbox's."""

    def __init__(self, inner: Sandbox, config: FlakySandboxConfig):
        self.inner = inner
        self.config = config

    def start(self) -> FlakySandbox:
        n = _next_start(self.config)
        if n % self.config.fail_every == 0:
            raise SandboxError(f"injected start failure: start {n} of this flaky sandbox config "
                               f"(one start in {self.config.fail_every} fails)")
        self.inner.start()
        return self

    def __enter__(self) -> FlakySandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def close(self) -> None:
        self.inner.close()

    @property
    def workdir(self) -> str:
        return self.inner.workdir

    @property
    def root(self) -> str:
        return self.inner.root

    @property
    def python(self) -> str:
        return self.inner.python

    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None,
             env: dict[str, str] | None = None) -> ExecResult:
        return self.inner.exec(cmd, timeout, cwd=cwd, env=env)

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes:
        return self.inner.read_file(path, max_bytes)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.inner.write_file(path, data, mode)

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        self.inner.write_files(files)

    def diff(self) -> str:
        return self.inner.diff()


__all__ = ["FlakySandbox", "FlakySandboxConfig", "InnerSandboxConfig"]
