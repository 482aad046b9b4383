"""Kubernetes implementation of the Sandbox: one pod per sandbox, commands through swerl's runner.

Designed on R2E-Gym's and DeepSWE's lessons for thousands of sandboxes on a cluster: one pod
per sandbox with requests and limits, ``activeDeadlineSeconds`` so a pod ends even when swerl
is killed, no service-account token in the pod, a deny-all NetworkPolicy for sandboxes
without network, no exec before the pod is Running, every API call retried on 429/5xx with
backoff, one API client per sandbox, and orphans reaped by label (``reap_pods``).

Commands run exactly as in the Docker sandbox: the runner (``resources/swerl_exec.py``) is
copied into the pod and each command is one exec of it, so timeouts that kill the whole
process tree, output limits and the sweep behave the same. Files move as tar archives through
an exec (as ``kubectl cp`` does).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import socket
import threading
import uuid
from typing import Any

from swerl.envs import labels
from swerl.envs.configs_in import configs_in
from swerl.envs.docker_reaper import pid_alive
from swerl.envs.container_files import (PYTHON_PROBE, ContainerSandboxPaths, activation_spec, found_python,
                                       probed_activation, runner_source, tar_of)
from swerl.envs.docker_sandbox import HOST_GRACE_S, RUNNER
from swerl.envs.k8s_api import (PodExec, call, create_pod, delete_pod, ensure_deny_all, label_value, pod_manifest,
                                status_of, wait_running)
from swerl.envs.k8s_config import KubernetesSandboxConfig, api_client, close_client, session
from swerl.envs.sandbox import ExecResult, RunnerFailed, SandboxError, exec_result, git_diff

_DENY_ALL_ENSURED: set = set()  # (API server, namespace) whose NetworkPolicy this process made or found
# where python3 lives and what an activation sets are properties of an image (tagged by content): probed once
_PYTHON_BY_IMAGE: dict[str, str] = {}
_ACTIVATED_ENV: dict[tuple[str, str], dict[str, str]] = {}


class KubernetesSandbox(ContainerSandboxPaths):
    """One pod from an image; use as a context manager. See the module docstring."""

    def __init__(self, image: str, config: KubernetesSandboxConfig | None = None, *,
                 slots: threading.BoundedSemaphore | None = None, base_commit: str | None = None,
                 preload: dict[str, tuple[bytes | str, int]] | None = None):
        """``preload``: ``{path: (data, mode)}`` written with swerl's runner as the pod starts (one exec)."""
        self.image = image
        self.config = config or KubernetesSandboxConfig()
        self.base_commit = base_commit
        self._preload = dict(preload or {})
        self._slots = slots
        self._holds_slot = False
        self._api = self._core = None
        self.pod_name: str | None = None
        self._running = False
        self._closed = False
        self._python: str | None = None
        self._env: dict[str, str] = {}
        self._connect_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> KubernetesSandbox:
        if self._slots is not None:
            self._slots.acquire()
            self._holds_slot = True
        try:
            self._start()
        except BaseException as e:
            self.close()
            if status_of(e) is not None:  # an API error after its retries: callers catch one error for "no sandbox"
                raise SandboxError(f"cannot start a sandbox from {self.image}: {e}") from e
            raise
        return self

    def _start(self) -> None:
        from kubernetes import client

        cfg = self.config
        self._api = api_client(cfg)  # one per sandbox: its connection pool is never shared across threads
        self._core = client.CoreV1Api(self._api)
        if not cfg.network:
            ensure_deny_all(cfg, self._core, client.NetworkingV1Api(self._api), _DENY_ALL_ENSURED)
        self.pod_name = f"swerl-{uuid.uuid4().hex[:12]}"
        create_pod(cfg, self._core, pod_manifest(cfg, self.pod_name, self.image))
        wait_running(cfg, self._core, self.pod_name)
        self._running = True
        self._python = _PYTHON_BY_IMAGE.get(self.image) or _PYTHON_BY_IMAGE.setdefault(self.image, self._find_python())
        self.write_files({RUNNER: (runner_source(), 0o755), **self._preload})
        key = (self.image, cfg.activate or "")
        if key not in _ACTIVATED_ENV:
            _ACTIVATED_ENV[key] = self._probe_activation()
        self._env = dict(_ACTIVATED_ENV[key])
        if self.base_commit is None:
            code, head = self._raw(["git", "-C", cfg.workdir, "rev-parse", "HEAD"])
            self.base_commit = head.strip() if code == 0 and len(head.strip()) == 40 else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._running = False
        try:
            if self.pod_name is not None and self._core is not None:
                delete_pod(self.config, self._core, self.pod_name)
        finally:
            if self._api is not None:
                close_client(self._api)
            if self._holds_slot:
                self._holds_slot = False
                self._slots.release()

    def __enter__(self) -> KubernetesSandbox:
        return self if self._running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- exec ------------------------------------------------------------------------
    def _open(self, argv: list[str], stdin: bytes | None = None) -> PodExec:
        try:
            return PodExec(self.config, self._core, self.pod_name, argv, stdin, self._connect_lock)
        except Exception as e:
            if status_of(e) is None:
                raise
            raise SandboxError(f"exec in pod {self.pod_name} failed: {e}") from e

    def _exec(self, argv: list[str], deadline_s: float, stdin: bytes | None = None) -> PodExec | None:
        """Run ``argv`` in the pod; the finished exec, or None when it did not end within ``deadline_s``."""
        ran = self._open(argv, stdin)
        try:
            return ran if ran.wait(deadline_s) else None
        finally:
            ran.close()

    def _raw(self, argv: list[str], stdin: bytes | None = None, deadline_s: float = 120.0) -> tuple[int, str]:
        """A helper command's (exit code, stdout and stderr); SandboxError when it does not end in time."""
        ran = self._exec(argv, deadline_s, stdin)
        if ran is None:
            raise SandboxError(f"{argv[0]} did not end within {deadline_s:.0f}s in pod {self.pod_name}")
        return ran.exit_code(), (ran.stdout + ran.stderr).decode("utf-8", "replace")

    def _find_python(self) -> str:
        return found_python(self.image, *self._raw(["sh", "-c", PYTHON_PROBE]))

    def _probe_activation(self) -> dict[str, str]:
        """The variables the configured activation sets or changes, passed to every command."""
        spec = activation_spec(self.config.activate)
        if spec is None:
            return {}
        return probed_activation(self.image, *self._raw([self._python, "-I", "-S", RUNNER, "--activate", json.dumps(spec)]))

    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None,
             env: dict[str, str] | None = None) -> ExecResult:
        if not self._running or self._closed:
            raise SandboxError("exec on a sandbox that is not running; use it inside `with`")
        timeout = self.config.default_timeout_s if timeout is None else timeout
        tag = uuid.uuid4().hex
        request = {"cmd": cmd, "timeout": timeout, "limit": self.config.output_limit_bytes, "tag": tag,
                   "cwd": cwd or self.config.workdir, "env": {**self._env, **(env or {})},
                   "sweep": self.config.sweep_after_exec}
        ran = self._open([self._python, "-I", "-S", RUNNER, json.dumps(request)])
        try:
            if not ran.wait(timeout + HOST_GRACE_S):  # the runner itself is stuck: kill from outside, then give up
                self._exec([self._python, "-I", "-S", RUNNER, json.dumps({"kill_tag": tag})], HOST_GRACE_S)
                if not ran.wait(HOST_GRACE_S):
                    self.close()
                    raise RunnerFailed(f"command did not stop {timeout + 2 * HOST_GRACE_S:.0f}s after its timeout; "
                                       "sandbox removed")
        finally:
            ran.close()
        text = ran.stdout.decode("utf-8", "replace").strip().splitlines()
        try:
            data = json.loads(text[-1])
        except (IndexError, ValueError) as e:
            said = (ran.stdout + ran.stderr).decode("utf-8", "replace")
            raise RunnerFailed(f"sandbox runner failed (exit {ran.exit_code()}): {said[-500:]}") from e
        return exec_result(cmd, data)

    # -- files -------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(self.config.workdir, path))

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.write_files({path: (data, mode)})

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write several files (missing parent folders are created) with one exec: a tar archive on stdin,
        read to its known length (so it works without v5's stdin close, as ``kubectl cp`` does)."""
        if not self._running or self._closed:
            raise SandboxError("file access on a sandbox that is not running; use it inside `with`")
        entries = {self._abs(p).lstrip("/"): (d.encode() if isinstance(d, str) else d, m) for p, (d, m) in files.items()}
        archive = tar_of(entries)
        code, out = self._raw(["sh", "-c", f"head -c {len(archive)} | tar -x -f - -C / --no-same-owner"], archive)
        if code != 0:
            raise SandboxError(f"cannot write {sorted('/' + p for p in entries)[:5]} in the sandbox: {out[-300:]}")

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes:
        if not self._running or self._closed:
            raise SandboxError("file access on a sandbox that is not running; use it inside `with`")
        path = self._abs(path)
        q = shlex.quote(path)
        script = (f"[ -e {q} ] || exit 3; [ -f {q} ] || exit 4; size=$(wc -c < {q}); "
                  f"[ \"$size\" -le {max_bytes} ] || {{ echo \"$size\" >&2; exit 5; }}; exec cat {q}")
        ran = self._exec(["sh", "-c", script], 300.0)
        if ran is None:
            raise SandboxError(f"reading {path} did not end within 300s in pod {self.pod_name}")
        code = ran.exit_code()
        if code == 3:
            raise FileNotFoundError(f"{path} does not exist in the sandbox")
        if code == 4:
            raise IsADirectoryError(f"{path} is not a regular file")
        if code == 5:
            raise SandboxError(f"{path} is {ran.stderr.decode().strip()} bytes, over the {max_bytes}-byte read limit")
        if code != 0:
            raise SandboxError(f"cannot read {path} in the sandbox (exit {code}): {ran.stderr.decode('utf-8', 'replace')[-300:]}")
        return bytes(ran.stdout)

    def diff(self) -> str:
        """Tracked and untracked changes against base_commit, through a throw-away index."""
        return git_diff(self, self.base_commit or "HEAD", "/tmp/.swerl-diff.patch")


def _selector(**match: str) -> str:
    return ",".join(f"{k}={label_value(v)}" for k, v in match.items())


def running_pods(config: KubernetesSandboxConfig, run_id: str) -> list[str]:
    """Names of pods still there (not being deleted) for ``run_id`` (leak checks)."""
    from kubernetes import client

    with session(config) as api:
        pods = call(config, client.CoreV1Api(api).list_namespaced_pod, config.namespace,
                    label_selector=_selector(**{labels.RUN_ID: run_id}))
    return sorted(p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None)


def reap_pods(config: KubernetesSandboxConfig, *, run_id: str | None = None, everything: bool = False) -> list[str]:
    """Delete swerl's sandbox pods in ``config.namespace`` whose owner died (on this host), whose lifetime
    passed, or (with ``run_id``) of one run; found by label, so nothing else in the namespace is touched."""
    import time

    from kubernetes import client

    host, now, removed = label_value(socket.gethostname()), time.time(), []
    with session(config) as api:
        core = client.CoreV1Api(api)
        pods = call(config, core.list_namespaced_pod, config.namespace,
                    label_selector=_selector(**{labels.MANAGED: "1", labels.KIND: "sandbox"}))
        for pod in pods.items:
            lbl = pod.metadata.labels or {}
            owner = lbl.get(labels.OWNER_PID, "0")
            dead_owner = lbl.get(labels.OWNER_HOST) == host and owner.isdigit() and not pid_alive(int(owner))
            expired = float(lbl.get(labels.EXPIRES_AT, "inf")) < now
            ours = run_id is not None and lbl.get(labels.RUN_ID) == label_value(run_id)
            if (everything or dead_owner or expired or ours) and delete_pod(config, core, pod.metadata.name):
                removed.append(pod.metadata.name)
    return removed


def kube_configs_in(value: Any) -> list[KubernetesSandboxConfig]:
    """Every distinct ``kubernetes`` sandbox config anywhere in ``value`` (a config model, or flow parameters as
    models, dicts and lists): the clusters and namespaces a reap of that run must cover."""
    return configs_in(value, KubernetesSandboxConfig)


__all__ = ["KubernetesSandbox", "KubernetesSandboxConfig", "kube_configs_in", "reap_pods", "running_pods"]
