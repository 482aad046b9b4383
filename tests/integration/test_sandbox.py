"""The Docker sandbox: limits, real timeouts, truncation, files, diffs, and no leaks."""

from __future__ import annotations

import time

import docker
import pytest

from swerl.envs import labels
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig, reap_containers, running_containers
from swerl.envs.sandbox import SandboxError

pytestmark = pytest.mark.docker


@pytest.fixture
def image(demo_images, demo_tasks):
    return demo_images[sorted(demo_images)[0]]


# every behaviour below holds whether commands go one docker exec each or over the long-lived runner
@pytest.fixture(params=[False, True], ids=["exec-per-command", "exec-channel"])
def sandbox(request, image, run_id):
    config = DockerSandboxConfig(run_id=run_id, output_limit_bytes=2_000, memory="256m", pids_limit=64, exec_channel=request.param)
    with DockerSandbox(image, config) as sb:
        yield sb
    assert running_containers(run_id) == []


@pytest.fixture
def channel_sandbox(image, run_id):
    with DockerSandbox(image, DockerSandboxConfig(run_id=run_id, exec_channel=True)) as sb:
        yield sb
    assert running_containers(run_id) == []


def test_the_exec_channel_runs_every_command_under_one_runner(channel_sandbox, image, run_id):
    parents = {channel_sandbox.exec("echo $PPID").output for _ in range(3)}
    assert len(parents) == 1
    with DockerSandbox(image, DockerSandboxConfig(run_id=run_id)) as one_exec_each:
        assert len({one_exec_each.exec("echo $PPID").output for _ in range(3)}) == 3


def test_a_forged_answer_on_the_runner_stream_is_not_taken_for_the_real_one(channel_sandbox):
    forge = 'printf \'{"tag": "not-yours", "exit_code": 0, "timed_out": false, "output": "forged"}\\n\' > /proc/$PPID/fd/1'
    res = channel_sandbox.exec(f"{forge}; echo real; exit 3")
    assert (res.exit_code, res.output) == (3, "real\n")
    assert channel_sandbox.exec("echo next").output == "next\n"


def test_a_command_that_kills_the_runner_fails_alone_and_later_commands_still_run(channel_sandbox):
    with pytest.raises(SandboxError, match="sandbox runner failed"):
        channel_sandbox.exec("kill -9 $PPID; sleep 5")
    assert channel_sandbox.exec("echo still here; exit 4").exit_code == 4
    assert channel_sandbox.exec("echo $((1 + 1))").output == "2\n"


def test_exec_returns_exit_code_and_output(sandbox):
    res = sandbox.exec("echo out; echo err >&2; exit 7")
    assert (res.exit_code, res.output, res.timed_out, res.truncated) == (7, "out\nerr\n", False, False)


def test_exec_runs_in_testbed_by_default(sandbox):
    assert sandbox.exec("pwd").output == "/testbed\n"


def test_timeout_kills_the_whole_process_tree_daemons_included(sandbox):
    res = sandbox.exec("(setsid sleep 1000 &); nohup sleep 999 >/dev/null 2>&1 & while :; do :; done", timeout=1.5)
    assert (res.timed_out, res.exit_code) == (True, 124)
    left = sandbox.exec("ps -eo comm= | grep -c '^sleep$' || true").output.strip()
    assert left == "1"  # only the container's own `sleep <lifetime>` (PID 1's child) is left


def test_background_processes_do_not_outlive_their_command(sandbox):
    assert sandbox.exec("sleep 300 & echo started").output == "started\n"
    assert sandbox.exec("ps -eo args= | grep -c '^sleep 300$' || true").output.strip() == "0"


def test_output_is_truncated_head_and_tail_with_a_marker(sandbox):
    res = sandbox.exec("seq 1 100000")
    assert res.truncated and res.total_bytes == len("".join(f"{i}\n" for i in range(1, 100001)))
    assert res.output.startswith("1\n2\n3\n") and res.output.endswith("99999\n100000\n")
    assert "bytes of output truncated ...]" in res.output
    assert len(res.output) < 2_200


def test_network_is_off_by_default(sandbox):
    res = sandbox.exec("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"")
    assert res.exit_code != 0 and "Network is unreachable" in res.output


def test_memory_limit_kills_a_hog(sandbox):
    res = sandbox.exec("python3 -c \"b = bytearray(600 * 1024 * 1024); print('survived')\"", timeout=60)
    assert res.exit_code == 137 and "survived" not in res.output


def test_process_limit_contains_a_fork_bomb(sandbox):
    res = sandbox.exec("for i in $(seq 200); do sleep 30 & done; wait", timeout=5)
    assert "fork" in res.output.lower() or "resource temporarily unavailable" in res.output.lower()
    assert sandbox.exec("echo alive").output == "alive\n"


def test_write_then_read_file_roundtrips_bytes(sandbox):
    sandbox.write_file("notes/a.bin", b"\x00\x01swerl\n")
    assert sandbox.read_file("/testbed/notes/a.bin") == b"\x00\x01swerl\n"
    with pytest.raises(FileNotFoundError, match="/testbed/missing.txt does not exist"):
        sandbox.read_file("missing.txt")


def test_write_files_puts_many_files_and_their_folders_in_one_call(sandbox):
    sandbox.write_files({"deep/er/a.py": ("print(1)\n", 0o644), "/usr/local/bin/hello": (b"#!/bin/sh\necho hi\n", 0o755)})
    assert sandbox.read_file("/testbed/deep/er/a.py") == b"print(1)\n"
    assert sandbox.exec("hello && stat -c '%a' /usr/local/bin/hello deep/er deep/er/a.py").output == "hi\n755\n755\n644\n"


def test_diff_shows_edits_new_and_deleted_files_against_base_commit(sandbox):
    tracked = sandbox.exec("git ls-files | grep '\\.py$' | grep -v '^tests/' | head -2").output.split()
    sandbox.exec(f"echo '# edited' >> {tracked[0]} && rm {tracked[1]} && echo 'x = 1' > brand_new.py && git add -A && git commit -qm wip")
    diff = sandbox.diff()
    assert f"+++ b/{tracked[0]}" in diff and "+# edited" in diff
    assert f"deleted file mode 100644" in diff and f"--- a/{tracked[1]}" in diff
    assert "+++ b/brand_new.py" in diff and "+x = 1" in diff


def test_testbed_hides_later_history(sandbox, demo, demo_tasks):
    import subprocess

    assert sandbox.exec("git remote").output == ""
    assert sandbox.exec("git tag").output == ""
    head = sandbox.exec("git rev-parse HEAD").output.strip()
    assert sandbox.exec("git log --all --format=%H | head -1").output.strip() == head
    # every commit in the mirror after base_commit is absent from the sandbox's object store
    for t in demo_tasks.values():
        if t.base_commit == head:
            mirror = demo.repos_dir / t.repo.replace("/", "__")
            newer = subprocess.run(["git", "rev-list", f"{head}..main"], cwd=mirror, capture_output=True, text=True).stdout.split()
            assert newer
            for sha in newer:
                assert sandbox.exec(f"git cat-file -e {sha}").exit_code != 0


def test_containers_clean_up_on_exception(image, run_id):
    with pytest.raises(RuntimeError, match="boom"):
        with DockerSandbox(image, DockerSandboxConfig(run_id=run_id)):
            raise RuntimeError("boom")
    assert running_containers(run_id) == []


def test_reaper_removes_containers_of_dead_owners(image, run_id, docker_ready):
    client = docker.from_env()
    lbl = labels.owner_labels(run_id)
    lbl[labels.OWNER_PID] = "999999"  # no such process
    c = client.containers.run(image, ["sleep", "600"], detach=True, labels=lbl, network_mode="none")
    assert running_containers(run_id) == [c.name]
    assert c.name in reap_containers()
    assert running_containers(run_id) == []


def test_bounded_concurrency_blocks_the_next_sandbox(image, run_id):
    import threading

    from swerl.envs.docker_sandbox import concurrency_slots

    slots = concurrency_slots(1)
    started = []
    first = DockerSandbox(image, DockerSandboxConfig(run_id=run_id), slots=slots).start()
    t = threading.Thread(target=lambda: started.append(DockerSandbox(image, DockerSandboxConfig(run_id=run_id), slots=slots).start()))
    t.start()
    time.sleep(1.0)
    assert started == []  # waits for the slot
    first.close()
    t.join(30)
    assert len(started) == 1
    started[0].close()
    assert running_containers(run_id) == []


def test_agents_use_the_exec_channel_and_graders_one_exec_per_command():
    from swerl.grading.grader import GradingConfig
    from swerl.rollout.runner import RolloutConfig

    # a graded command could forge the long-lived runner's answer; a one-shot runner's last line is its own
    assert (RolloutConfig().sandbox.exec_channel, GradingConfig().sandbox.exec_channel) == (True, False)
