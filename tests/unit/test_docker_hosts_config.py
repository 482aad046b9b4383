"""The docker_hosts sandbox config and its placement rule, without a daemon (placement talks to none)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from swerl.envs.docker_hosts import DockerHostsConfig, HostSandbox, docker_host, hosts_in, place, release
from swerl.envs.factory import SandboxConfig, make_sandbox
from swerl.envs.sandbox import SandboxError

ADAPTER = TypeAdapter(SandboxConfig)


def test_a_docker_hosts_config_is_chosen_by_its_kind_and_makes_pool_sandboxes():
    config = ADAPTER.validate_python({"kind": "docker_hosts", "hosts": [{"url": "tcp://10.0.0.2:2375", "max_sandboxes": 8}],
                                      "container": {"memory": "1g", "run_id": "r1"}})
    assert isinstance(config, DockerHostsConfig)
    assert (config.hosts[0].max_sandboxes, config.container.memory, config.run_id, config.workdir) == (8, "1g", "r1", "/testbed")
    config.run_id = "r2"  # stages label sandboxes through the config, whatever its kind
    assert config.container.run_id == "r2"
    assert isinstance(make_sandbox(config, "img:1"), HostSandbox)


@pytest.mark.parametrize("hosts, error", [
    ([], "at least 1 item"),
    ([{"url": "10.0.0.2:2375"}], "String should match pattern"),
    ([{"url": "tcp://a:1"}, {"url": "tcp://a:1"}], "a Docker host is listed twice"),
    ([{"url": "tcp://a:1", "max_sandboxes": 0}], "greater than or equal to 1"),
])
def test_a_pool_config_refuses(hosts, error):
    with pytest.raises(ValidationError, match=error):
        DockerHostsConfig(hosts=hosts)


def test_placement_takes_the_least_loaded_host_relative_to_its_bound():
    config = DockerHostsConfig(hosts=[{"url": "tcp://place-a:1", "max_sandboxes": 1},
                                      {"url": "tcp://place-b:1", "max_sandboxes": 3}], place_timeout_s=0.1)
    # 0/1 vs 0/3: the first on a tie; then 1/1 is full; then b alone: 1/3, 2/3
    placed = [place(config) for _ in range(4)]
    assert [h.url for h in placed] == ["tcp://place-a:1"] + ["tcp://place-b:1"] * 3
    with pytest.raises(SandboxError, match="no room on any healthy Docker host of the pool within 0s"):
        place(config)
    release(placed[0])
    assert place(config).url == "tcp://place-a:1"
    for host in placed:
        release(host)
    assert (docker_host("tcp://place-a:1").live, docker_host("tcp://place-b:1").live) == (0, 0)


def test_an_unhealthy_host_is_left_out_until_its_time_is_up():
    config = DockerHostsConfig(hosts=[{"url": "tcp://sick-a:1"}, {"url": "tcp://sick-b:1"}])
    import time

    docker_host("tcp://sick-a:1").unhealthy_until = time.monotonic() + 60
    host = place(config)
    assert host.url == "tcp://sick-b:1"
    release(host)
    docker_host("tcp://sick-b:1").unhealthy_until = time.monotonic() + 60
    with pytest.raises(SandboxError, match="no Docker host of the pool answers"):
        place(config)


def test_hosts_in_finds_every_pool_in_flow_parameters():
    pool = {"kind": "docker_hosts", "hosts": [{"url": "tcp://p:1"}, {"url": "tcp://q:1"}]}
    params = {"sampler": {"sandbox": pool}, "rft": {"sampler": {"sandbox": {"kind": "docker"}}},
              "eval": [DockerHostsConfig(hosts=[{"url": "tcp://q:1"}, {"url": "ssh://u@r"}])]}
    assert hosts_in(params) == ["tcp://p:1", "tcp://q:1", "ssh://u@r"]
    assert hosts_in({"sandbox": {"kind": "docker"}}) == []


def test_a_registry_keeps_an_images_path_and_tag_under_its_namespace():
    from swerl.envs.image_registry import registry_repository

    assert registry_repository("swerl-instance:swerl-demo__csvlite-1-e6", "swerl") == ("swerl/swerl-instance", "swerl-demo__csvlite-1-e6")
    assert registry_repository("org/name", "ns") == ("ns/org/name", "latest")
    # a registry host in the name is dropped: the image goes to this registry whatever its origin
    assert registry_repository("quay.io/org/name:1", "swerl") == ("swerl/org/name", "1")
    assert registry_repository("localhost:5000/name:2", "swerl") == ("swerl/name", "2")


def test_the_registry_setting_is_checked_where_it_is_given():
    from pydantic import ValidationError

    from swerl.envs.image_registry import ImageRegistryConfig

    config = DockerHostsConfig(hosts=[{"url": "tcp://p:1"}], registry={"address": "10.0.0.5:5000", "push_address": "127.0.0.1:5000"})
    assert (config.registry.address, config.registry.pusher, config.registry.repository_prefix) == ("10.0.0.5:5000", "127.0.0.1:5000", "swerl")
    assert ImageRegistryConfig(address="registry.lan").pusher == "registry.lan"
    for bad in ({"address": "http://10.0.0.5:5000"}, {"address": "10.0.0.5:5000/path"}, {"address": "r:1", "repository_prefix": "Up"}):
        with pytest.raises(ValidationError):
            ImageRegistryConfig(**bad)

