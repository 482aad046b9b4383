"""The `swerl` command on bad input files, as a user runs it (a process of its own): a clean error naming
the file, exit 2, and nothing asked of Docker first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc1234", "patch": "", "test_patch": "",
        "problem_statement": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_x"], "PASS_TO_PASS": [], "install_config": {}}


def swerl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swerl.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "300", "DOCKER_HOST": "tcp://127.0.0.1:1"})


def test_a_missing_or_unreadable_predictions_file_is_a_clean_error(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    for predictions, why in ((tmp_path / "nope.jsonl", "No such file or directory"), (tmp_path, "Is a directory")):
        proc = swerl("grade", "--tasks", str(tasks), "--predictions", str(predictions), "--out", str(tmp_path / "r.jsonl"))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (f"error: predictions file {predictions} cannot be read ({why}); check the path and "
                                       "the working directory"), proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout


def test_every_command_reading_an_input_file_says_which_is_missing_with_exit_2(tmp_path):
    missing = tmp_path / "nope.jsonl"
    for args, message in [
        (("tasks", "validate", "--tasks", str(missing), "--out", str(tmp_path / "r.json")),
         f"error: task file not found: {missing} (check the path and the working directory)"),
        (("images", "build", "--tasks", str(missing)),
         f"error: task file not found: {missing} (check the path and the working directory)"),
        (("pipeline", "run", "--params", str(missing)), f"error: --params {missing}: no such file"),
        # before any server is looked for
        (("pipeline", "start", "--params", str(missing)), f"error: --params {missing}: no such file"),
    ]:
        proc = swerl(*args)
        assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, message), (args, proc.stderr)
