"""The test user's side of grading, outside a container: which files the tests may not plant, and the
test command's wrapping (run as the user, events down fd 3 to a root-owned copy, nothing left after)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.grading.evidence import audit_verdict, timed_out_verdict
from swerl.grading.test_script import Isolation
from swerl.grading.test_user import audit, planted_reason


@pytest.mark.parametrize("path, planted", [
    ("conftest.py", True), ("pkg/tests/conftest.py", True), ("pytest.ini", True), (".pytest.toml", True),
    ("setup.cfg", True), ("src/sitecustomize.py", True), ("usercustomize/__init__.py", True), ("evil.pth", True),
    ("zz.egg-info/entry_points.txt", True), ("x.dist-info/METADATA", True),
    ("tests/__pycache__/test_a.cpython-311-pytest-8.3.4.pyc", True),
    ("result_images/test_plot/a.png", False), ("tests/output.txt", False), ("build/lib/pkg/mod.py", False),
    ("pkg/__pycache__/mod.cpython-311.pyc", False),
    ("apport_python_hook.py", True), ("src/apport_python_hook.py", True), ("shadow/__init__.py", True),
    ("src/shadow/__init__.py", True), ("pkg/new_module.py", False), ("out/data/__init__.py", False), ("notes.txt", False),
])
def test_what_the_tests_may_not_plant(path, planted):
    assert (planted_reason(path) is not None) == planted


def test_the_audit_lists_only_what_the_test_user_owns(tmp_path):
    (tmp_path / "conftest.py").write_text("")  # the current user's: as if root wrote it before the tests
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "conftest.py").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "conftest.py").write_text("")
    assert audit(str(tmp_path), os.getuid()) == {"conftest.py": "configures the test runner",
                                                  "pkg/conftest.py": "configures the test runner"}
    assert audit(str(tmp_path), os.getuid() + 4242) == {}


def test_the_test_command_runs_as_the_user_with_its_events_down_fd_3():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321)
    # the helper runs the command as the user, then (as root) kills what is left of theirs and audits /testbed
    assert iso.wrap(["pytest -rA tests/test_a.py", "echo done"], trace=True, workdir="/testbed") == [
        "cat /tmp/g/ev-1/channel > /tmp/g/ev-1/events & swerl_collector=$!",
        "\"$SWERL_PYTHON\" -I -S /tmp/g/u.py run /testbed 54321 /tmp/home-1 -- "
        "bash -c 'set -uxo pipefail\npytest -rA tests/test_a.py\necho done' 3>/tmp/g/ev-1/channel",
    ]
    assert iso.after() == ["wait $swerl_collector"]


def test_the_test_command_s_time_limit_goes_to_the_helper():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321, timeout_s=15.0)
    assert iso.wrap(["pytest"], trace=False, workdir="/testbed")[1] == (
        "\"$SWERL_PYTHON\" -I -S /tmp/g/u.py run /testbed 54321 /tmp/home-1 --timeout-s 15 -- bash -c pytest 3>/tmp/g/ev-1/channel")


HELPER = """
import sys
import swerl.grading.test_user as t
t.RUNNER = sys.argv.pop(1)  # the runner's source: where a grading sandbox has it, /opt/swerl
sys.exit(t.main(sys.argv))
"""


def helper_run(tmp_path, uid: int, timeout_s: str, command: str) -> subprocess.CompletedProcess:
    from swerl.envs import docker_sandbox

    runner = Path(docker_sandbox.__file__).parent / "resources" / "swerl_exec.py"
    return subprocess.run([sys.executable, "-c", HELPER, str(runner), "run", str(tmp_path), str(uid), str(tmp_path / "home"),
                           "--timeout-s", timeout_s, "--", "bash", "-c", command], capture_output=True, text=True, timeout=60)


def processes_of(uid: int) -> list[int]:
    from swerl.grading.test_user import _live_processes

    return _live_processes(uid)


@pytest.mark.skipif(os.getuid() != 0, reason="the helper drops to the test user only as root, as in a grading sandbox")
def test_at_the_limit_the_helper_kills_every_process_of_the_user_and_says_so_after_the_audit(tmp_path):
    uid = 60000 + os.getpid() % 5000  # a user no other process of this machine runs as
    out = helper_run(tmp_path, uid, "1.5", "setsid sleep 300 & sleep 300; echo never")
    lines = out.stdout.splitlines()
    assert (out.returncode, lines[-2:]) == (137, ['@@swerl-audit {}', "@@swerl-timed-out 1.5"])
    assert "never" not in out.stdout and processes_of(uid) == []  # the detached sleep too
    assert timed_out_verdict(out.stdout) and audit_verdict(out.stdout) == {}


@pytest.mark.skipif(os.getuid() != 0, reason="the helper drops to the test user only as root, as in a grading sandbox")
def test_a_command_within_its_limit_ends_with_its_own_status_and_no_timeout_line(tmp_path):
    uid = 60000 + os.getpid() % 5000
    out = helper_run(tmp_path, uid, "30", "echo '@@swerl-audit {}'; echo '@@swerl-timed-out 30'; exit 3")
    assert (out.returncode, out.stdout.splitlines()[-1]) == (3, "@@swerl-audit {}")
    assert not timed_out_verdict(out.stdout)  # a timeout line the tests print is not the helper's


def test_only_the_line_just_after_the_audit_s_last_line_says_the_tests_timed_out():
    audit = '@@swerl-audit {}'
    assert timed_out_verdict(f"tests\n{audit}\n@@swerl-timed-out 15\n>>>>> Test Exit Code: 137\n")
    assert not timed_out_verdict(f"@@swerl-timed-out 15\n{audit}\n")
    # a forged audit line and timeout line, then root's own audit line
    assert not timed_out_verdict(f"{audit}\n@@swerl-timed-out 15\n{audit}\n")
    assert not timed_out_verdict("@@swerl-timed-out 15\n")  # no audit: a sandbox without a test user


def test_without_a_test_user_the_events_still_go_down_the_pipe():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", None)
    assert iso.wrap(["pytest"], trace=False, workdir="/testbed")[1] == "bash -c pytest 3>/tmp/g/ev-1/channel"
    assert iso.after() == ["wait $swerl_collector"]


def test_a_published_script_runs_only_its_test_command_as_the_user():
    from swerl.data.task import Task
    from swerl.grading.test_script import published_script

    eval_script = ("#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\n"
                   "cd /testbed\ngit checkout abc1234 tests/test_a.py\ngit apply -v - <<'EOF_1'\n(patch)\nEOF_1\n"
                   ": '>>>>> Start Test Output'\npytest -rA tests/test_a.py\n: '>>>>> End Test Output'\n"
                   "git checkout abc1234 tests/test_a.py\n")
    task = Task.model_validate({"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc1234", "patch": "", "test_patch": "",
                                "problem_statement": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_x"], "PASS_TO_PASS": [],
                                "eval_script": eval_script, "image": "img"})
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321)
    text = published_script(task, [], iso, "/testbed").text
    wrapped = "\n".join(iso.wrap(["pytest -rA tests/test_a.py"], trace=True, workdir="/testbed"))
    tail = "\n".join([wrapped, "SWEBENCH_TEST_EXIT_CODE=$?", ": '>>>>> End Test Output'",
                      'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"', *iso.after(),
                      "git checkout abc1234 tests/test_a.py"])
    # the set-up (activation, checkout, test patch) and the reset run as root; only the test command as the user
    assert text.endswith(": '>>>>> Start Test Output'\n" + tail + "\n")
    assert text.count("pytest -rA") == 1 and text.index("git apply -v -") < text.index("Start Test Output")


def test_the_helper_finds_swerls_runner_where_docker_sandboxes_put_it():
    from swerl.envs.docker_sandbox import RUNNER
    from swerl.grading import test_user

    assert test_user.RUNNER == RUNNER  # killall runs the runner's own kill loop from there
