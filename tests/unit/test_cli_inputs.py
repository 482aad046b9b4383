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
