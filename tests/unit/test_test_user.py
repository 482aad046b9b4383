"""The test user's side of grading, outside a container: which files the tests may not plant, the test
command's wrapping (run as the user, events down fd 3 to a root-owned copy), nothing of theirs left after
(zombie leaders with live threads included), and root's findings in a file only root reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert audit(str(tmp_path), os.getuid(), outside=()) == {"conftest.py": "configures the test runner",
                                                              "pkg/conftest.py": "configures the test runner"}
    assert audit(str(tmp_path), os.getuid() + 4242, outside=()) == {}


def test_the_audit_sees_bytecode_anywhere_and_start_up_files_outside_the_repository(tmp_path):
    repo, home, scratch = tmp_path / "repo", tmp_path / "home", tmp_path / "tmp"
    for folder in (repo / "pkg" / "__pycache__", home / "cache" / "x", scratch / "pytest-of-u" / "t0"):
        folder.mkdir(parents=True)
    (repo / "pkg" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"")  # a plain one, not pytest's
    (home / "sitecustomize.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("")
    mirror = home / "cache" / "x" / str(repo / "pkg").lstrip("/")  # a PYTHONPYCACHEPREFIX tree over the repository
    mirror.mkdir(parents=True)
    (mirror / "mod.cpython-311.pyc").write_bytes(b"")
    (scratch / "evil.pth").write_text("")
    # what pytest's own tests (and pytester's) make: allowed
    (scratch / "pytest-of-u" / "t0" / "conftest.py").write_text("")
    (scratch / "pytest-of-u" / "t0" / "c.py").write_text("")
    (scratch / "pytest-of-u" / "t0" / "c.pyc").write_bytes(b"")
    (scratch / "pytest-of-u" / "t0" / "__pycache__").mkdir()
    (scratch / "pytest-of-u" / "t0" / "__pycache__" / "c.cpython-311.pyc").write_bytes(b"")
    found = audit(str(repo), os.getuid(), str(home), outside=(str(scratch),))
    assert found == {
        "pkg/__pycache__/test_a.cpython-311.pyc": "bytecode the tests wrote (an import would load it in place of the source)",
        f"{mirror}/mod.cpython-311.pyc": f"bytecode over {repo}/pkg/mod.py laid out as a pycache-prefix tree",
        f"{home}/sitecustomize.py": "a start-up hook or packaging metadata outside the repository",
        f"{scratch}/evil.pth": "a start-up hook or packaging metadata outside the repository",
    }


def test_the_test_command_runs_as_the_user_with_its_events_down_fd_3():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321)
    # the helper runs the command as the user, then (as root) kills what is left of theirs and audits /testbed
    assert iso.wrap(["pytest -rA tests/test_a.py", "echo done"], trace=True, workdir="/testbed") == [
        "cat /tmp/g/ev-1/channel > /tmp/g/ev-1/events & swerl_collector=$!",
        "\"$SWERL_PYTHON\" -I -S /tmp/g/u.py run /testbed 54321 /tmp/home-1 --evidence /tmp/g/ev-1 -- "
        "bash -c 'set -uxo pipefail\npytest -rA tests/test_a.py\necho done' 3>/tmp/g/ev-1/channel",
    ]
    assert iso.after() == ["wait $swerl_collector"]


def test_the_test_command_s_time_limit_goes_to_the_helper():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321, timeout_s=15.0, wire="/tmp/g/wire-1")
    assert iso.wrap(["pytest"], trace=False, workdir="/testbed")[1] == (
        "\"$SWERL_PYTHON\" -I -S /tmp/g/u.py run /testbed 54321 /tmp/home-1 --timeout-s 15 --evidence /tmp/g/ev-1 "
        "--wire /tmp/g/wire-1 -- bash -c pytest 3>/tmp/g/ev-1/channel")


def helper_run(tmp_path, uid: int, timeout_s: str, command: str) -> tuple[subprocess.CompletedProcess, dict]:
    evidence = tmp_path / "evidence"
    evidence.mkdir(mode=0o700)
    out = subprocess.run([sys.executable, "-m", "swerl.grading.test_user", "run", str(tmp_path), str(uid),
                          str(tmp_path / "home"), "--timeout-s", timeout_s, "--evidence", str(evidence), "--", "bash", "-c",
                          command], capture_output=True, text=True, timeout=60)
    return out, json.loads((evidence / "finish.json").read_text())


def processes_of(uid: int) -> list[int]:
    from swerl.grading.test_user import _live_processes

    return _live_processes(uid)


@pytest.mark.skipif(os.getuid() != 0, reason="the helper drops to the test user only as root, as in a grading sandbox")
def test_at_the_limit_the_helper_kills_every_process_of_the_user_and_says_so_in_root_s_file(tmp_path):
    uid = 60000 + os.getpid() % 5000  # a user no other process of this machine runs as
    out, found = helper_run(tmp_path, uid, "1.5", "setsid sleep 300 & sleep 300; echo never")
    assert (out.returncode, found) == (137, {"timed_out": True, "status": 137, "audit": {}, "tripwire": ""})
    assert "never" not in out.stdout and processes_of(uid) == []  # the detached sleep too


@pytest.mark.skipif(os.getuid() != 0, reason="the helper drops to the test user only as root, as in a grading sandbox")
def test_lines_the_tests_print_are_not_root_s_findings(tmp_path):
    uid = 60000 + os.getpid() % 5000
    out, found = helper_run(tmp_path, uid, "30", "echo '@@swerl-audit {}'; echo '@@swerl-timed-out 30'; exit 3")
    assert (out.returncode, found["timed_out"], found["status"]) == (3, False, 3)


# the main thread exits (the process shows as a zombie) while a second thread lives on, then writes
ZOMBIE_LEADER = ("import os, threading, time\n"
                 "def later():\n"
                 "    time.sleep(2)\n"
                 "    open(os.environ['OUT'], 'w').write('survived')\n"
                 "threading.Thread(target=later).start()\n"
                 "import ctypes\n"
                 "ctypes.CDLL(None).pthread_exit(None)\n")


@pytest.mark.skipif(os.getuid() != 0, reason="the helper drops to the test user only as root, as in a grading sandbox")
def test_a_zombie_leader_with_a_live_thread_is_killed_with_everything_else(tmp_path):
    uid = 60000 + os.getpid() % 5000
    out_file = tmp_path / "out" / "survived.txt"
    out_file.parent.mkdir()
    os.chmod(out_file.parent, 0o777)
    script = tmp_path / "zombie.py"
    script.write_text(ZOMBIE_LEADER)
    command = f"OUT={out_file} {sys.executable} {script} & sleep 0.5; exit 0"
    out, found = helper_run(tmp_path, uid, "30", command)
    assert (out.returncode, found["status"]) == (0, 0)
    import time

    time.sleep(2.5)
    assert not out_file.exists() and processes_of(uid) == []


def test_without_a_test_user_the_events_still_go_down_the_pipe():
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", None)
    assert iso.wrap(["pytest"], trace=False, workdir="/testbed")[1] == "bash -c pytest 3>/tmp/g/ev-1/channel"
    assert iso.after() == ["wait $swerl_collector"]


def published_task(eval_script: str):
    from swerl.data.task import Task

    return Task.model_validate({"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc1234", "patch": "", "test_patch": "",
                                "problem_statement": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_x"], "PASS_TO_PASS": [],
                                "eval_script": eval_script, "image": "img"})


def test_a_published_script_runs_only_its_test_command_as_the_user():
    from swerl.grading.test_script import published_script

    eval_script = ("#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\n"
                   "cd /testbed\ngit checkout abc1234 tests/test_a.py\ngit apply -v - <<'EOF_1'\n(patch)\nEOF_1\n"
                   ": '>>>>> Start Test Output'\npytest -rA tests/test_a.py\n: '>>>>> End Test Output'\n"
                   "git checkout abc1234 tests/test_a.py\n")
    task = published_task(eval_script)
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321)
    text = published_script(task, [], iso, "/testbed", []).text
    wrapped = "\n".join(iso.wrap(["pytest -rA tests/test_a.py"], trace=True, workdir="/testbed"))
    tail = "\n".join([wrapped, "SWEBENCH_TEST_EXIT_CODE=$?", ": '>>>>> End Test Output'",
                      'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"', *iso.after(),
                      "git checkout abc1234 tests/test_a.py"])
    # the set-up (activation, checkout, test patch) and the reset run as root; only the test command as the user
    assert text.endswith(": '>>>>> Start Test Output'\n" + tail + "\n")
    assert text.count("pytest -rA") == 1 and text.index("git apply -v -") < text.index("Start Test Output")


def test_after_a_set_up_run_as_the_user_nothing_of_theirs_is_left_outside_the_repository(tmp_path):
    from swerl.grading.test_user import clear_outside

    uid = 54329
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    for folder in (home / ".cache" / "pip", scratch / "pip-uninstall-x"):
        folder.mkdir(parents=True)
    (home / ".cache" / "pip" / "a.whl").write_text("wheel")
    (scratch / "pip-uninstall-x" / "__editable__.pkg.pth").write_text("import evil")
    (scratch / "planted.pth").write_text("import evil")
    (scratch / "root-s.txt").write_text("root's")
    (scratch / "link").symlink_to("/etc")
    for path in (home, home / ".cache", home / ".cache" / "pip", home / ".cache" / "pip" / "a.whl",
                 scratch / "pip-uninstall-x", scratch / "pip-uninstall-x" / "__editable__.pkg.pth", scratch / "planted.pth"):
        os.chown(path, uid, uid)
    os.lchown(scratch / "link", uid, uid)
    clear_outside(uid, str(home), (str(scratch),))
    # the user's entries are gone (a link removed, never followed); root's stay; the home is fresh
    assert sorted(p.name for p in scratch.iterdir()) == ["root-s.txt"] and Path("/etc/passwd").exists()
    assert sorted(p.name for p in home.iterdir()) == [".gitconfig"] and home.stat().st_uid == uid
    assert (home / ".gitconfig").read_text() == "[safe]\n\tdirectory = *\n"


def test_a_published_script_s_install_runs_as_the_user_and_its_checkout_as_root():
    from swerl.grading.test_script import published_script

    eval_script = ("#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\n"
                   "cd /testbed\npython -m pip install -e .\ngit checkout abc1234 tests/test_a.py\n"
                   "git apply -v - <<'EOF_1'\n(patch)\nEOF_1\n"
                   ": '>>>>> Start Test Output'\npytest -rA tests/test_a.py\n: '>>>>> End Test Output'\n")
    task = published_task(eval_script)
    iso = Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", 54321, timeout_s=60)
    text = published_script(task, [], iso, "/testbed", []).text
    install = ('mkdir -p -m 700 /tmp/g/ev-1/set-up\n"$SWERL_PYTHON" -I -S /tmp/g/u.py run /testbed 54321 /tmp/home-1 '
               "--timeout-s 60 --evidence /tmp/g/ev-1/set-up --clear-outside 1 -- bash -c 'set -uxo pipefail\n"
               "python -m pip install -e .'\n")
    assert ("conda activate testbed\ncd /testbed\n" + install + "git checkout abc1234 tests/test_a.py\n"
            "git apply -v - <<'EOF_1'\n") in text
    # without a test user (a layer tested alone) the set-up is as published
    plain = published_script(task, [], Isolation("/tmp/g/u.py", "/tmp/g/ev-1", "/tmp/home-1", None), "/testbed", []).text
    assert "cd /testbed\npython -m pip install -e .\ngit checkout" in plain
