"""An in-process fake of the Kubernetes API server, for the Kubernetes sandbox's tests (no cluster runs here).

It serves the few endpoints the sandbox uses, over real HTTP, to the official client unchanged:
pods (create, get, delete, list by label selector), NetworkPolicies (create, list), and pod
exec as the API server does it: a WebSocket upgrade speaking v5.channel.k8s.io (or v4), one
channel byte before each binary message, the exit status as a ``Status`` on channel 3. Each
pod is a real Docker container run from the pod's spec (its command, working dir, memory and
CPU limits; no network when a deny-all NetworkPolicy selects it); exec is ``docker exec`` in it.

Faults: ``inject`` answers matching requests with given statuses first (429 with Retry-After,
500, ...); ``hold_pending`` leaves new pods unschedulable. ``requests`` and ``created`` record
what the client sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import docker
from docker.errors import DockerException, ImageNotFound

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
FAKE_LABEL = "swerl.fake_kube"
_UNITS = {"": 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3}
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/exec)?$")
POLICIES = re.compile(r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def status_object(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def selects(selector: str, labels: dict[str, str]) -> bool:
    """An equality-based label selector (``a=b,c!=d,e``) against ``labels``."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeKubeAPI:
    """The fake server; a context manager (on exit every container it made is removed)."""

    def __init__(self, protocols: tuple[str, ...] = PROTOCOLS) -> None:
        """``protocols``: the exec subprotocols it speaks, best first (("v4.channel.k8s.io",): an older cluster's)."""
        self.protocols = protocols
        self.pods: dict[tuple[str, str], dict] = {}
        self.policies: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.created: list[dict] = []  # pod manifests exactly as received
        self.hold_pending = False
        self._faults: list[tuple[str, re.Pattern, list[int], str | None]] = []
        self._lock = threading.Lock()
        self._docker = docker.from_env()
        self.tag = uuid.uuid4().hex[:12]
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKubeAPI:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        for c in self.containers():
            try:
                c.remove(force=True)
            except DockerException:
                pass

    def containers(self) -> list:
        """Docker containers of this fake's pods still there."""
        return self._docker.containers.list(all=True, sparse=True, filters={"label": f"{FAKE_LABEL}={self.tag}"})

    def orphan_containers(self) -> list[str]:
        """Containers whose pod is gone from the API (a leak the API alone would not show)."""
        with self._lock:
            live = {p.get("_container") for p in self.pods.values()}
        return [c.name for c in self.containers() if c.id not in live]

    def inject(self, method: str, path: str, statuses: list[int], retry_after: str | None = None) -> None:
        """Answer the next ``len(statuses)`` requests of ``method`` whose path matches the regex ``path`` with these
        statuses; 0 on exec: accept the WebSocket, then drop the connection with no status."""
        with self._lock:
            self._faults.append((method, re.compile(path), list(statuses), retry_after))

    def fault_for(self, method: str, path: str) -> tuple[int, str | None] | None:
        with self._lock:
            self.requests.append((method, path))
            for m, pattern, statuses, retry_after in self._faults:
                if m == method and statuses and pattern.search(path):
                    return statuses.pop(0), retry_after
        return None

    # -- pods ----------------------------------------------------------------------
    def create_pod(self, ns: str, manifest: dict) -> tuple[int, dict]:
        name = manifest["metadata"]["name"]
        with self._lock:
            if (ns, name) in self.pods:
                return 409, status_object(409, "AlreadyExists", f'pods "{name}" already exists')
            self.created.append(json.loads(json.dumps(manifest)))
            pod = {**manifest, "metadata": {**manifest["metadata"], "namespace": ns, "uid": str(uuid.uuid4()),
                                            "creationTimestamp": _now()},
                   "status": {"phase": "Pending", "conditions": [], "containerStatuses": []}}
            self.pods[(ns, name)] = pod
        if self.hold_pending:
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/3 nodes are available: 3 Insufficient cpu."}]
        else:
            threading.Thread(target=self._run_pod, args=(ns, pod), daemon=True).start()
        return 201, pod

    def _run_pod(self, ns: str, pod: dict) -> None:
        spec, name = pod["spec"]["containers"][0], pod["metadata"]["name"]
        limits = spec["resources"]["limits"]
        try:
            self._docker.images.get(spec["image"])
        except ImageNotFound:
            reason = "ErrImageNeverPull" if spec.get("imagePullPolicy") == "Never" else "ErrImagePull"
            self._set_waiting(pod, reason, f'pull access denied for {spec["image"]}, repository does not exist')
            return
        memory = re.fullmatch(r"(\d+)(Ki|Mi|Gi|)", limits["memory"])
        cpu = limits["cpu"]
        nano_cpus = int(cpu[:-1]) * 1_000_000 if cpu.endswith("m") else int(float(cpu) * 1e9)
        try:
            container = self._docker.containers.run(
                spec["image"], command=spec["command"], working_dir=spec.get("workingDir"), detach=True,
                auto_remove=True, name=f"fake-kube-{name}", labels={FAKE_LABEL: self.tag},
                network_mode="bridge" if self._network_allowed(ns, pod) else "none",
                mem_limit=int(memory.group(1)) * _UNITS[memory.group(2)], nano_cpus=nano_cpus)
        except DockerException as e:
            self._set_waiting(pod, "CreateContainerError", str(e))
            return
        with self._lock:
            if (ns, name) not in self.pods:  # deleted while it started
                container.remove(force=True)
                return
            pod["_container"] = container.id
            pod["_started"] = time.time()
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                             "containerStatuses": [self._container_status(pod, {"running": {"startedAt": _now()}}, True)]}

    def _network_allowed(self, ns: str, pod: dict) -> bool:
        labels = pod["metadata"].get("labels") or {}
        for (policy_ns, _), policy in self.policies.items():
            spec = policy["spec"]
            if (policy_ns == ns and selects(",".join(f"{k}={v}" for k, v in spec["podSelector"].get("matchLabels", {}).items()), labels)
                    and {"Ingress", "Egress"} <= set(spec.get("policyTypes", [])) and not spec.get("ingress") and not spec.get("egress")):
                return False
        return True

    @staticmethod
    def _container_status(pod: dict, state: dict, ready: bool) -> dict:
        spec = pod["spec"]["containers"][0]
        return {"name": spec["name"], "image": spec["image"], "imageID": "", "ready": ready, "restartCount": 0,
                "started": ready, "state": state}

    def _set_waiting(self, pod: dict, reason: str, message: str) -> None:
        with self._lock:
            pod["status"]["containerStatuses"] = [self._container_status(pod, {"waiting": {"reason": reason, "message": message}}, False)]

    def get_pod(self, ns: str, name: str) -> dict | None:
        with self._lock:
            pod = self.pods.get((ns, name))
            if pod is None:
                return None
            waiting = [cs["state"].get("waiting") for cs in pod["status"]["containerStatuses"]]
            if waiting and waiting[0] and waiting[0]["reason"] == "ErrImagePull":  # the kubelet backs off after a failed pull
                waiting[0]["reason"] = "ImagePullBackOff"
            deadline = pod["spec"].get("activeDeadlineSeconds")
            if "_started" in pod and deadline and time.time() > pod["_started"] + deadline:
                pod["status"] = {"phase": "Failed", "reason": "DeadlineExceeded", "conditions": [],
                                 "message": "Pod was active on the node longer than the specified deadline",
                                 "containerStatuses": []}
                self._remove_container(pod)
            return self._public(pod)

    @staticmethod
    def _public(pod: dict) -> dict:
        return {k: v for k, v in pod.items() if not k.startswith("_")}

    def delete_pod(self, ns: str, name: str) -> dict | None:
        with self._lock:
            pod = self.pods.pop((ns, name), None)
        if pod is not None:
            self._remove_container(pod)
        return None if pod is None else self._public(pod)

    def _remove_container(self, pod: dict) -> None:
        cid = pod.pop("_container", None)
        if cid:
            try:
                self._docker.containers.get(cid).remove(force=True)
            except DockerException:
                pass

    def list_pods(self, ns: str, selector: str) -> list[dict]:
        return [self._public(p) for (pod_ns, name), p in list(self.pods.items())
                if pod_ns == ns and selects(selector, p["metadata"].get("labels") or {})]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: FakeKubeAPI

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        fault = self.api.fault_for(method, url.path)
        pods, policies, api = PODS.match(url.path), POLICIES.match(url.path), self.api
        if method == "POST" or (method == "DELETE"):
            body = self._body()
        if fault and fault[0] == 0 and pods and pods.group(3):  # status 0: upgrade, then drop the connection
            return _exec(self, self.api, pods.group(1), pods.group(2), query, cut=True)
        if fault:
            code, retry_after = fault
            self._send(code, status_object(code, "TooManyRequests" if code == 429 else "InternalError", f"injected {code}"),
                       {"Retry-After": retry_after} if retry_after else None)
            return
        if pods and pods.group(3):
            return _exec(self, api, pods.group(1), pods.group(2), query)
        if pods and method == "POST" and not pods.group(2):
            return self._send(*api.create_pod(pods.group(1), body))
        if pods and method == "GET" and not pods.group(2):
            items = api.list_pods(pods.group(1), query.get("labelSelector", [""])[0])
            return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        if pods and method in ("GET", "DELETE"):
            pod = (api.get_pod if method == "GET" else api.delete_pod)(pods.group(1), pods.group(2))
            if pod is None:
                return self._send(404, status_object(404, "NotFound", f'pods "{pods.group(2)}" not found'))
            return self._send(200, pod)
        if policies and method == "POST":
            key = (policies.group(1), body["metadata"]["name"])
            if key in api.policies:
                return self._send(409, status_object(409, "AlreadyExists", f'networkpolicies "{key[1]}" already exists'))
            api.policies[key] = body
            return self._send(201, body)
        if policies and method == "GET":
            items = [p for (ns, _), p in api.policies.items() if ns == policies.group(1)]
            return self._send(200, {"kind": "NetworkPolicyList", "apiVersion": "networking.k8s.io/v1", "metadata": {}, "items": items})
        self._send(404, status_object(404, "NotFound", f"the fake serves no {method} {url.path}"))

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


# -- exec: the WebSocket side of the API server -------------------------------------------
def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n) if n < 65536
                                     else bytes([127]) + struct.pack(">Q", n))
    return head + payload


def _read_message(rfile) -> tuple[int, bytes] | None:
    """One whole message from the client (frames are masked; continuations joined); None at EOF."""
    opcode, data = None, b""
    while True:
        head = rfile.read(2)
        if len(head) < 2:
            return None
        n = head[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", rfile.read(8))[0]
        mask = rfile.read(4) if head[1] & 0x80 else b""
        payload = rfile.read(n)
        if mask and n:
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
        opcode = head[0] & 0x0F if opcode is None or head[0] & 0x0F else opcode
        data += payload
        if head[0] & 0x80:
            return opcode, data


def _exec(handler: _Handler, api: FakeKubeAPI, ns: str, name: str, query: dict, cut: bool = False) -> None:
    pod = api.pods.get((ns, name))
    if pod is None or "_container" not in pod:
        return handler._send(400 if pod else 404, status_object(400 if pod else 404, "BadRequest" if pod else "NotFound",
                                                                 f"pod {name} is not running"))
    offered = [p.strip() for p in handler.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    protocol = next((p for p in api.protocols if p in offered), None)
    if handler.headers.get("Upgrade", "").lower() != "websocket" or protocol is None:
        return handler._send(400, status_object(400, "BadRequest", "exec needs a WebSocket upgrade with a channel protocol"))
    accept = base64.b64encode(hashlib.sha1((handler.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest()).decode()
    handler.send_response(101, "Switching Protocols")
    for k, v in (("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", accept),
                 ("Sec-WebSocket-Protocol", protocol)):
        handler.send_header(k, v)
    handler.end_headers()
    handler.close_connection = True
    if cut:
        return
    stdin = query.get("stdin", ["false"])[0] in ("1", "t", "T", "TRUE", "true", "True")  # Go's strconv.ParseBool
    proc = subprocess.Popen(["docker", "exec", *(["-i"] if stdin else []), pod["_container"], *query.get("command", [])],
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    send_lock = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with send_lock:
            try:
                handler.wfile.write(_frame(opcode, payload))
                handler.wfile.flush()
            except OSError:
                pass

    def pump(stream, channel: int) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            send(2, bytes([channel]) + chunk)

    def from_client() -> None:
        while (message := _read_message(handler.rfile)) is not None:
            opcode, data = message
            if opcode == 8:  # close
                break
            if opcode in (1, 2) and data[:1] == b"\x00" and proc.stdin:
                try:
                    proc.stdin.write(data[1:])
                    proc.stdin.flush()
                except OSError:
                    pass
            elif opcode in (1, 2) and data[:2] == b"\xff\x00" and protocol.startswith("v5") and proc.stdin:
                proc.stdin.close()
        if proc.stdin and not proc.stdin.closed:
            proc.stdin.close()

    threading.Thread(target=from_client, daemon=True).start()
    pumps = [threading.Thread(target=pump, args=(s, c), daemon=True) for s, c in ((proc.stdout, 1), (proc.stderr, 2))]
    for t in pumps:
        t.start()
    code = proc.wait()
    for t in pumps:
        t.join()
    status = ({"metadata": {}, "status": "Success"} if code == 0 else
              {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
               "message": f"command terminated with non-zero exit code: exit status {code}",
               "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}})
    send(2, b"\x03" + json.dumps(status).encode())
    send(8, struct.pack(">H", 1000))


__all__ = ["FakeKubeAPI", "selects"]
