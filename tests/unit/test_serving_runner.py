"""swerl's runner serving requests on its stdin, as an agent sandbox's own command: it answers each line, ends at
end-of-file, ends after its lifetime, and leaves out of a command's environment how the sandbox started it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import swerl.envs

RUNNER = Path(swerl.envs.__file__).parent / "resources" / "swerl_exec.py"


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-I", "-S", "-u", str(RUNNER), "--serve", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_each_line_is_answered_and_end_of_file_ends_the_runner_though_its_lifetime_has_not_passed():
    runner = serve("600")
    request = {"cmd": "echo hi", "timeout": 10, "limit": 1000, "tag": "t1"}
    out, _ = runner.communicate(json.dumps(request) + "\n", timeout=30)
    answer = json.loads(out.splitlines()[-1])
    assert (answer["tag"], answer["exit_code"], answer["output"]) == ("t1", 0, "hi\n")
    assert runner.returncode == 0


def test_a_runner_with_a_lifetime_ends_when_it_passes_while_its_stdin_stays_open():
    runner = serve("0.5")
    assert runner.wait(timeout=30) == 0
    runner.stdin.close()


def test_the_variables_that_started_the_runner_are_not_passed_to_commands():
    runner = serve(env={"PATH": "/usr/bin:/bin", "SANDBOX_INIT": "x", "SANDBOX_RUNNER": "y", "KEPT": "z"})
    request = {"cmd": "env | grep -E '^(SANDBOX_|KEPT)' | sort", "timeout": 10, "limit": 1000, "tag": "t2"}
    out, _ = runner.communicate(json.dumps(request) + "\n", timeout=30)
    assert json.loads(out.splitlines()[-1])["output"] == "KEPT=z\n"
