"""The Sandbox seam: where the agent acts and where predictions are graded.

Backends are siblings behind one Protocol (``swerl.envs.factory.make_sandbox`` picks one
from its config's ``kind``); ``tests/conformance`` holds the behaviour every one of them
must show.
"""

from __future__ import annotations

import shlex
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field, ValidationError


class ExecResult(BaseModel):
    """One command's outcome inside a sandbox."""

    command: str
    exit_code: int = Field(description="The command's exit status; 124 when it timed out.")
    output: str = Field(description="stdout and stderr interleaved, truncated head and tail with a marker.")
    timed_out: bool = False
    truncated: bool = False
    total_bytes: int = Field(0, ge=0, description="Bytes the command printed before truncation.")
    duration_s: float = Field(0.0, ge=0)


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the command in it): an infrastructure error."""


class HostLost(SandboxError):
    """The machine running the sandbox stopped answering: infrastructure, whatever the command did (the
    sandbox is gone; a retry runs elsewhere)."""


class RunnerFailed(SandboxError):
    """The in-container runner died or answered garbage while a command ran. The command itself may
    have caused it (it can kill the runner or write to its stdout), so graders ask whether it recurs."""


class Sandbox(Protocol):
    """An isolated copy of a repository environment; ``start`` (or ``with``) before use."""

    @property
    def workdir(self) -> str:
        """The repository; commands run there unless given another ``cwd``."""
        ...

    @property
    def root(self) -> str:
        """Where swerl's own absolute paths (/opt/swerl, /usr/local/bin, /tmp) lie as commands see them:
        ``/`` in a container, the sandbox's own folder where it shares the host's file system."""
        ...

    @property
    def python(self) -> str:
        """A python3 for swerl's helpers (standard library only), never the task's environment."""
        ...

    def start(self) -> Sandbox:
        """Make the sandbox; raises SandboxError when it cannot (an infrastructure failure)."""
        ...

    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None, env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` with bash; on timeout every process it started is killed."""
        ...

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes: ...

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write ``{path: (data, mode)}`` at once (one round trip where the sandbox allows)."""
        ...

    def diff(self) -> str:
        """The working tree (tracked and untracked files) against base_commit, as a git diff."""
        ...

    def close(self) -> None:
        """Remove everything the sandbox made; safe to call twice."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class RunsOnce(Protocol):
    """A backend that can start a sandbox with one command and nothing else (cheaper than start, then exec)."""

    def run_once(self, cmd: str, timeout: float | None = None) -> ExecResult: ...


def run_alone(sandbox: Sandbox, cmd: str, timeout: float | None = None) -> ExecResult:
    """Start ``sandbox`` and run ``cmd`` as its one command, in one step where the backend can; its files
    stay readable until ``close``."""
    if isinstance(sandbox, RunsOnce):
        return sandbox.run_once(cmd, timeout)
    sandbox.start()
    return sandbox.exec(cmd, timeout)


def config_kind(value: object) -> str:
    """The ``kind`` tag of a sandbox config given as a dict or a model; one without a ``kind`` is
    docker's (configs written before there was a choice)."""
    if isinstance(value, dict):
        return value.get("kind", "docker")
    return getattr(value, "kind", "docker")


def exec_result(cmd: str, data: object) -> ExecResult:
    """swerl's runner's answer (``swerl_exec.run``) checked against its schema: whatever a command
    prints, the host gets a result or a RunnerFailed, never an exception it does not expect."""
    if not isinstance(data, dict) or "error" in data:
        raise RunnerFailed(f"sandbox runner failed: {str(data.get('error') if isinstance(data, dict) else data)[:500]}")
    fields = {k: v for k, v in data.items() if k in ExecResult.model_fields and k != "command"}
    try:
        return ExecResult(command=cmd, **fields)
    except ValidationError as e:
        raise RunnerFailed(f"sandbox runner gave a malformed answer: {e.errors()[0]['msg']} "
                           f"({', '.join(str(x['loc'][0]) for x in e.errors()[:3])})") from None


def git_diff(sandbox: Sandbox, base: str, out: str) -> str:
    """Tracked and untracked changes of ``sandbox.workdir`` against ``base``, through a throw-away index
    (the repository's own index is left alone); written to ``out`` in the sandbox and read back, so no
    output limit cuts it."""
    git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
    script = (
        f"idx=$(mktemp) && cp .git/index $idx 2>/dev/null; "
        f"GIT_INDEX_FILE=$idx {git} add -A . >/dev/null 2>&1 && "
        f"GIT_INDEX_FILE=$idx {git} diff --cached --binary --no-ext-diff --no-textconv --no-color {shlex.quote(base)} "
        f"> {shlex.quote(out)}; rc=$?; rm -f $idx; exit $rc"
    )
    res = sandbox.exec(script, timeout=120, cwd=sandbox.workdir)
    if res.exit_code != 0:
        raise SandboxError(f"git diff against {base} failed: {res.output[-500:]}")
    return sandbox.read_file(out).decode("utf-8", "surrogateescape")
