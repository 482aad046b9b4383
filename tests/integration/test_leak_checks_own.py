"""Leak checks count only what their test created: a foreign swerl sandbox on the shared daemon
(another run's, another process's, one whose owner died) changes neither the count nor the reaping."""

from __future__ import annotations

import uuid

import pytest

from swerl.envs import labels
from swerl.envs.docker_client import docker_client
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig, reap_containers, running_containers

pytestmark = pytest.mark.docker


@pytest.fixture
def foreign(demo_images, docker_ready):
    """A sandbox as another swerl command would leave it: its own run, an owner pid that is dead."""
    lbl = labels.owner_labels(f"foreign-{uuid.uuid4().hex[:8]}")
    lbl[labels.OWNER_PID], lbl[labels.KIND] = "999999", "sandbox"
    image = demo_images[sorted(demo_images)[0]]
    container = docker_client().containers.run(image, ["sleep", "600"], detach=True, labels=lbl, network_mode="none")
    yield container, lbl[labels.RUN_ID]
    container.remove(force=True)  # ours to remove: this fixture made it


def test_a_foreign_sandbox_is_neither_counted_nor_reaped_by_a_runs_leak_check(foreign, demo_images, run_id):
    container, foreign_run = foreign
    with DockerSandbox(demo_images[sorted(demo_images)[0]], DockerSandboxConfig(run_id=run_id)):
        assert len(running_containers(run_id)) == 1
    assert running_containers(run_id) == []
    assert reap_containers(within_run=run_id) == []  # its owner is dead, but it is not this run's
    assert running_containers(foreign_run) == [container.name]
