"""The Sandbox seam: where the agent acts and where predictions are graded."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field


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


class RunnerFailed(SandboxError):
    """The in-container runner died or answered garbage while a command ran. The command itself may
    have caused it (it can kill the runner or write to its stdout), so graders ask whether it recurs."""


class Sandbox(Protocol):
    """An isolated copy of a repository environment."""

    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None, env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` with bash; on timeout every process it started is killed."""
        ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write ``{path: (data, mode)}`` at once (one round trip where the sandbox allows)."""
        ...

    def diff(self) -> str:
        """The working tree (tracked and untracked files) against base_commit, as a git diff."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...
