"""Docker implementation of the Sandbox: limits, no network, real timeouts, guaranteed cleanup.

Cleanup has three layers: the context manager removes the container; the container's
PID 1 is ``sleep <lifetime>`` with auto-remove, so it dies on its own even when the
Python process is SIGKILLed; and ``reap_containers`` removes what a crashed run left.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import threading
import time
import uuid
from importlib import resources
from typing import Literal

from docker.errors import APIError, DockerException, NotFound
from pydantic import BaseModel, Field

from swerl.envs import labels
from swerl.envs.docker_client import DockerUnavailableError, docker_client
from swerl.envs.exec_channel import ChannelBroken, ChannelTimeout, ExecChannel
from swerl.envs.sandbox import ExecResult, RunnerFailed, SandboxError, exec_result, git_diff

RUNNER_DIR = "/opt/swerl"
RUNNER = f"{RUNNER_DIR}/swerl_exec.py"
HOST_GRACE_S = 15.0
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python3", "/opt/miniconda3/bin/python3",
                     "/opt/venv/bin/python3")
# SWE-bench and SWE-rebench images keep the task's Python in this conda environment; their eval
# scripts activate it, and so must every command the agent runs there
SWEBENCH_CONDA_ENV = "/opt/miniconda3/envs/testbed"
SWEBENCH_ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"


class DockerSandboxConfig(BaseModel):
    """Resource limits and behaviour of one sandbox container."""

    kind: Literal["docker"] = Field("docker", description="Selects this backend in a sandbox config (the default when absent).")
    memory: str = Field("2g", pattern=r"^\d+[kmg]?$", description="Memory limit (swap disabled), docker syntax: 512m, 2g.")
    cpus: float = Field(1.0, gt=0, le=64, description="CPU quota in cores.")
    pids_limit: int = Field(512, ge=16, le=65536, description="Most processes alive at once (stops fork bombs).")
    network: bool = Field(False, description="Give the container a network; off by default.")
    workdir: str = Field("/testbed", description="Repository location and default working directory.")
    default_timeout_s: float = Field(180.0, gt=0, le=86400, description="Timeout of exec when none is given.")
    output_limit_bytes: int = Field(64_000, ge=1_000, le=64_000_000, description="Output kept per exec (head + tail).")
    lifetime_s: int = Field(7200, ge=60, le=7 * 86400, description="The container removes itself after this long, whatever happens.")
    run_id: str | None = Field(None, description="Label tying containers to one run, for reaping and leak checks.")
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
    exec_channel: bool = Field(
        False, description="Send commands to one long-lived runner over an attached exec (a few ms each) instead of "
        "a docker exec per command (~80 ms). For the agent's own sandbox: a command can forge the runner's answers "
        "to itself there, which gains it nothing; graders keep one exec per command.",
    )


_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def concurrency_slots(limit: int) -> threading.BoundedSemaphore:
    """One process-wide semaphore per limit, shared by every sandbox asking for it."""
    with _slots_lock:
        return _slots.setdefault(limit, threading.BoundedSemaphore(limit))


def _runner_source() -> bytes:
    return resources.files("swerl.envs").joinpath("resources/swerl_exec.py").read_bytes()


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar of ``{path relative to /: (data, mode)}``; unpacked at ``/`` it creates missing parents too."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, now
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# Where python3 lives, and what an activation leaves in the environment, are properties of the image:
# probing once per image saves docker execs on every later sandbox.
_PYTHON_BY_IMAGE: dict[str, str] = {}
_ACTIVATED_ENV: dict[tuple[str, str], dict[str, str]] = {}


class DockerSandbox:
    """One container from an image; use as a context manager."""

    def __init__(self, image: str, config: DockerSandboxConfig | None = None, *,
                 slots: threading.BoundedSemaphore | None = None, base_commit: str | None = None,
                 preload: dict[str, tuple[bytes | str, int]] | None = None):
        """``preload``: ``{path: (data, mode)}`` written with swerl's runner as the container starts (one round trip)."""
        self.image = image
        self._preload = dict(preload or {})
        self.config = config or DockerSandboxConfig()
        self.base_commit = base_commit
        self._slots = slots
        self._container = None
        self._python: str | None = None
        self._channel: ExecChannel | None = None
        self._channel_lock = threading.Lock()  # one request in flight: answers are matched by tag, not multiplexed
        self._env: dict[str, str] = {}
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> DockerSandbox:
        if self._slots is not None:
            self._slots.acquire()
        try:
            self._start()
        except BaseException as e:
            self.close()
            if isinstance(e, (DockerException, DockerUnavailableError)):  # callers catch one error for "no sandbox"
                raise SandboxError(f"cannot start a sandbox from {self.image}: {e}") from e
            raise
        return self

    def _start(self) -> None:
        cfg = self.config
        lbl = labels.owner_labels(cfg.run_id)
        lbl[labels.EXPIRES_AT] = str(int(time.time()) + cfg.lifetime_s)
        lbl[labels.KIND] = "sandbox"
        try:
            self._container = docker_client().containers.run(
                self.image, command=["sleep", str(cfg.lifetime_s)], detach=True, init=True, auto_remove=True,
                network_mode="bridge" if cfg.network else "none", mem_limit=cfg.memory, memswap_limit=cfg.memory,
                nano_cpus=int(cfg.cpus * 1e9), pids_limit=cfg.pids_limit, labels=lbl, working_dir=cfg.workdir,
                security_opt=["no-new-privileges"], name=f"swerl-{uuid.uuid4().hex[:12]}",
            )
        except DockerException as e:
            raise SandboxError(f"cannot start a container from {self.image}: {e}") from e
        files = {RUNNER.lstrip("/"): (_runner_source(), 0o755), **self._archive_entries(self._preload)}
        if not self._container.put_archive("/", _tar(files)):
            raise SandboxError(f"cannot install the command runner in a container of {self.image}")
        self._python = _PYTHON_BY_IMAGE.get(self.image) or self._find_python()
        _PYTHON_BY_IMAGE[self.image] = self._python
        self._env = self._activated_env()
        if cfg.exec_channel:
            try:
                self._channel = ExecChannel(docker_client().api, self._container.id, [self._python, "-I", "-S", "-u", RUNNER, "--serve"])
            except DockerException:
                self._channel = None  # one exec per command still works
        if self.base_commit is None:
            head = self._raw(["git", "-C", cfg.workdir, "rev-parse", "HEAD"])
            self.base_commit = head.strip() if len(head.strip()) == 40 else None

    def _activated_env(self) -> dict[str, str]:
        """The variables an activation sets or changes, to pass to every command (probed once per image)."""
        key = (self.image, self.config.activate or "")
        if key not in _ACTIVATED_ENV:
            _ACTIVATED_ENV[key] = self._probe_activation(self.config.activate)
        return dict(_ACTIVATED_ENV[key])

    def _probe_activation(self, activate: str | None) -> dict[str, str]:
        if activate == "auto":
            code, _ = self._container.exec_run(["test", "-x", f"{SWEBENCH_CONDA_ENV}/bin/python"])
            activate = SWEBENCH_ACTIVATE if code == 0 else None
        if not activate:
            return {}
        script = f"env -0 > /tmp/.swerl-env-before && {{ {activate} ; }} >/dev/null 2>&1 && env -0"
        code, out = self._container.exec_run(["bash", "-c", script], demux=False)
        if code != 0:
            raise SandboxError(f"activating the environment of {self.image} failed (exit {code}): {activate!r}; "
                               "fix the image or set the sandbox's `activate` (None: the image's own environment)")
        before = _env_of(self._raw(["cat", "/tmp/.swerl-env-before"]))
        after = _env_of((out or b"").decode("utf-8", "replace"))
        return {k: v for k, v in after.items() if k not in _SHELL_OWN_VARS and before.get(k) != v}

    @property
    def workdir(self) -> str:
        return self.config.workdir

    @property
    def root(self) -> str:
        return "/"  # the container's file system is its own

    @property
    def python(self) -> str:
        """The image's system python3, which runs swerl's own helpers (never the task's environment)."""
        return self._python or "python3"

    def _raw(self, argv: list[str]) -> str:
        code, out = self._container.exec_run(argv, demux=False)
        return (out or b"").decode("utf-8", "replace") if code == 0 else ""

    def _find_python(self) -> str:
        probe = " || ".join(f"test -x {p} && echo {p}" for p in PYTHON_CANDIDATES) + " || command -v python3"
        code, out = self._container.exec_run(["sh", "-c", probe], demux=False)
        found = (out or b"").decode("utf-8", "replace").strip().splitlines()
        if code == 0 and found and found[0].startswith("/"):
            return found[0]
        if code in (1, 127) and not found:
            raise SandboxError(f"image {self.image} has no python3; the sandbox runner needs one")
        # anything else is the probe failing (a container dying under load), not the image
        raise SandboxError(f"probing {self.image} for python3 failed (exit code {code}): {(out or b'')[-300:]!r}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            self._channel.close()
        try:
            if self._container is not None:
                try:
                    self._container.remove(force=True)
                except NotFound:
                    pass
                except APIError as e:
                    if "in progress" not in str(e):
                        raise
        finally:
            if self._slots is not None:
                self._slots.release()

    def __enter__(self) -> DockerSandbox:
        return self if self._container is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def container_id(self) -> str:
        return self._container.id if self._container is not None else ""

    # -- commands ------------------------------------------------------------------
    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None,
             env: dict[str, str] | None = None) -> ExecResult:
        if self._container is None or self._closed:
            raise SandboxError("exec on a sandbox that is not running; use it inside `with`")
        timeout = self.config.default_timeout_s if timeout is None else timeout
        tag = uuid.uuid4().hex
        request = {"cmd": cmd, "timeout": timeout, "limit": self.config.output_limit_bytes,
                   "tag": tag, "cwd": cwd or self.config.workdir, "env": {**self._env, **(env or {})},
                   "sweep": self.config.sweep_after_exec}
        with self._channel_lock:
            if self._channel is not None and self._channel.alive():
                return exec_result(cmd, self._over_channel(request, timeout))
        result: dict = {}

        def run() -> None:
            try:
                result["raw"] = self._container.exec_run([self._python, "-I", "-S", RUNNER, json.dumps(request)], demux=False)
            except Exception as e:  # surfaced below as an infrastructure error
                result["error"] = e

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(timeout + HOST_GRACE_S)
        if worker.is_alive():  # the runner itself is stuck: kill from outside, then give up on the container
            self._kill_tagged(tag)
            worker.join(HOST_GRACE_S)
            if worker.is_alive():
                self.close()
                raise RunnerFailed(f"command did not stop {timeout + 2 * HOST_GRACE_S:.0f}s after its timeout; sandbox removed")
        if "error" in result:
            raise SandboxError(f"docker exec failed: {result['error']}") from result["error"]
        code, out = result["raw"]
        text = (out or b"").decode("utf-8", "replace").strip().splitlines()
        try:
            data = json.loads(text[-1])
        except (IndexError, json.JSONDecodeError) as e:
            raise RunnerFailed(f"sandbox runner failed (exit {code}): {' '.join(text)[-500:]}") from e
        return exec_result(cmd, data)

    def _kill_tagged(self, tag: str) -> None:
        """Kill every process of the command carrying ``tag``, through a one-shot runner."""
        self._container.exec_run([self._python, "-I", "-S", RUNNER, json.dumps({"kill_tag": tag})])

    def _over_channel(self, payload: dict, timeout: float) -> object:
        channel = self._channel
        try:
            try:
                data = channel.request(payload, timeout + HOST_GRACE_S)
            except ChannelTimeout:  # the runner is stuck: kill from outside, as for one exec
                self._kill_tagged(payload["tag"])
                try:
                    data = channel.wait(payload["tag"], HOST_GRACE_S)
                except ChannelTimeout:
                    self.close()
                    raise SandboxError(f"command did not stop {timeout + 2 * HOST_GRACE_S:.0f}s after its timeout; sandbox removed") from None
        except ChannelBroken as e:
            # the command itself may have killed the runner; later commands get one exec each
            self._channel = None
            channel.close()
            raise RunnerFailed(f"sandbox runner failed: {e}") from e
        return data

    # -- files ---------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else posixpath.join(self.config.workdir, path)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.write_files({path: (data, mode)})

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write several files (missing parent folders are created) in one docker call."""
        entries = self._archive_entries(files)
        try:
            written = self._container.put_archive("/", _tar(entries))
        except DockerException as e:
            raise SandboxError(f"cannot write {sorted('/' + p for p in entries)[:5]} in the sandbox: {e}") from e
        if not written:
            raise SandboxError(f"cannot write {sorted('/' + e for e in entries)} in the sandbox")

    def _archive_entries(self, files: dict[str, tuple[bytes | str, int]]) -> dict[str, tuple[bytes, int]]:
        return {posixpath.normpath(self._abs(p)).lstrip("/"): (d.encode() if isinstance(d, str) else d, m)
                for p, (d, m) in files.items()}

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes:
        path = self._abs(path)
        try:
            stream, stat = self._container.get_archive(path)
        except NotFound as e:
            raise FileNotFoundError(f"{path} does not exist in the sandbox") from e
        if stat.get("size", 0) > max_bytes:
            raise SandboxError(f"{path} is {stat['size']} bytes, over the {max_bytes}-byte read limit")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tf:
            member = tf.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(f"{path} is not a regular file")
            return tf.extractfile(member).read()

    def diff(self) -> str:
        """Tracked and untracked changes against base_commit, through a throw-away index."""
        return git_diff(self, self.base_commit or "HEAD", "/tmp/.swerl-diff.patch")


_SHELL_OWN_VARS = frozenset({"SHLVL", "_", "PWD", "OLDPWD"})


def _env_of(text: str) -> dict[str, str]:
    """``env -0`` output as a dict."""
    return dict(kv.split("=", 1) for kv in text.split("\0") if "=" in kv)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_containers(*, run_id: str | None = None, everything: bool = False) -> list[str]:
    """Remove swerl containers whose owner died, whose lifetime passed, or (with ``run_id``) of one run."""
    import socket

    host, now, removed = socket.gethostname(), time.time(), []
    for c in _listed(filters={"label": f"{labels.MANAGED}=1"}):
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


__all__ = ["DockerSandbox", "DockerSandboxConfig", "concurrency_slots", "reap_containers", "running_containers"]
