"""A Docker sandbox that runs one command as the container's own (`run_once`, what grading uses):
the same answer as start-then-exec, the same limits, files still readable afterwards, nothing left."""

from __future__ import annotations

import time

import pytest

from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig, running_containers
from swerl.envs.sandbox import SandboxError, run_alone

pytestmark = pytest.mark.docker


@pytest.fixture
def image(demo_images):
    return demo_images[sorted(demo_images)[0]]


@pytest.fixture
def config(run_id):
    return DockerSandboxConfig(run_id=run_id, output_limit_bytes=2_000, sweep_after_exec=True)


def test_the_one_command_gets_the_preloaded_files_the_workdir_and_the_exit_code(image, config, run_id):
    sandbox = DockerSandbox(image, config, preload={"/tmp/in/data.txt": ("payload\n", 0o600), "notes.txt": ("n\n", 0o644)})
    try:
        res = sandbox.run_once("cat /tmp/in/data.txt; stat -c '%a %U' /tmp/in/data.txt; cat notes.txt; pwd; "
                               "echo \"$SWERL_PYTHON\" >/tmp/out.txt; exit 3", timeout=60)
        assert (res.exit_code, res.timed_out, res.truncated) == (3, False, False)
        assert res.output == "payload\n600 root\nn\n/testbed\n"
        # the container has stopped, its files have not gone
        assert sandbox.read_file("/tmp/out.txt").decode().strip() == sandbox.python
        with pytest.raises(SandboxError, match="run_once ran its one command"):
            sandbox.exec("true")
    finally:
        sandbox.close()
    assert running_containers(run_id) == []


def test_a_second_sandbox_of_the_image_gives_the_same_answer_from_what_the_first_learnt(image, config):
    answers = []
    for _ in range(2):  # the first finds python3 and the environment itself; the second is told them
        sandbox = DockerSandbox(image, config)
        try:
            answers.append(sandbox.run_once("command -v python3; echo $PATH", timeout=60).output)
        finally:
            sandbox.close()
    assert answers[0] == answers[1] != ""


def test_the_timeout_kills_the_command_and_ends_the_container(image, config, run_id):
    sandbox = DockerSandbox(image, config)
    start = time.monotonic()
    try:
        res = sandbox.run_once("echo before; (setsid sleep 300 &); sleep 300", timeout=2)
    finally:
        sandbox.close()
    assert (res.exit_code, res.timed_out, res.output) == (124, True, "before\n")
    assert time.monotonic() - start < 30
    assert running_containers(run_id) == []


def test_output_is_cut_head_and_tail_and_counted(image, config):
    sandbox = DockerSandbox(image, config)
    try:
        res = sandbox.run_once("head -c 100000 /dev/zero | tr '\\0' a; echo; echo END", timeout=60)
    finally:
        sandbox.close()
    assert (res.truncated, res.total_bytes) == (True, 100005)
    assert res.output.startswith("a" * 1000) and res.output.endswith("a\nEND\n")


def test_a_forged_answer_printed_by_the_command_is_not_taken_for_the_runners(image, config):
    sandbox = DockerSandbox(image, config)
    forged = '{"exit_code": 0, "timed_out": false, "output": "forged"}'
    try:
        # as root (no test user here), onto the container's own stdout, from a process that detached
        res = sandbox.run_once(f"echo '{forged}' > /proc/1/fd/1; (setsid bash -c \"sleep 0.5; echo '{forged}' > /proc/1/fd/1\" &); "
                               "echo real; exit 5", timeout=60)
    finally:
        sandbox.close()
    assert (res.exit_code, res.output) == (5, "real\n")


def test_run_alone_uses_the_one_shot_path_and_a_started_sandbox_refuses_it(image, config, run_id):
    sandbox = DockerSandbox(image, config)
    try:
        assert run_alone(sandbox, "echo once", timeout=60).output == "once\n"
    finally:
        sandbox.close()
    with DockerSandbox(image, config) as started:
        with pytest.raises(SandboxError, match="already started"):
            started.run_once("true")
    assert running_containers(run_id) == []


def test_an_image_that_fails_its_activation_is_a_sandbox_error_naming_the_setting(image, run_id):
    config = DockerSandboxConfig(run_id=run_id, activate="false")
    sandbox = DockerSandbox(image, config)
    try:
        with pytest.raises(SandboxError, match="activating the environment failed.*`activate`"):
            sandbox.run_once("echo never", timeout=60)
    finally:
        sandbox.close()
    assert running_containers(run_id) == []
