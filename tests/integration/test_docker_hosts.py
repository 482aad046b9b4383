"""Sandboxes on a pool of two Docker hosts: this machine's daemon and a second dockerd in a network
namespace, reached over TCP (tests/support/netns_docker.py). The tests run in file order: the image
goes over once, sandboxes spread, a demo task is graded on the remote host, the remote host dies and
comes back, and nothing of this module's run is left on either host.

Containers are counted by this module's run id only: the local daemon is shared with other work.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from swerl.agent.loop import AgentConfig
from swerl.envs.docker_config import DockerSandboxConfig
from swerl.envs.docker_hosts import DockerHostsConfig, HostSandbox, docker_host, ensure_image, hosts_in
from swerl.envs import docker_reaper
from swerl.envs.docker_reaper import reap_containers, running_containers
from swerl.envs.factory import make_sandbox
from swerl.envs.sandbox import HostLost, SandboxError
from swerl.grading.grader import GradingConfig, grade_prediction
from swerl.stages.errors import InfraFailureRate
from swerl.stages.rollout import RolloutStage, SamplerConfig, run_eval
from tests.support import netns
from tests.support.netns_docker import NamespaceUnavailable, netns_dockerd

LOCAL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
RUN_ID = f"test-hosts-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def host2(docker_ready):
    try:
        with netns_dockerd() as host:
            yield host
    except NamespaceUnavailable as e:
        netns.unavailable("a second Docker daemon", e)


@pytest.fixture(scope="module", autouse=True)
def nothing_left(host2):
    """After the module: none of its containers on either host (the last tests leave the second one running)."""
    yield
    assert host2.process.poll() is None, "the second daemon should be back up for the leak check"
    assert (on_host(LOCAL), on_host(host2.url)) == ([], [])


@pytest.fixture(scope="module")
def image(demo_images, host2) -> str:
    return sorted(demo_images.values())[0]


def pool(host2, local_max: int = 2, remote_max: int = 2, **changes) -> DockerHostsConfig:
    return DockerHostsConfig(hosts=[{"url": LOCAL, "max_sandboxes": local_max},
                                    {"url": host2.url, "max_sandboxes": remote_max}],
                             container=DockerSandboxConfig(run_id=RUN_ID), **changes)


def on_host(url: str) -> list[str]:
    """This module's containers on one daemon."""
    import docker

    client = docker.DockerClient(base_url=url, timeout=30)
    return [c.id for c in client.containers.list(all=True, sparse=True, filters={"label": f"swerl.run_id={RUN_ID}"})]


def test_an_image_goes_to_a_host_once_however_many_ask(host2, image):
    remote = docker_host(host2.url)
    start = time.monotonic()
    threads = [threading.Thread(target=ensure_image, args=(remote, image)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\nimage {image} made available on {host2.url} in {time.monotonic() - start:.1f}s "
          f"(save/load: {[round(s, 1) for _, s in remote.transfers]})")
    assert [name for name, _ in remote.transfers] == [image]
    assert remote.client().images.get(image).id == docker_host(LOCAL).client().images.get(image).id
    remote.images.clear()  # forget it in this process: the host's image id still spares a transfer
    ensure_image(remote, image)
    ensure_image(docker_host(LOCAL), image)
    assert len(remote.transfers) == 1 and docker_host(LOCAL).transfers == []


@pytest.fixture(scope="module")
def registry(host2, tmp_path_factory):
    """A plain-HTTP registry here: this daemon pushes over loopback, the namespaced host pulls over the veth."""
    from swerl.envs.image_registry import ImageRegistryConfig
    from tests.support.registry import RegistryUnavailable, local_registry

    try:
        with local_registry(tmp_path_factory.mktemp("registry")) as port:
            yield ImageRegistryConfig(address=f"{host2.subnet}.1:{port}", push_address=f"127.0.0.1:{port}")
    except RegistryUnavailable as e:
        netns.unavailable("a registry", e)


def test_through_a_registry_an_image_is_pushed_once_and_pulled_under_its_own_name(host2, image, registry):
    import httpx

    from swerl.envs.image_registry import registry_repository

    remote = docker_host(host2.url)
    remote.client().images.remove(image)  # the save/load test put it there
    remote.images.clear()
    before = len(remote.transfers)
    threads = [threading.Thread(target=ensure_image, args=(remote, image, registry)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\nimage {image} pulled by {host2.url} through {registry.address} in {remote.transfers[-1][1]:.1f}s (push included)")
    assert [name for name, _ in remote.transfers[before:]] == [image]
    assert remote.client().images.get(image).id == docker_host(LOCAL).client().images.get(image).id
    repo, tag = registry_repository(image, "swerl")
    api = f"http://{registry.push_address}/v2"
    assert httpx.get(f"{api}/_catalog").json()["repositories"] == [repo]
    assert httpx.get(f"{api}/{repo}/tags/list").json()["tags"] == [tag]
    # neither daemon keeps the registry's name: the image is known by its own
    for url in (LOCAL, host2.url):
        tags = docker_host(url).client().images.get(image).tags
        assert image in tags and not [t for t in tags if t.startswith(registry.address) or t.startswith(registry.push_address)]
    with HostSandbox(image, DockerHostsConfig(hosts=[{"url": host2.url}], registry=registry,
                                              container=DockerSandboxConfig(run_id=RUN_ID))) as sb:
        assert sb.exec("echo $((6 * 7))").output.strip() == "42"
    assert len(remote.transfers) == before + 1


def test_an_unreachable_registry_fails_the_copy_naming_it(host2, image):
    from swerl.envs.image_registry import ImageRegistryConfig
    from swerl.inference.vllm_server import free_port

    dead = ImageRegistryConfig(address=f"{host2.subnet}.1:{free_port()}", push_address=f"127.0.0.1:{free_port()}")
    remote = docker_host(host2.url)
    remote.client().images.remove(image)
    remote.images.clear()
    try:
        with pytest.raises(SandboxError, match=f"pushing {image} to the registry {dead.push_address} failed"):
            ensure_image(remote, image, dead)
    finally:
        ensure_image(remote, image)  # save/load: the next tests use the image there


def test_sandboxes_go_to_the_least_loaded_host_within_each_bound(host2, image):
    config = pool(host2, local_max=1, remote_max=2, place_timeout_s=1)
    sandboxes = [make_sandbox(config, image) for _ in range(3)]
    try:
        for sb in sandboxes:
            sb.start()
        # empty pool: the first host; then 1/1 full against 0/2; then the one with room
        assert [sb.host_url for sb in sandboxes] == [LOCAL, host2.url, host2.url]
        assert [sb.exec("echo $((6 * 7))").output.strip() for sb in sandboxes] == ["42"] * 3
        assert len(on_host(host2.url)) == 2 and len(on_host(LOCAL)) == 1
        extra = make_sandbox(config, image)
        with pytest.raises(SandboxError, match="no room on any healthy Docker host"):
            extra.start()
    finally:
        for sb in sandboxes:
            sb.close()
    assert on_host(host2.url) == [] and on_host(LOCAL) == []


def test_concurrent_starts_never_exceed_a_hosts_bound(host2, image):
    config = pool(host2, local_max=1, remote_max=2)
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def one() -> None:
        with make_sandbox(config, image) as sb:
            count = len(on_host(sb.host_url))
            with lock:
                seen[sb.host_url] = max(seen.get(sb.host_url, 0), count)
            sb.exec("sleep 0.3")

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen.keys() == {LOCAL, host2.url}
    assert seen[LOCAL] <= 1 and seen[host2.url] <= 2


def test_a_demo_task_is_graded_on_the_remote_host(host2, image, demo_tasks, demo_images, tmp_path):
    iid = next(i for i, img in demo_images.items() if img == image)
    task = demo_tasks[iid]
    only_remote = DockerHostsConfig(hosts=[{"url": host2.url, "max_sandboxes": 2}],
                                    container=DockerSandboxConfig(output_limit_bytes=4_000_000, sweep_after_exec=True,
                                                                  run_id=RUN_ID))
    start = time.monotonic()
    res = grade_prediction(task, task.patch, image, GradingConfig(sandbox=only_remote, grading_logs=tmp_path))
    print(f"\ngraded {iid} on {host2.url} in {time.monotonic() - start:.1f}s")
    assert (res.resolved, res.failure_class, res.attempts) == (True, None, 1), res.reason
    assert on_host(host2.url) == []


def test_a_dead_host_fails_only_its_sandboxes_and_the_retry_lands_elsewhere(host2, image, demo_tasks, demo_images,
                                                                              tmp_path):
    config = pool(host2, local_max=2, remote_max=4, unhealthy_s=1.0)
    local_sb, remote_sb = make_sandbox(config, image), make_sandbox(config, image)
    try:
        local_sb.start(), remote_sb.start()
        assert (local_sb.host_url, remote_sb.host_url) == (LOCAL, host2.url)
        host2.kill()
        # 1/2 here against 1/4 there: the grading's first attempt goes to the dead host, its retry here
        iid = next(i for i, img in demo_images.items() if img == image)
        task = demo_tasks[iid]
        grading = GradingConfig(sandbox=config.model_copy(update={"container": DockerSandboxConfig(
            output_limit_bytes=4_000_000, sweep_after_exec=True, run_id=RUN_ID)}), infra_retries=1, grading_logs=tmp_path)
        res = grade_prediction(task, task.patch, image, grading)
        assert (res.resolved, res.failure_class, res.attempts) == (True, None, 2), res.reason
        with pytest.raises(HostLost, match="stopped answering"):  # infrastructure, never blamed on the command
            remote_sb.exec("echo hi")
        assert local_sb.exec("echo still here").output.strip() == "still here"
        remote_sb.close()  # the host is gone: closing its sandbox must not raise
        time.sleep(1.1)  # unhealthy_s passed: the host is pinged before it gets a sandbox again, and left out
        probed = time.monotonic()
        with make_sandbox(config, image) as again:
            assert again.host_url == LOCAL
        assert docker_host(host2.url).unhealthy_until > probed + 1.0
    finally:
        local_sb.close()
        remote_sb.close()


def test_a_host_killed_mid_rollout_loses_no_finished_trajectory_and_the_stage_completes_on_the_other(
        host2, image, demo, demo_images, tiny_model_dir, tmp_path):
    if host2.process.poll() is not None:
        host2.restart()
    iid = next(i for i, img in demo_images.items() if img == image)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(ln + "\n" for ln in demo.tasks_file.read_text().splitlines() if f'"{iid}"' in ln))
    sandbox = DockerHostsConfig(hosts=[{"url": LOCAL, "max_sandboxes": 2}, {"url": host2.url, "max_sandboxes": 2}],
                                container=DockerSandboxConfig(exec_channel=True), unhealthy_s=600)
    sampler = SamplerConfig(engine="scripted", concurrency=4, agent=AgentConfig(max_turns=20), sandbox=sandbox)
    stage = RolloutStage(tasks=tasks, repos=demo.repos_dir, model=str(tiny_model_dir), out=tmp_path / "eval", samples=4,
                         log_dir=tmp_path / "logs", run_id=RUN_ID, sampler=sampler)
    remote, killed = docker_host(host2.url), threading.Event()
    finished: list[str] = []  # trajectories stored, in order, as the stage stores them

    def kill_when_busy() -> None:  # four pairs start at once: two on each host; the remote one dies under them
        deadline = time.monotonic() + 120
        while len(on_host(host2.url)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        host2.kill()
        killed.set()

    watcher = threading.Thread(target=kill_when_busy)
    watcher.start()
    try:
        report, result = run_eval(stage, on_done=lambda t: finished.append(t.trajectory_id))
        watcher.join()
        assert killed.is_set()
        # the remote pairs ran again at once on this host: the stage completes, every pair scored, none lost
        assert 1 <= result.summary.host_lost_retried <= 2
        assert (result.summary.produced, result.summary.infra_failed) == (4, 0)
        assert sorted(finished) == [f"{iid}/{i}" for i in range(4)]  # each pair stored once: no lost attempt kept
        assert (report.pass_at_1, report.infra_failed) == (1.0, 0)
        assert on_host(LOCAL) == []
        # with no retries the lost pairs stay infra_error and fail the stage as retryable; its rerun redoes only them
        host2.restart()
        remote.unhealthy_until = 0.0
        killed.clear()
        again = stage.model_copy(update={"out": tmp_path / "again", "sampler": sampler.model_copy(
            update={"host_lost_retries": 0})})
        watcher = threading.Thread(target=kill_when_busy)
        watcher.start()
        with pytest.raises(InfraFailureRate, match=r"^[12] of 4 \(task, sample\) pairs \(\d+%\) failed for infrastructure"
                           ) as too_many:
            run_eval(again)
        watcher.join()
        failed = int(str(too_many.value)[0])
        report, result = run_eval(again)  # the dead host is left out: the failed pairs redo on this one
        assert (result.summary.skipped, result.summary.produced, result.summary.infra_failed) == (4 - failed, failed, 0)
        assert (report.pass_at_1, report.infra_failed) == (1.0, 0)
    finally:
        watcher.join()
        remote.unhealthy_until = 0.0  # the next tests bring the host back


def test_reaping_cleans_every_host_of_the_pool(host2, image):
    if host2.process.poll() is not None:
        host2.restart()  # the host comes back; what it ran before it died may still be listed
    config = pool(host2)
    left = [make_sandbox(config, image) for _ in range(4)]
    for sb in left:
        sb.start()  # and never closed: a crashed run's sandboxes
    assert {sb.host_url for sb in left} == {LOCAL, host2.url}
    assert len(running_containers(RUN_ID, hosts=hosts_in(config))) >= 4
    removed = reap_containers(run_id=RUN_ID, hosts=hosts_in({"sampler": {"sandbox": config.model_dump()}}))
    assert len(removed) >= 4
    assert running_containers(RUN_ID, hosts=[host2.url]) == []
    assert on_host(LOCAL) == [] and on_host(host2.url) == []
    for sb in left:
        sb.close()  # their containers are gone already: closing is quiet


def test_a_pool_sandbox_is_a_docker_sandbox_on_its_host(host2, image):
    with HostSandbox(image, pool(host2, local_max=1, remote_max=1)) as a, HostSandbox(image, pool(host2, local_max=1,
                                                                                                   remote_max=1)) as b:
        a.write_file("notes/x.txt", "from the pool\n")
        assert a.read_file("notes/x.txt") == b"from the pool\n"
        with pytest.raises(FileNotFoundError):
            b.read_file("notes/x.txt")
        assert {a.host_url, b.host_url} == {LOCAL, host2.url}
        assert "notes/x.txt" in a.diff() and b.diff() == ""
    assert on_host(LOCAL) == [] and on_host(host2.url) == []


def test_a_cancelled_pipelines_hook_reaps_its_sandboxes_on_every_host_of_its_pool(host2, image):
    from types import SimpleNamespace

    from flows._hooks import container_label, reap_run_containers

    name = f"hosts-{uuid.uuid4().hex[:6]}"
    config = pool(host2)
    config.run_id = container_label(name)
    left = [make_sandbox(config, image) for _ in range(2)]
    for sb in left:
        sb.start()
    assert {sb.host_url for sb in left} == {LOCAL, host2.url}
    # flow-run parameters arrive in their JSON form: the pool is found in them, wherever it is; the hook may run in a
    # process whose pools never used the host, so this one's memory of hosts is set aside meanwhile
    params = {"params": {"name": name, "rft": {"sampler": {"sandbox": config.model_dump(mode="json")}}}}
    known = dict(docker_reaper._known_hosts)
    docker_reaper._known_hosts.clear()
    try:
        assert len(running_containers(container_label(name))) == 1  # the local one only: the host is not known
        reap_run_containers(None, SimpleNamespace(parameters=params), None)
    finally:
        docker_reaper._known_hosts.update(known)
    assert running_containers(container_label(name), hosts=[host2.url]) == []
    for sb in left:
        sb.close()
