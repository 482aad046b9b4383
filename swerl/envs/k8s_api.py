"""The few Kubernetes API calls a sandbox makes, each retried on 429 and 5xx with backoff.

Pods, the namespace's deny-all NetworkPolicy, and exec: a WebSocket on
``/api/v1/namespaces/{ns}/pods/{name}/exec`` speaking the channel protocol (v5.channel.k8s.io,
or v4 on older clusters): each binary message starts with its channel, 0 stdin, 1 stdout,
2 stderr, 3 the exit status (a ``Status`` object), 255 (v5) "close this channel".
Everything goes through the official ``kubernetes`` client, as it would on a real cluster.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from swerl.envs import labels
from swerl.envs.k8s_config import KubernetesSandboxConfig, cpu_quantity, memory_quantity
from swerl.envs.sandbox import SandboxError

CONTAINER = "sandbox"
NETWORK = "swerl.network"  # "none" puts a pod under the deny-all NetworkPolicy
DENY_ALL_POLICY = "swerl-sandbox-deny-all"
# waiting reasons that mean the pod will not start by waiting longer
FATAL_WAITING = frozenset({"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError",
                           "CreateContainerError", "RunContainerError"})
BACKOFF_CAP_S = 30.0
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
T = TypeVar("T")


def label_value(text: str) -> str:
    """``text`` as a valid label value (63 characters of [-_.A-Za-z0-9]): as is when it already is one, else
    cleaned and suffixed with a hash of the original, so two run ids never share a value."""
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:54].strip("-_.")
    return (clean + "-" if clean else "") + hashlib.sha256(text.encode()).hexdigest()[:8]


def pod_labels(config: KubernetesSandboxConfig) -> dict[str, str]:
    """swerl's label scheme (``swerl.envs.labels``), as valid label values."""
    lbl = labels.owner_labels(config.run_id)
    lbl[labels.EXPIRES_AT] = str(int(time.time()) + config.lifetime_s)
    lbl[labels.KIND] = "sandbox"
    lbl[NETWORK] = "allowed" if config.network else "none"
    return {k: label_value(v) for k, v in lbl.items()}


def pod_manifest(config: KubernetesSandboxConfig, name: str, image: str) -> dict:
    """The pod of one sandbox: one container asleep for its lifetime, which the API server also ends
    (activeDeadlineSeconds); no service-account token; requests and limits.

    PID 1 is a shell whose first child is the sleep, as docker's init is in a Docker sandbox: the runner's
    sweep spares PID 1 and its oldest child, and the shell reaps what a command leaves to it."""
    limits = {"cpu": cpu_quantity(config.cpus), "memory": memory_quantity(config.memory)}
    requests = {"cpu": cpu_quantity(config.cpu_request or config.cpus),
                "memory": memory_quantity(config.memory_request or config.memory)}
    spec = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": config.lifetime_s,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [{
            "name": CONTAINER, "image": image, "imagePullPolicy": config.image_pull_policy,
            "command": ["sh", "-c", f"sleep {config.lifetime_s} & wait"], "workingDir": config.workdir,
            "resources": {"requests": requests, "limits": limits},
            "securityContext": {"allowPrivilegeEscalation": False},
        }],
    }
    if config.node_selector:
        spec["nodeSelector"] = dict(config.node_selector)
    if config.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": pod_labels(config)}, "spec": spec}


def deny_all_policy() -> dict:
    """A NetworkPolicy that selects the pods labelled ``swerl.network=none`` and allows them no traffic either way
    (enforced where the cluster's network plugin enforces NetworkPolicies: Calico, Cilium, ...)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": DENY_ALL_POLICY, "labels": {labels.MANAGED: "1", labels.KIND: "network-policy"}},
            "spec": {"podSelector": {"matchLabels": {NETWORK: "none"}}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [], "egress": []}}


def status_of(error: Exception) -> int | None:
    """The HTTP status of a failed API call: an ApiException's, or the one in a refused exec handshake's message
    (the client reports those as status 0); 0 for a connection that failed or was cut; None: not an API error."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(error, ApiException):
        found = re.search(r"Handshake status (\d{3})", str(error.reason or ""))
        return int(found.group(1)) if found else error.status or 0
    return 0 if isinstance(error, (HTTPError, ConnectionError)) else None


def retriable(error: Exception) -> bool:
    """429, 5xx, or no answer at all (a refused or cut connection); not a 4xx, nor an answer the client could
    not read (also reported as status 0, by its message)."""
    status = status_of(error)
    if status == 0:
        return not re.search(r"Failed to parse|Invalid value", str(getattr(error, "reason", "")))
    return status is not None and (status == 429 or status >= 500)


def _retry_after(error: Exception) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = next((v for k, v in dict(headers).items() if k.lower() == "retry-after"), None)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def call(config: KubernetesSandboxConfig, fn: Callable[..., T], *args, **kw) -> T:
    """``fn(*args, **kw)``, retried ``config.api_retries`` times on 429, 5xx or a cut connection, waiting
    ``api_backoff_s`` doubled each time (jittered, capped), or the server's Retry-After."""
    delay = config.api_backoff_s
    for attempt in range(config.api_retries + 1):
        try:
            return fn(*args, **kw)
        except Exception as e:
            if not retriable(e) or attempt == config.api_retries:
                raise
            wait = _retry_after(e)
            time.sleep(min(BACKOFF_CAP_S, wait if wait is not None else delay * random.uniform(0.5, 1.0)))
            delay = min(BACKOFF_CAP_S, delay * 2)
    raise AssertionError("unreachable")


def ensure_deny_all(config: KubernetesSandboxConfig, core, net, ensured: set) -> None:
    """Create the namespace's deny-all NetworkPolicy unless this process already did (409: it is there)."""
    from kubernetes.client.exceptions import ApiException

    key = (core.api_client.configuration.host, config.namespace)
    if key in ensured:
        return
    try:
        call(config, net.create_namespaced_network_policy, config.namespace, deny_all_policy())
    except ApiException as e:
        if e.status != 409:
            raise
    ensured.add(key)


def create_pod(config: KubernetesSandboxConfig, core, manifest: dict) -> None:
    """Create the pod; a 409 after a retried create means the first attempt got through."""
    from kubernetes.client.exceptions import ApiException

    try:
        call(config, core.create_namespaced_pod, config.namespace, manifest)
    except ApiException as e:
        if e.status != 409:
            raise


def delete_pod(config: KubernetesSandboxConfig, core, name: str) -> bool:
    """Delete ``name`` at once (no grace period); False when it was already gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        call(config, core.delete_namespaced_pod, name, config.namespace, grace_period_seconds=0,
             propagation_policy="Background")
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def wait_running(config: KubernetesSandboxConfig, core, name: str) -> None:
    """Poll the pod until its container runs; SandboxError when it cannot start or takes over ``start_timeout_s``."""
    end, pause = time.monotonic() + config.start_timeout_s, 0.05
    while True:
        pod = call(config, core.read_namespaced_pod, name, config.namespace)
        status = pod.status
        phase = status.phase if status else None
        states = [cs.state for cs in (status.container_statuses or [])] if status else []
        if phase == "Running" and states and all(s.running for s in states):
            return
        if phase in ("Failed", "Succeeded"):
            raise SandboxError(f"pod {name} ended before its first command (phase {phase}: "
                               f"{status.reason or ''} {status.message or ''}".rstrip() + ")")
        waiting = [s.waiting for s in states if s.waiting and s.waiting.reason]
        unmet = [f"{c.reason}: {c.message}" for c in (status.conditions or []) if c.status != "True" and c.reason] if status else []
        why = "; ".join([f"{w.reason}: {w.message or ''}" for w in waiting] or unmet)
        fatal = [w for w in waiting if w.reason in FATAL_WAITING]
        if fatal:
            raise SandboxError(f"pod {name} cannot start: {fatal[0].reason}: {fatal[0].message or ''}")
        left = end - time.monotonic()
        if left <= 0:
            raise SandboxError(f"pod {name} was not Running within {config.start_timeout_s:.0f}s (phase {phase}"
                               f"{': ' + why if why else ''}); it is deleted. Check the cluster's capacity and the "
                               "image's registry, or raise start_timeout_s")
        time.sleep(min(pause, left))
        pause = min(pause * 2, 1.0)


class PodExec:
    """One command in a pod over the exec WebSocket: stdin sent at once, stdout/stderr collected, exit status read."""

    def __init__(self, config: KubernetesSandboxConfig, core, name: str, argv: list[str], stdin: bytes | None = None,
                 lock: threading.Lock | None = None):
        """``lock``: held while connecting, by every user of ``core``'s ApiClient (kubernetes.stream swaps the
        client's request method for the handshake)."""
        lock = lock or threading.Lock()
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        def connect():
            try:
                with lock:
                    return stream(core.connect_get_namespaced_pod_exec, name, config.namespace, command=argv,
                                  container=CONTAINER, stdin=stdin is not None, stdout=True, stderr=True, tty=False,
                                  _preload_content=False, binary=True)
            except AttributeError as e:
                # the client's own bug: a refused handshake's ApiException has no body, and the ApiClient fails
                # decoding it; the ApiException (with the handshake's status) is what happened
                if isinstance(e.__context__, ApiException):
                    raise e.__context__ from None
                raise

        self._ws = call(config, connect)
        self.stdout, self.stderr, self._status = bytearray(), bytearray(), b""
        self.cut: str | None = None
        if stdin is not None:
            for at in range(0, len(stdin), 1 << 20):
                self._ws.write_stdin(stdin[at:at + (1 << 20)])
            self._ws.close_channel(0)  # v5 closes stdin; on v4 the command reads a known number of bytes

    def wait(self, seconds: float) -> bool:
        """Collect output for up to ``seconds``; True once the command has ended and its status arrived."""
        from websocket import WebSocketException

        end = time.monotonic() + seconds
        while self._ws.is_open() and not self.cut:
            left = end - time.monotonic()
            if left <= 0:
                return False
            try:
                self._ws.update(timeout=min(left, 1.0))
            except (WebSocketException, OSError) as e:  # the connection dropped without a close: no status comes
                self.cut = f"the exec stream was cut: {e}"
            self._drain()
        self._drain()
        return True

    def _drain(self) -> None:
        for channel, buf in ((1, self.stdout), (2, self.stderr)):
            buf += self._ws.read_channel(channel) or b""
        self._status += self._ws.read_channel(3) or b""

    def exit_code(self) -> int:
        """The command's exit status from the status channel; SandboxError when the exec itself failed."""
        try:
            status = json.loads(self._status or b"{}")
        except ValueError:
            raise SandboxError(f"the exec's status is not a Status object: {self._status[:300]!r}") from None
        if status.get("status") == "Success":
            return 0
        causes = (status.get("details") or {}).get("causes") or []
        code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), None)
        if code is None:
            raise SandboxError(f"exec in the pod failed: {status.get('message') or status or self.cut or 'the stream closed without a status'}")
        return int(code)

    def close(self) -> None:
        try:
            self._ws.close()
        except Exception:  # a socket already gone
            pass


__all__ = ["PodExec", "call", "create_pod", "delete_pod", "deny_all_policy", "ensure_deny_all", "label_value",
           "pod_labels", "pod_manifest", "retriable", "status_of", "wait_running"]
