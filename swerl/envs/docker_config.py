"""The Docker sandbox's settings, and what swerl knows about the images it runs (where python3 may
live, SWE-bench's conda environment)."""

from __future__ import annotations

import threading
from typing import Literal

from pydantic import BaseModel, Field

PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python3", "/opt/miniconda3/bin/python3",
                     "/opt/venv/bin/python3")
# SWE-bench and SWE-rebench images keep the task's Python in this conda environment; their eval
# scripts activate it, and so must every command the agent runs there
SWEBENCH_CONDA_ENV = "/opt/miniconda3/envs/testbed"
SWEBENCH_ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"


class ExecSettings(BaseModel):
    """How any sandbox bounds one command: the time limit when none is given, the output it keeps."""

    default_timeout_s: float = Field(180.0, gt=0, le=86400, description="Timeout of exec when none is given.")
    output_limit_bytes: int = Field(64_000, ge=1_000, le=64_000_000, description="Output kept per exec (head + tail).")


class RunIdSettings(BaseModel):
    """The label that ties a run's sandboxes to it."""

    run_id: str | None = Field(None, max_length=256, description="Labels this run's sandboxes (container labels, local "
                               "sandbox folder names `swerl-local-<run_id>-*`) for reaping, cancellation and leak checks "
                               "that count only its own; None: no run label (owner labels only).")


class ContainerSettings(ExecSettings, RunIdSettings):
    """What a container sandbox is given, whichever engine runs it (a Docker host, a Kubernetes pod)."""

    memory: str = Field("2g", pattern=r"^\d+[kmg]?$", description="Memory limit (swap disabled), docker syntax: 512m, 2g.")
    cpus: float = Field(1.0, gt=0, le=64, description="CPU quota in cores.")
    network: bool = Field(False, description="Give the container a network; off by default.")
    workdir: str = Field("/testbed", description="Repository location and default working directory.")
    lifetime_s: int = Field(7200, ge=60, le=7 * 86400, description="The container removes itself after this long, whatever happens.")
    sweep_after_exec: bool = Field(
        False, description="After each command, kill every process in the container but its own (a daemon that "
        "detached with setsid and a cleared environment included). On for grading; off for agent sandboxes, whose "
        "long-lived command runner must survive.",
    )
    activate: str | None = Field(
        "auto", description="Shell lines sourced once when the sandbox starts; every command inherits the "
        "environment they leave (PATH, CONDA_PREFIX, ...). 'auto': SWE-bench's conda environment "
        f"({SWEBENCH_CONDA_ENV}) when the image has one; None: the image's own environment.",
    )


class DockerSandboxConfig(ContainerSettings):
    """Resource limits and behaviour of one sandbox container."""

    kind: Literal["docker"] = Field("docker", description="Selects this backend in a sandbox config (the default when absent).")
    pids_limit: int = Field(512, ge=16, le=65536, description="Most processes alive at once (stops fork bombs).")
    exec_channel: bool = Field(
        False, description="Send commands to one long-lived runner, the container's own command, over its attached "
        "stdin and stdout (a few ms each, and no docker exec to open it) instead of a docker exec per command (~80 ms). "
        "A command that kills the runner ends the sandbox. For the agent's own sandbox: a command can forge the runner's answers "
        "to itself there, which gains it nothing; graders run their one command as the container's own (run_once).",
    )


_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def concurrency_slots(limit: int) -> threading.BoundedSemaphore:
    """One process-wide semaphore per limit, shared by every sandbox asking for it."""
    with _slots_lock:
        return _slots.setdefault(limit, threading.BoundedSemaphore(limit))


__all__ = ["ContainerSettings", "DockerSandboxConfig", "ExecSettings", "concurrency_slots"]
