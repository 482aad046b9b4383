"""The test-user layer on its own, in a real grading sandbox: after the lock-down, what the tests' user
can and cannot do to the repository, the grading folder, the evidence and swerl's runner."""

from __future__ import annotations

import json
import shlex

import pytest

from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig, running_containers
from swerl.grading.plan import test_user_source

pytestmark = pytest.mark.docker

HELPER = "/tmp/swerl-grade/swerl_test_user.py"
UID = 54321

# each probe prints "<name> ok" or "<name> <errno name>", run as the test user
PROBES = r"""
import errno, os, sys
def probe(name, action):
    try:
        action()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
test_file = sys.argv[1]
def parent(pid):
    return int(open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[1])
runner = os.getppid()  # swerl's runner: the oldest ancestor below the container's init (or docker exec's 0)
while parent(runner) > 1:
    runner = parent(runner)
probe("write_test_file", lambda: open(test_file, "a").write("# changed"))
probe("delete_test_file", lambda: os.unlink(test_file))
probe("rename_test_dir", lambda: os.rename(os.path.dirname(test_file), "/testbed/moved"))
probe("create_beside_tests", lambda: open(os.path.join(os.path.dirname(test_file), "out.txt"), "w").write("x"))
probe("create_at_root", lambda: os.makedirs("/testbed/result_images/x"))
probe("write_git", lambda: open("/testbed/.git/config", "a").write("x"))
probe("write_test_patch", lambda: open("/tmp/swerl-grade/test.patch", "a").write("x"))
probe("create_in_grading_folder", lambda: open("/tmp/swerl-grade/forged", "w").write("x"))
probe("list_evidence", lambda: os.listdir("/tmp/swerl-grade/evidence-t"))
probe("signal_runner", lambda: os.kill(int(runner), 0))
probe("write_runner_output", lambda: open(f"/proc/{runner}/fd/1", "w").write("forged"))
probe("home", lambda: open(os.path.expanduser("~/.cache-probe"), "w").write("x"))
print("user", os.getuid(), os.getgroups(), os.environ["HOME"], os.environ["USER"])
"""


def test_the_tests_user_can_create_files_but_reach_nothing_of_roots(demo_tasks, demo_images, run_id):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    test_file = "/testbed/" + task.FAIL_TO_PASS[0].split("::")[0]
    lockdown = json.dumps({"root": "/testbed", "uid": UID, "home": "/tmp/swerl-home-t", "evidence": "/tmp/swerl-grade/evidence-t"})
    files = {HELPER: (test_user_source(), 0o644), "/tmp/swerl-grade/test.patch": (b"patch", 0o644),
             "/tmp/swerl-grade/probes.py": (PROBES.encode(), 0o644)}
    config = DockerSandboxConfig(run_id=run_id, sweep_after_exec=True)
    with DockerSandbox(demo_images[task.instance_id], config, preload=files) as box:
        setup = box.exec(f'"$SWERL_PYTHON" -I -S {HELPER} lockdown {shlex.quote(lockdown)}', timeout=60)
        assert setup.exit_code == 0, setup.output
        run = box.exec(f'"$SWERL_PYTHON" -I -S {HELPER} run /testbed {UID} /tmp/swerl-home-t -- "$SWERL_PYTHON" '
                       f'/tmp/swerl-grade/probes.py {shlex.quote(test_file)}', timeout=60)
        assert run.exit_code == 0, run.output
        *lines, audit = run.output.strip().splitlines()
        assert audit == "@@swerl-audit {}"  # a folder and a text file: nothing that changes how tests run
        results = dict(line.split(" ", 1) for line in lines)
        assert results == {
            "write_test_file": "EACCES", "delete_test_file": "EPERM", "rename_test_dir": "EPERM",
            "create_beside_tests": "ok", "create_at_root": "ok", "write_git": "EACCES", "write_test_patch": "EACCES",
            "create_in_grading_folder": "EACCES", "list_evidence": "EACCES", "signal_runner": "EPERM",
            "write_runner_output": "EACCES", "home": "ok", "user": f"{UID} [] /tmp/swerl-home-t swerl-test",
        }
        # what the tests created is theirs, and the audit finds the planted kind only
        planted = box.exec(f'"$SWERL_PYTHON" -I -S {HELPER} run /testbed {UID} /tmp/swerl-home-t -- '
                           f'sh -c "echo x > /testbed/pytest.ini; echo x > /testbed/notes.txt; exit 3"', timeout=60)
        assert planted.output.strip().splitlines()[-1] == '@@swerl-audit {"pytest.ini": "configures the test runner"}'
        assert planted.exit_code == 3  # the command's own status
    assert running_containers(run_id) == []


def test_run_leaves_no_process_of_the_tests_user(demo_tasks, demo_images, run_id):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    lockdown = json.dumps({"root": "/testbed", "uid": UID, "home": "/tmp/h", "evidence": "/tmp/swerl-grade/ev"})
    config = DockerSandboxConfig(run_id=run_id)  # no sweep: the helper alone must do it
    with DockerSandbox(demo_images[task.instance_id], config, preload={HELPER: (test_user_source(), 0o644)}) as box:
        assert box.exec(f'"$SWERL_PYTHON" -I -S {HELPER} lockdown {shlex.quote(lockdown)}', timeout=60).exit_code == 0
        spawn = ("setsid env -i sh -c 'exec sleep 600' >/dev/null 2>&1 < /dev/null & "
                 "setsid env -i sh -c 'exec sleep 600' >/dev/null 2>&1 < /dev/null & sleep 0.5")
        # the two daemons are alive when the command returns; the helper kills them before it answers
        spawn += (f"; for p in /proc/[0-9]*; do [ \"$(stat -c %u $p)\" = {UID} ] && "
                  f"[ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && echo $p; done | wc -l")
        ran = box.exec(f'"$SWERL_PYTHON" -I -S {HELPER} run /testbed {UID} /tmp/h -- sh -c {shlex.quote(spawn)}', timeout=60)
        assert ran.output.strip().splitlines() == ["2", "@@swerl-audit {}"]
        left = box.exec(f"for p in /proc/[0-9]*; do [ \"$(stat -c %u $p)\" = {UID} ] && "
                        f"! grep -q '^State:.*Z' $p/status && echo $p; done | wc -l", timeout=30)
        assert left.output.strip() == "0", left.output
