"""Docker implementation of the Sandbox: limits, no network, real timeouts, guaranteed cleanup.

Cleanup has three layers: the context manager removes the container; the container's
command (``sleep <lifetime>``, or the agent sandbox's serving runner, which also ends when
the host's stream closes) ends after ``lifetime_s`` with auto-remove, so it dies on its own
even when the Python process is SIGKILLed; and ``reap_containers`` removes what a crashed
run left.

An agent's sandbox (``exec_channel``) makes swerl's runner the container's command, spoken to
over the container's attached stdin and stdout (see ``serve_script``): no docker exec at all.

A sandbox that runs one command (a grading) makes it the container's own command instead
(``run_once``): swerl's runner is started with its source on the command line and reads the
files and the request from stdin, and its answer is the container's last line of output, so
neither a docker exec nor a docker cp (~45 ms each) is paid; the container ends with its command.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Callable

import docker
from docker.errors import APIError, DockerException, NotFound
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import ReadTimeout

from swerl.envs import labels
from swerl.envs.docker_client import DockerUnavailableError, docker_client
from swerl.envs.docker_config import DockerSandboxConfig, concurrency_slots
from swerl.envs.container_files import (PYTHON_PROBE, SERVE_ENV, ContainerSandboxPaths, activated_env, activation_spec,
                                       exec_any_python, found_python, probed_activation, runner_source, serve_script,
                                       tar_of)
from swerl.envs.docker_reaper import reap_containers, running_containers  # noqa: F401 (re-exported)
from swerl.envs.exec_channel import ChannelBroken, ChannelTimeout, ExecChannel, RunnerRestarted
from swerl.envs.sandbox import ExecResult, RunnerFailed, SandboxError, exec_result, git_diff

RUNNER_DIR = "/opt/swerl"
RUNNER = f"{RUNNER_DIR}/swerl_exec.py"
HOST_GRACE_S = 15.0

# Where python3 lives, and what an activation leaves in the environment, are properties of the image:
# probing once per image saves docker execs on every later sandbox.
_PYTHON_BY_IMAGE: dict[str, str] = {}
_ACTIVATED_ENV: dict[tuple[str, str], dict[str, str]] = {}


class DockerSandbox(ContainerSandboxPaths):
    """One container from an image; use as a context manager."""

    def __init__(self, image: str, config: DockerSandboxConfig | None = None, *,
                 slots: threading.BoundedSemaphore | None = None, base_commit: str | None = None,
                 preload: dict[str, tuple[bytes | str, int]] | None = None, client: docker.DockerClient | None = None):
        """``preload``: ``{path: (data, mode)}`` written with swerl's runner as the container starts (one round trip);
        ``client``: the Docker daemon to run on (default: this thread's client of the local one, ``docker_client()``)."""
        self.image = image
        self._client = client
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
        self._holds_slot = False
        self._ran_once = False
        self._ended: str | None = None  # why the container ended under us (its runner, the container's command, died)

    # -- lifecycle ---------------------------------------------------------------
    def _docker(self) -> docker.DockerClient:
        return self._client or docker_client()

    def start(self) -> DockerSandbox:
        self._starting(self._start)
        return self

    def _starting(self, start: Callable[[], object]) -> object:
        """``start()`` holding a concurrency slot; on failure everything is removed and the slot given back."""
        if self._slots is not None:
            self._slots.acquire()
            self._holds_slot = True
        try:
            return start()
        except BaseException as e:
            self.close()
            if isinstance(e, (DockerException, DockerUnavailableError)):  # callers catch one error for "no sandbox"
                raise SandboxError(f"cannot start a sandbox from {self.image}: {e}") from e
            raise

    def _labels(self) -> dict[str, str]:
        lbl = labels.owner_labels(self.config.run_id)
        lbl[labels.EXPIRES_AT] = str(int(time.time()) + self.config.lifetime_s)
        lbl[labels.KIND] = "sandbox"
        return lbl

    def _limits(self) -> dict:
        """The container's isolation and limits (docker's host config)."""
        cfg = self.config
        return dict(init=True, network_mode="bridge" if cfg.network else "none", mem_limit=cfg.memory,
                    memswap_limit=cfg.memory, nano_cpus=int(cfg.cpus * 1e9), pids_limit=cfg.pids_limit,
                    security_opt=["no-new-privileges"])

    def _start(self) -> None:
        cfg, api = self.config, self._docker().api
        if cfg.exec_channel:  # the runner starts with the container, reading its stdin: no docker exec to open it
            command = ["sh", "-c", 'eval "$SANDBOX_INIT"']
            environment = dict(zip(SERVE_ENV, (serve_script(cfg.lifetime_s), runner_source().decode())))
        else:
            command, environment = ["sleep", str(cfg.lifetime_s)], None
        try:
            cid = api.create_container(self.image, command=command, labels=self._labels(), stdin_open=cfg.exec_channel,
                                       environment=environment,
                                       working_dir=cfg.workdir, name=f"swerl-{uuid.uuid4().hex[:12]}",
                                       host_config=api.create_host_config(auto_remove=True, **self._limits()))["Id"]
            self._container = self._docker().containers.prepare_model({"Id": cid})
            if cfg.exec_channel:
                self._channel = ExecChannel.over_attach(api, cid)
            api.start(cid)
        except DockerException as e:
            raise SandboxError(f"cannot start a container from {self.image}: {e}") from e
        self._python = _PYTHON_BY_IMAGE.get(self.image) or self._find_python()
        _PYTHON_BY_IMAGE[self.image] = self._python
        self._env = self._activated_env()
        if self._preload:  # with the runner as a file: grading helpers import it
            self.write_files({RUNNER: (runner_source(), 0o755), **self._preload})
        if self.base_commit is None:
            head = self.exec(f"git -C {cfg.workdir} rev-parse HEAD", timeout=60).output.strip()
            self.base_commit = head if len(head) == 40 else None

    def _runner_argv(self, *args: str) -> list[str]:
        """swerl's runner, its source on the command line: nothing needs copying in before a command."""
        return [self._python, "-I", "-S", "-c", runner_source().decode(), *args]

    def _activated_env(self) -> dict[str, str]:
        """The variables an activation sets or changes, to pass to every command (probed once per image)."""
        key = (self.image, self.config.activate or "")
        if key not in _ACTIVATED_ENV:
            _ACTIVATED_ENV[key] = self._probe_activation() if self._activation_spec() else {}
        return dict(_ACTIVATED_ENV[key])

    def _activation_spec(self) -> dict | None:
        return activation_spec(self.config.activate)

    def _probe_activation(self) -> dict[str, str]:
        code, out = self._container.exec_run(self._runner_argv("--activate", json.dumps(self._activation_spec())), demux=False)
        return probed_activation(self.image, code, (out or b"").decode("utf-8", "replace"))

    def _find_python(self) -> str:
        if self._channel is not None:  # the runner already runs the python PYTHON_PROBE would find
            try:
                said = self._channel.request({"cmd": 'printf "%s\\n" "$SWERL_PYTHON"', "timeout": 60, "limit": 4096,
                                              "tag": uuid.uuid4().hex, "cwd": "/", "env": {}}, 60 + HOST_GRACE_S)
                if said.get("exit_code") == 0 and str(said.get("output", "")).startswith("/"):
                    return said["output"].strip()
            except (ChannelBroken, ChannelTimeout) as e:
                raise SandboxError(f"the runner of a sandbox from {self.image} did not answer: {e}") from e
        code, out = self._container.exec_run(["sh", "-c", PYTHON_PROBE], demux=False)
        return found_python(self.image, code, (out or b"").decode("utf-8", "replace"))

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
                except NotFound:  # auto-removal won, but may still be listed for a moment
                    self._wait_removed()
                except APIError as e:
                    if "in progress" not in str(e):
                        raise
                    # Docker's auto-removal got there first (closing the channel ends the container's command):
                    # wait for it, so that nothing of this sandbox is left once close returns
                    self._wait_removed()
        finally:
            if self._holds_slot:
                self._holds_slot = False
                self._slots.release()

    def _wait_removed(self, timeout_s: float = 30.0) -> None:
        """Until the daemon no longer lists the container: leak checks and the reaper list, and a removal
        can answer 404 to inspection while the listing still shows it (a leak check once saw one just
        after close, when auto-removal won the race)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._docker().containers.list(all=True, sparse=True, filters={"id": self._container.id}):
                return
            time.sleep(0.05)

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
        if self._container is None or self._closed or self._ran_once:
            raise SandboxError("exec on a sandbox that is not running; use it inside `with`"
                               + (" (run_once ran its one command)" if self._ran_once else ""))
        if self._ended:
            raise SandboxError(f"the sandbox has ended: {self._ended}")
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
                result["raw"] = self._container.exec_run(self._runner_argv(json.dumps(request)), demux=False)
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

    def run_once(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Start the sandbox with ``cmd`` as its one command and wait for it to end: a container start and
        no docker exec (~0.1 s less than ``start`` then ``exec``), for a sandbox that runs one command, such as
        a grading. The stopped container stays until ``close``, so ``read_file`` still works; ``exec`` does not."""
        if self._container is not None or self._closed:
            raise SandboxError("run_once on a sandbox already started; it starts the sandbox itself")
        return self._starting(lambda: self._run_once(cmd, self.config.default_timeout_s if timeout is None else timeout))

    def _run_once(self, cmd: str, timeout: float) -> ExecResult:
        cfg, api = self.config, self._docker().api
        key = (self.image, cfg.activate or "")
        # the sweep still matters although the container ends with the runner: a root process that detached
        # (a published eval script's set-up runs as root) could otherwise print after the runner's answer
        request = {"cmd": cmd, "timeout": timeout, "limit": cfg.output_limit_bytes, "tag": uuid.uuid4().hex,
                   "cwd": cfg.workdir, "env": dict(_ACTIVATED_ENV.get(key, {})), "sweep": cfg.sweep_after_exec}
        if key not in _ACTIVATED_ENV:
            request["activate"] = self._activation_spec()
        runner = runner_source()
        files = {RUNNER: (runner, 0o755), **{"/" + p: e for p, e in self._archive_entries(self._preload).items()}}
        sent = json.dumps({"request": request, "files": {p: (base64.b64encode(d).decode(), m) for p, (d, m) in files.items()}})
        python = _PYTHON_BY_IMAGE.get(self.image)
        # the runner's source rides on its command line and the rest on stdin: a docker cp costs ~45 ms
        command = ([python, "-I", "-S", "-c", runner.decode(), "--once"] if python
                   else ["sh", "-c", exec_any_python('-c "$1" --once'), "sh", runner.decode()])
        try:
            cid = api.create_container(self.image, command=command, stdin_open=True, labels=self._labels(),
                                       working_dir=cfg.workdir, name=f"swerl-{uuid.uuid4().hex[:12]}",
                                       host_config=api.create_host_config(**self._limits()))["Id"]
        except DockerException as e:
            raise SandboxError(f"cannot start a container from {self.image}: {e}") from e
        self._container = self._docker().containers.prepare_model({"Id": cid})
        self._ran_once = True
        stdin = api.attach_socket(cid, params={"stdin": 1, "stream": 1})
        try:
            api.start(cid)
            raw = getattr(stdin, "_sock", stdin)
            raw.sendall(sent.encode())
            raw.shutdown(socket.SHUT_WR)
            try:
                status = api.wait(cid, timeout=timeout + HOST_GRACE_S)
            except (ReadTimeout, RequestsConnectionError):  # the runner itself is stuck
                self.close()
                raise RunnerFailed(f"command did not stop {HOST_GRACE_S:.0f}s after its {timeout:.0f}s timeout; "
                                   "sandbox removed") from None
        finally:
            stdin.close()
        said = api.logs(cid, stdout=True, stderr=False).decode("utf-8", "replace").strip().splitlines()
        try:
            answer = json.loads(said[-1])
        except (IndexError, ValueError):
            code, errors = status.get("StatusCode"), api.logs(cid, stdout=False, stderr=True, tail=20)
            if code == 127 and not python:
                raise SandboxError(f"image {self.image} has no python3; the sandbox runner needs one") from None
            raise RunnerFailed(f"sandbox runner failed (exit {code}): {errors.decode('utf-8', 'replace')[-500:]}") from None
        if not isinstance(answer, dict):
            raise RunnerFailed(f"sandbox runner gave a malformed answer: {str(answer)[:200]}")
        self._python = _PYTHON_BY_IMAGE.setdefault(self.image, str(answer.pop("python", "")) or "python3")
        self._env = _ACTIVATED_ENV.setdefault(key, activated_env(self.image, answer))
        answer.pop("activated_env", None)
        return exec_result(cmd, answer)

    def _kill_tagged(self, tag: str) -> None:
        """Kill every process of the command carrying ``tag``, through a one-shot runner."""
        self._container.exec_run(self._runner_argv(json.dumps({"kill_tag": tag})))

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
        except RunnerRestarted as e:  # the command killed the runner; the next command has a new one
            raise RunnerFailed(f"sandbox runner failed: {e}") from e
        except ChannelBroken as e:  # the container's command, and so the container, has ended
            self._channel, self._ended = None, f"its runner ended during `{payload.get('cmd', '')[:80]}`: {e}"
            channel.close()
            raise RunnerFailed(f"sandbox runner failed: {e}") from e
        return data

    # -- files ---------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else posixpath.join(self.config.workdir, path)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.write_files({path: (data, mode)})

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write several files (missing parent folders are created): one line to the runner where there is a
        channel, else one docker call."""
        entries = self._archive_entries(files)
        with self._channel_lock:
            if self._channel is not None and self._channel.alive():
                sent = {"/" + p: (base64.b64encode(d).decode(), m) for p, (d, m) in entries.items()}
                answer = self._over_channel({"write": sent, "tag": uuid.uuid4().hex}, self.config.default_timeout_s)
                if isinstance(answer, dict) and answer.get("written") == len(sent):
                    return
                raise SandboxError(f"cannot write {sorted(sent)[:5]} in the sandbox: {str(answer)[:300]}")
        try:
            written = self._container.put_archive("/", tar_of(entries))
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


__all__ = ["DockerSandbox", "DockerSandboxConfig", "concurrency_slots", "reap_containers", "running_containers"]
