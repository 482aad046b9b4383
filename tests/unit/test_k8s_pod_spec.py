"""The Kubernetes sandbox's pod, NetworkPolicy, labels, config rules and retry policy, without a cluster or Docker."""

from __future__ import annotations

import os

import pytest
from kubernetes.client.exceptions import ApiException
from pydantic import TypeAdapter, ValidationError

from swerl.envs import k8s_api
from swerl.envs.factory import SandboxConfig, make_sandbox
from swerl.envs.k8s_api import call, deny_all_policy, label_value, pod_manifest, retriable
from swerl.envs.k8s_config import KubernetesSandboxConfig, cpu_quantity, memory_quantity
from swerl.envs.k8s_sandbox import KubernetesSandbox


def test_the_pod_has_exact_requests_limits_deadline_no_token_and_one_sleeping_container():
    cfg = KubernetesSandboxConfig(cpus=2, memory="4g", cpu_request=0.5, memory_request="1g", lifetime_s=600,
                                  image_pull_policy="Never", node_selector={"pool": "sandboxes"},
                                  image_pull_secrets=["regcred"])
    pod = pod_manifest(cfg, "swerl-abc", "swerl-instance:x-1")
    spec = pod["spec"]
    assert {k: v for k, v in spec.items() if k != "containers"} == {
        "restartPolicy": "Never", "activeDeadlineSeconds": 600, "automountServiceAccountToken": False,
        "enableServiceLinks": False, "terminationGracePeriodSeconds": 0, "nodeSelector": {"pool": "sandboxes"},
        "imagePullSecrets": [{"name": "regcred"}]}
    assert spec["containers"] == [{
        "name": "sandbox", "image": "swerl-instance:x-1", "imagePullPolicy": "Never",
        "command": ["sh", "-c", "sleep 600 & wait"], "workingDir": "/testbed",
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2000m", "memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False}}]
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["name"]) == ("v1", "Pod", "swerl-abc")


def test_requests_default_to_the_limits_guaranteed_qos():
    resources = pod_manifest(KubernetesSandboxConfig(), "p", "i")["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "1000m", "memory": "2Gi"}, "limits": {"cpu": "1000m", "memory": "2Gi"}}


def test_pods_carry_swerls_label_scheme_as_valid_label_values():
    pod = pod_manifest(KubernetesSandboxConfig(run_id="run:2026/11 #3", network=False, lifetime_s=60), "p", "i")
    lbl = pod["metadata"]["labels"]
    assert lbl["swerl.managed"] == "1" and lbl["swerl.kind"] == "sandbox" and lbl["swerl.network"] == "none"
    assert lbl["swerl.owner_pid"] == str(os.getpid())
    assert lbl["swerl.run_id"] == label_value("run:2026/11 #3") == "run-2026-11-3-" + lbl["swerl.run_id"][-8:]
    assert KubernetesSandboxConfig(network=True).network and pod_manifest(
        KubernetesSandboxConfig(network=True), "p", "i")["metadata"]["labels"]["swerl.network"] == "allowed"


def test_label_values_are_kept_when_valid_and_cleaned_with_a_hash_otherwise():
    assert label_value("test-1a2b3c4d") == "test-1a2b3c4d"
    assert label_value("a/b") != label_value("a:b")  # both clean to "a-b": the hash keeps them apart
    long = label_value("x" * 100)
    assert len(long) == 63 and long.startswith("x" * 54 + "-")


def test_the_deny_all_policy_selects_no_network_pods_and_allows_nothing_either_way():
    policy = deny_all_policy()
    assert policy["spec"] == {"podSelector": {"matchLabels": {"swerl.network": "none"}},
                              "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}
    assert policy["metadata"]["labels"] == {"swerl.managed": "1", "swerl.kind": "network-policy"}


def test_quantities_use_kubernetes_units():
    assert [memory_quantity(m) for m in ("512m", "2g", "100k", "1048576")] == ["512Mi", "2Gi", "100Ki", "1048576"]
    assert [cpu_quantity(c) for c in (1.0, 0.25, 1e-6)] == ["1000m", "250m", "1m"]


def test_a_request_over_its_limit_is_refused_with_what_to_do():
    with pytest.raises(ValidationError, match="cpu_request 3.0 is over the limit cpus=2.0; Kubernetes refuses"):
        KubernetesSandboxConfig(cpus=2, cpu_request=3)
    with pytest.raises(ValidationError, match="memory_request 3g is over the limit memory=2g"):
        KubernetesSandboxConfig(memory_request="3g")
    with pytest.raises(ValidationError, match="namespace"):
        KubernetesSandboxConfig(namespace="Not_A_Namespace")


def test_the_sandbox_config_union_and_make_sandbox_pick_the_kubernetes_backend():
    cfg = TypeAdapter(SandboxConfig).validate_python({"kind": "kubernetes", "namespace": "rl", "cpus": 2})
    assert isinstance(cfg, KubernetesSandboxConfig) and (cfg.namespace, cfg.cpus) == ("rl", 2)
    assert isinstance(make_sandbox(cfg, "img", base_commit="abc"), KubernetesSandbox)


def _failing(statuses: list[int | Exception], headers: dict | None = None):
    """A call that fails with these statuses (or exceptions) in turn, then returns "ok"."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(statuses):
            failure = statuses[len(calls) - 1]
            if isinstance(failure, Exception):
                raise failure
            e = ApiException(status=failure, reason="injected")
            e.headers = headers
            raise e
        return "ok"

    return fn, calls


@pytest.fixture
def sleeps(monkeypatch):
    waited: list[float] = []
    monkeypatch.setattr(k8s_api.time, "sleep", waited.append)
    return waited


def test_429_and_5xx_are_retried_with_doubling_jittered_backoff(sleeps):
    fn, calls = _failing([429, 500, 503])
    assert call(KubernetesSandboxConfig(api_backoff_s=1.0), fn) == "ok"
    assert len(calls) == 4
    # delays 1, 2, 4 s, each jittered down to at most half
    assert [0.5 <= sleeps[0] <= 1, 1 <= sleeps[1] <= 2, 2 <= sleeps[2] <= 4] == [True] * 3


def test_retry_after_is_honoured(sleeps):
    fn, calls = _failing([429], headers={"Retry-After": "7"})
    assert call(KubernetesSandboxConfig(), fn) == "ok" and sleeps == [7.0]


def test_a_client_error_is_not_retried_and_retries_run_out(sleeps):
    fn, calls = _failing([404])
    with pytest.raises(ApiException) as e:
        call(KubernetesSandboxConfig(), fn)
    assert (e.value.status, len(calls)) == (404, 1)
    fn, calls = _failing([500] * 3)
    with pytest.raises(ApiException):
        call(KubernetesSandboxConfig(api_retries=2), fn)
    assert len(calls) == 3 and len(sleeps) == 2


def test_what_counts_as_retriable():
    handshake = ApiException(status=0, reason="Handshake status 503 Service Unavailable -+-+- {} -+-+- b''")
    assert [retriable(e) for e in (
        handshake, ApiException(status=0, reason="[Errno 111] Connection refused"), ApiException(status=502),
        ApiException(status=0, reason="Failed to parse `now` as datetime object"), ApiException(status=409),
        ApiException(status=0, reason="Handshake status 403 Forbidden"), ValueError("no"))] == [
        True, True, True, False, False, False, False]


def test_kube_configs_in_finds_every_kubernetes_sandbox_in_flow_parameters():
    from swerl.envs.k8s_sandbox import KubernetesSandboxConfig, kube_configs_in

    a = KubernetesSandboxConfig(namespace="a", api_server="https://k:6443")
    params = {"sampler": {"sandbox": a.model_dump(mode="json")}, "rft": {"sampler": {"sandbox": {"kind": "docker"}}},
              "eval": [a, KubernetesSandboxConfig(namespace="b")], "broken": {"kind": "kubernetes", "namespace": "Not Valid"}}
    assert [(c.namespace, c.api_server) for c in kube_configs_in(params)] == [("a", "https://k:6443"), ("b", None)]
    assert kube_configs_in({"sandbox": {"kind": "docker"}}) == []
