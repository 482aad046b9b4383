"""The Kubernetes sandbox against an in-process fake API server (pods are Docker containers): what goes over the
wire, retries of 429/5xx, a pod that never runs, cleanup on close and on errors, reaping orphans by label."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from kubernetes import client

from swerl.envs import k8s_sandbox
from swerl.envs.k8s_api import pod_manifest
from swerl.envs.k8s_config import KubernetesSandboxConfig, session
from swerl.envs.k8s_sandbox import KubernetesSandbox, reap_pods, running_pods
from swerl.envs.sandbox import RunnerFailed, SandboxError
from tests.support.fake_kube import FakeKubeAPI

pytestmark = pytest.mark.docker
DURATIONS = "swerl-demo__durations-1"
PODS = r"/namespaces/t/pods$"
EXEC = r"/pods/[^/]+/exec$"


@pytest.fixture
def fake(docker_ready):
    with FakeKubeAPI() as api:
        yield api
        assert api.orphan_containers() == []


@pytest.fixture
def image(demo_images) -> str:
    return demo_images[DURATIONS]


def config(fake: FakeKubeAPI, run_id: str, **kw) -> KubernetesSandboxConfig:
    return KubernetesSandboxConfig(api_server=fake.url, namespace="t", run_id=run_id, api_backoff_s=0.01, **kw)


def test_the_pod_sent_has_the_configured_limits_and_no_network_behind_the_deny_all_policy(fake, image, run_id):
    cfg = config(fake, run_id, cpus=0.5, memory="512m", lifetime_s=120)
    with KubernetesSandbox(image, cfg) as sb:
        assert fake.created == [pod_manifest(cfg, sb.pod_name, image) | {"metadata": fake.created[0]["metadata"]}]
        assert fake.created[0]["metadata"]["labels"]["swerl.run_id"] == run_id
        [container] = fake.containers()
        host = container.client.api.inspect_container(container.id)["HostConfig"]
        assert (host["NetworkMode"], host["Memory"], host["NanoCpus"]) == ("none", 512 << 20, 500_000_000)
        assert list(fake.policies) == [("t", "swerl-sandbox-deny-all")]
        assert sb.exec("cat /proc/1/cmdline | tr '\\0' ' '").output == "sh -c sleep 120 & wait "
    assert fake.pods == {} and running_pods(cfg, run_id) == []


def test_a_sandbox_with_network_is_not_under_the_policy(fake, image, run_id):
    with KubernetesSandbox(image, config(fake, run_id, network=True)) as sb:
        [container] = fake.containers()
        assert container.client.api.inspect_container(container.id)["HostConfig"]["NetworkMode"] == "bridge"
        assert fake.created[0]["metadata"]["labels"]["swerl.network"] == "allowed"
        assert sb.exec("true").exit_code == 0


def test_429_and_500_from_the_api_server_are_retried_on_create_poll_exec_and_delete(fake, image, run_id):
    fake.inject("POST", PODS, [429, 500], retry_after="0")
    fake.inject("GET", r"/namespaces/t/pods/swerl-[0-9a-f]+$", [503])
    fake.inject("GET", EXEC, [500, 429])  # refused exec handshakes: the command never started
    fake.inject("DELETE", r"/namespaces/t/pods/swerl-[0-9a-f]+$", [502])
    with KubernetesSandbox(image, config(fake, run_id)) as sb:
        assert sb.exec("echo hi").output == "hi\n"
    assert [m for m, p in fake.requests if p.endswith("/pods")].count("POST") == 3
    assert [m for m, p in fake.requests if p.split("/pods/")[-1] == sb.pod_name].count("DELETE") == 2
    assert fake.pods == {}


def test_retries_that_run_out_fail_start_with_sandbox_error_and_leave_nothing(fake, image, run_id):
    fake.inject("POST", PODS, [500] * 3)
    slots = threading.BoundedSemaphore(1)
    with pytest.raises(SandboxError, match=r"cannot start a sandbox from .*\(500\)"):
        KubernetesSandbox(image, config(fake, run_id, api_retries=2), slots=slots).start()
    assert fake.pods == {} and slots.acquire(blocking=False)


def test_a_failure_after_the_pod_exists_deletes_it_and_gives_the_slot_back(fake, image, run_id):
    fake.inject("GET", EXEC, [500] * 2)
    slots = threading.BoundedSemaphore(1)
    with pytest.raises(SandboxError, match=r"(?s)exec in pod swerl-[0-9a-f]+ failed: .*Handshake status 500"):
        KubernetesSandbox(image, config(fake, run_id, api_retries=1), slots=slots).start()
    assert len(fake.created) == 1 and fake.pods == {} and slots.acquire(blocking=False)


def test_a_pod_that_never_runs_times_out_with_the_reason_and_is_deleted(fake, image, run_id):
    fake.hold_pending = True
    began = time.monotonic()
    with pytest.raises(SandboxError, match=r"was not Running within 1s \(phase Pending: Unschedulable: "
                                           r"0/3 nodes are available: 3 Insufficient cpu\.\); it is deleted"):
        KubernetesSandbox(image, config(fake, run_id, start_timeout_s=1)).start()
    assert 1 <= time.monotonic() - began < 5
    assert len(fake.created) == 1 and fake.pods == {}


def test_an_image_that_cannot_be_pulled_fails_fast(fake, image, run_id):
    with pytest.raises(SandboxError, match=r"cannot start: ImagePullBackOff: pull access denied"):
        KubernetesSandbox(image + "-gone", config(fake, run_id)).start()
    assert fake.pods == {}


def test_files_move_on_an_older_cluster_without_v5s_stdin_close(docker_ready, image, run_id):
    with FakeKubeAPI(protocols=("v4.channel.k8s.io",)) as fake, KubernetesSandbox(image, config(fake, run_id)) as sb:
        data = bytes(range(256)) * 4096  # 1 MiB: more than one stdin message
        sb.write_file("/tmp/blob.bin", data, 0o600)
        assert sb.read_file("/tmp/blob.bin") == data
        assert sb.exec("stat -c %a /tmp/blob.bin").output == "600\n"


def test_read_file_refuses_a_file_over_max_bytes(fake, image, run_id):
    with KubernetesSandbox(image, config(fake, run_id)) as sb:
        sb.write_file("big.txt", "x" * 100)
        with pytest.raises(SandboxError, match="big.txt is 100 bytes, over the 99-byte read limit"):
            sb.read_file("big.txt", max_bytes=99)


def test_reaping_deletes_by_label_only_orphans_expired_pods_and_a_runs_own(fake, run_id):
    fake.hold_pending = True  # reaping needs no running container
    dead = subprocess.Popen(["true"])
    dead.wait()
    cfg = config(fake, run_id)
    live = pod_manifest(cfg, "live", "img")
    orphan = pod_manifest(cfg, "orphan", "img")
    orphan["metadata"]["labels"].update({"swerl.owner_pid": str(dead.pid), "swerl.run_id": "other"})
    expired = pod_manifest(cfg, "expired", "img")
    expired["metadata"]["labels"].update({"swerl.expires_at": str(int(time.time()) - 1), "swerl.run_id": "other"})
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-swerls", "labels": {"app": "web"}},
               "spec": live["spec"]}
    with session(cfg) as api:
        core = client.CoreV1Api(api)
        for pod in (live, orphan, expired, foreign):
            core.create_namespaced_pod("t", pod)
    assert sorted(reap_pods(cfg)) == ["expired", "orphan"]
    assert sorted(name for _, name in fake.pods) == ["live", "not-swerls"]
    assert reap_pods(cfg, run_id=run_id) == ["live"]
    assert reap_pods(cfg, everything=True) == [] and [name for _, name in fake.pods] == ["not-swerls"]


def test_a_runner_that_stops_answering_is_given_up_on_and_the_pod_deleted(fake, image, run_id, monkeypatch):
    monkeypatch.setattr(k8s_sandbox, "HOST_GRACE_S", 0.5)
    sb = KubernetesSandbox(image, config(fake, run_id)).start()
    with pytest.raises(RunnerFailed, match=r"command did not stop 2s after its timeout; sandbox removed"):
        sb.exec("kill -STOP $PPID; sleep 100", timeout=1)  # the runner itself frozen: its timeout cannot fire
    assert fake.pods == {}
    with pytest.raises(SandboxError, match="not running"):
        sb.exec("true")


def test_an_exec_stream_cut_without_a_status_is_an_infrastructure_error_and_not_retried(fake, image, run_id):
    with KubernetesSandbox(image, config(fake, run_id)) as sb:
        fake.inject("GET", EXEC, [0])  # the command may have run: running it again is not the client's call
        with pytest.raises(SandboxError, match="exec in the pod failed: the exec stream was cut"):
            sb.exec("echo once >> /tmp/count")
        assert sb.exec("cat /tmp/count 2>/dev/null | wc -l").output == "0\n"


def test_each_sandbox_owns_its_api_client_and_closes_it(fake, image, run_id):
    with KubernetesSandbox(image, config(fake, run_id)) as a, KubernetesSandbox(image, config(fake, run_id)) as b:
        assert a._api is not b._api and a._api.rest_client.pool_manager is not b._api.rest_client.pool_manager
        assert sorted(running_pods(a.config, run_id)) == sorted([a.pod_name, b.pod_name])
    assert len(a._api.rest_client.pool_manager.pools) == 0  # closed: its connections are gone


def _left_pods(fake: FakeKubeAPI, cfg: KubernetesSandboxConfig) -> None:
    """A crashed run's pod (dead owner), a live run's pod and someone else's pod, all pending."""
    fake.hold_pending = True
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = pod_manifest(cfg, "orphan", "img")
    orphan["metadata"]["labels"].update({"swerl.owner_pid": str(dead.pid), "swerl.run_id": "other"})
    live = pod_manifest(cfg, "live", "img")
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-swerls", "labels": {"app": "web"}},
               "spec": live["spec"]}
    with session(cfg) as api:
        for pod in (orphan, live, foreign):
            client.CoreV1Api(api).create_namespaced_pod("t", pod)


def test_swerl_sandbox_reap_deletes_left_pods_in_the_namespaces_it_is_given(fake, run_id, monkeypatch):
    from typer.testing import CliRunner

    import swerl.envs.docker_sandbox
    from swerl.cli import app

    # the local daemon is shared with other work: its part of the command is not what this test is about
    monkeypatch.setattr(swerl.envs.docker_sandbox, "reap_containers", lambda **kw: [])
    _left_pods(fake, config(fake, run_id))
    args = ["sandbox", "reap", "--kube-namespace", "t", "--kube-api-server", fake.url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "removed 1 pod(s) in namespace t" in result.output
    assert sorted(name for _, name in fake.pods) == ["live", "not-swerls"]
    result = CliRunner().invoke(app, args + ["--all"])
    assert result.exit_code == 0 and "removed 1 pod(s) in namespace t" in result.output, result.output
    assert [name for _, name in fake.pods] == ["not-swerls"]


def test_swerl_sandbox_reap_names_an_unreachable_cluster(run_id, monkeypatch):
    from typer.testing import CliRunner

    import swerl.envs.docker_sandbox
    from swerl.cli import app
    from swerl.inference.vllm_server import free_port

    monkeypatch.setattr(swerl.envs.docker_sandbox, "reap_containers", lambda **kw: [])
    result = CliRunner().invoke(app, ["sandbox", "reap", "--kube-namespace", "t", "--kube-api-server",
                                      f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1 and "namespace t:" in result.output, result.output


def test_a_cancelled_flows_hook_deletes_its_pods(fake, run_id, monkeypatch):
    from types import SimpleNamespace

    import swerl.envs.docker_sandbox
    from flows._hooks import container_label, reap_run_containers

    monkeypatch.setattr(swerl.envs.docker_sandbox, "reap_containers", lambda **kw: [])
    name = f"k8s-{run_id}"[:40]
    cfg = config(fake, container_label(name))
    _left_pods(fake, cfg)
    # flow-run parameters arrive in their JSON form: the sandbox config is found in them, wherever it is
    params = {"params": {"name": name, "sampler": {"sandbox": cfg.model_dump(mode="json")}}}
    reap_run_containers(None, SimpleNamespace(parameters=params), None)
    assert [name for _, name in fake.pods] == ["not-swerls"]  # the run's own and the orphan; never someone else's
