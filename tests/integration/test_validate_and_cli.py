"""The CLI contract (`swerl tasks validate`, `swerl grade`), demo validation, and bad inputs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.envs import labels
from swerl.envs.docker_client import docker_client
from swerl.grading.grader import GradingConfig, grade_prediction
from swerl.grading.results import FailureClass
from swerl.grading.validate import ValidationConfig, validate_tasks

pytestmark = pytest.mark.docker
SWERL = [sys.executable, "-m", "swerl.cli"]


def containers_of(pid: int) -> list[str]:
    """Sandboxes the process ``pid`` of this host started that are still there: other work shares
    the daemon, and a pid alone may be another host's (sparse: a full listing fails when a
    container removes itself while it is inspected)."""
    owner = [f"{labels.OWNER_PID}={pid}", f"{labels.OWNER_HOST}={socket.gethostname()}", f"{labels.KIND}=sandbox"]
    return [c.attrs["Names"][0].lstrip("/") for c in docker_client().containers.list(all=True, sparse=True, filters={"label": owner})]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # its own verdict cache: verdicts another command cached would make this one grade nothing
    env = {**os.environ, "SWERL_CACHE_DIR": str(cwd / "swerl-cache")}
    with subprocess.Popen([*SWERL, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=1500)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid  # type: ignore[attr-defined]
    return done


def test_validate_reports_every_demo_gold_resolved_and_every_empty_unresolved(demo, demo_images, tmp_path):
    proc = run_cli("tasks", "validate", "--tasks", str(demo.tasks_file), "--repos", str(demo.repos_dir),
                   "--runs", "2", "--out", str(tmp_path / "report.json"), "--log-dir", str(tmp_path / "logs"), "-j", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["total"], report["valid"], report["invalid"], report["runs"]) == (len(demo.instance_ids),) * 2 + (0, 2)
    for verdict in report["tasks"]:
        assert (verdict["gold_resolved"], verdict["empty_resolved"], verdict["flaky_tests"]) == ([True, True], False, [])
        assert verdict["fail_to_pass_failing_without_fix"]
    # one fresh container per grading: 3 gradings per task, each with its own log folder
    logs = sorted(p.parent.name for p in (tmp_path / "logs" / "validate").glob("*/*/result.json"))
    assert len(logs) == 3 * len(demo.instance_ids)
    assert containers_of(proc.pid) == []


def test_grade_cli_grades_good_lines_and_refuses_bad_ones_by_line_number(demo, demo_tasks, demo_images, tmp_path):
    tasks = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[:2]
    preds = tmp_path / "preds.jsonl"
    lines = [
        json.dumps({"instance_id": tasks[0].instance_id, "model_name_or_path": "gold", "model_patch": tasks[0].patch}),
        "{this is not json",
        json.dumps({"instance_id": tasks[1].instance_id, "model_name_or_path": "m", "model_patch": "not a diff"}),
        json.dumps({"model_name_or_path": "m", "model_patch": ""}),
        json.dumps({"instance_id": "nobody__nothing-1", "model_name_or_path": "m", "model_patch": ""}),
        json.dumps({"instance_id": tasks[1].instance_id, "model_name_or_path": "m", "model_patch": None}),
        json.dumps({"instance_id": tasks[1].instance_id, "model_name_or_path": "m", "patch": tasks[1].patch}),
    ]
    preds.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    args = ("grade", "--tasks", str(demo.tasks_file), "--predictions", str(preds), "--repos", str(demo.repos_dir),
            "--out", str(out), "--log-dir", str(tmp_path / "logs"))
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{preds} line 2: not valid JSON" in proc.stderr
    assert f"{preds} line 4: bad or missing field(s) instance_id" in proc.stderr
    assert f"{preds} line 5: instance_id 'nobody__nothing-1' is not in the task file" in proc.stderr
    assert f"{preds} line 7: has 'patch' but no 'model_patch'" in proc.stderr
    assert "4 bad prediction line(s) were skipped" in proc.stderr and "--skip-invalid" in proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    got = [(r["instance_id"], r["resolved"], r["failure_class"]) for r in rows]
    assert got == [
        (tasks[0].instance_id, True, None),
        (tasks[1].instance_id, False, "apply_failed"),
        (tasks[1].instance_id, False, "no_patch"),
    ]
    proc = run_cli(*args, "--skip-invalid", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{preds} line 7: has 'patch' but no 'model_patch'" in proc.stderr


def test_grade_and_validate_exit_non_zero_naming_a_broken_task(demo, demo_tasks, demo_images, tmp_path):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    ghost = "diff --git a/tests/ghost.py b/tests/ghost.py\n--- a/tests/ghost.py\n+++ b/tests/ghost.py\n@@ -1 +1 @@\n-a\n+b\n"
    broken = task.model_copy(update={"test_patch": ghost + task.test_patch})  # changes a file that does not exist
    tasks_file = tmp_path / "broken.jsonl"
    tasks_file.write_text(json.dumps(broken.to_record()) + "\n")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": task.instance_id, "model_name_or_path": "gold", "model_patch": task.patch}) + "\n")
    proc = run_cli("grade", "--tasks", str(tasks_file), "--predictions", str(preds), "--repos", str(demo.repos_dir),
                   "--out", str(tmp_path / "results.jsonl"), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "task_broken in 1 prediction(s)" in proc.stderr and f"{task.instance_id}: the task's test patch does not apply" in proc.stderr
    proc = run_cli("tasks", "validate", "--tasks", str(tasks_file), "--repos", str(demo.repos_dir), "--runs", "1",
                   "--no-cache", "--out", str(tmp_path / "report.json"), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]  # an invalid task: a verdict about the task, not infrastructure
    verdict = json.loads((tmp_path / "report.json").read_text())["tasks"][0]
    assert (verdict["valid"], verdict["infra_error"]) == (False, False)
    assert "task_broken: the task's test patch does not apply" in verdict["reason"]


def test_a_bad_task_file_is_a_clear_error_naming_line_and_field(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc1234", "FAIL_TO_PASS": 7}\n{oops\n')
    proc = run_cli("tasks", "validate", "--tasks", str(bad), "--out", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "line 1 (instance_id=a__b-1): FAIL_TO_PASS" in proc.stderr and "line 2" in proc.stderr
    assert "line 1 (instance_id=a__b-1): install_config: missing, and the record has no eval_script either" in proc.stderr
    assert "--skip-invalid" in proc.stderr


def test_a_missing_test_carries_its_collection_error_in_the_reason_and_the_log(demo_tasks, demo_images, tmp_path):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    broken_module = ("diff --git a/tests/test_ghost_import.py b/tests/test_ghost_import.py\nnew file mode 100644\n"
                     "--- /dev/null\n+++ b/tests/test_ghost_import.py\n@@ -0,0 +1,5 @@\n+import no_such_module_anywhere\n+\n+\n"
                     "+def test_x():\n+    pass\n")
    bad = task.model_copy(update={"test_patch": task.test_patch + broken_module,
                                  "FAIL_TO_PASS": [*task.FAIL_TO_PASS, "tests/test_ghost_import.py::test_x"]})
    res = grade_prediction(bad, bad.patch, demo_images[task.instance_id], GradingConfig(grading_logs=tmp_path))
    assert (res.resolved, res.failure_class) == (False, FailureClass.TESTS_FAILED)
    assert res.tests["tests/test_ghost_import.py::test_x"].status == "MISSING"
    assert "collection errors: tests/test_ghost_import.py:" in res.reason
    assert "No module named 'no_such_module_anywhere'" in res.reason
    log = (Path(res.log_dir) / "test_output.txt").read_text()
    assert "ModuleNotFoundError: No module named 'no_such_module_anywhere'" in log  # --tb=short keeps the traceback


def test_fail_to_pass_naming_a_test_that_does_not_exist_makes_the_task_invalid(demo_tasks, demo_images):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    ghost = task.FAIL_TO_PASS[0].split("::")[0] + "::test_that_does_not_exist"
    bad = task.model_copy(update={"FAIL_TO_PASS": [*task.FAIL_TO_PASS, ghost]})
    report = validate_tasks([bad], {bad.instance_id: demo_images[task.instance_id]}, ValidationConfig(validate_runs=1))
    (verdict,) = report.tasks
    assert verdict.valid is False
    assert f"tests not found in the log: {ghost}" in verdict.reason


def test_an_unknown_log_parser_is_a_broken_task_naming_it(demo_tasks, demo_images):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    bad = task.model_copy(update={"install_config": task.install_config.model_copy(update={"log_parser": "parse_log_nope"})})
    res = grade_prediction(bad, bad.patch, demo_images[task.instance_id], GradingConfig())
    assert (res.resolved, res.failure_class, res.attempts) == (False, FailureClass.TASK_BROKEN, 1)
    assert res.reason.startswith("unknown log parser 'parse_log_nope' in install_config.log_parser")


def test_a_missing_image_is_an_infra_error_not_the_agents_failure(demo_tasks):
    task = next(iter(demo_tasks.values()))
    res = grade_prediction(task, task.patch, "swerl-nowhere/nothing:1", GradingConfig(infra_retries=1))
    assert (res.resolved, res.failure_class, res.attempts) == (False, FailureClass.INFRA_ERROR, 2)
    assert "cannot start a container from swerl-nowhere/nothing:1" in res.reason


def test_a_broken_test_patch_is_a_broken_task_never_retried(demo_tasks, demo_images):
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    ghost = "diff --git a/tests/ghost.py b/tests/ghost.py\n--- a/tests/ghost.py\n+++ b/tests/ghost.py\n@@ -1 +1 @@\n-a\n+b\n"
    bad = task.model_copy(update={"test_patch": ghost + task.test_patch})
    res = grade_prediction(bad, bad.patch, demo_images[task.instance_id], GradingConfig())
    assert (res.failure_class, res.attempts) == (FailureClass.TASK_BROKEN, 1)
    assert "the task's test patch does not apply to base_commit" in res.reason


def test_validation_verdicts_are_cached_by_content_and_infra_errors_are_not(demo_tasks, demo_images, tmp_path):
    good, other = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[:2]
    images = {good.instance_id: demo_images[good.instance_id], other.instance_id: "swerl-no-such-image:missing"}
    config = ValidationConfig(validate_runs=1, cache_dir=tmp_path / "cache")
    graded: list[str] = []
    first = validate_tasks([good, other], images, config, progress=lambda r: graded.append(r.instance_id))
    assert sorted(graded) == sorted([good.instance_id] * 2 + [other.instance_id] * 2)
    assert [v.valid for v in first.tasks] == [True, False] and first.cached == 0

    graded.clear()
    again = validate_tasks([good, other], images, config, progress=lambda r: graded.append(r.instance_id))
    assert graded == [other.instance_id] * 2  # the infra-error verdict was not cached: graded again
    assert again.cached == 1 and again.tasks[0] == first.tasks[0]

    graded.clear()
    edited = good.model_copy(update={"PASS_TO_PASS": good.PASS_TO_PASS[:-1]})
    validate_tasks([edited], images, config, progress=lambda r: graded.append(r.instance_id))
    assert graded == [good.instance_id] * 2  # a changed task record is a new verdict
