"""The parts a grading's plan is made of (grading/plan.py), each on its own: the agent's diff, the test files'
restore and test patch, who runs the tests, and where canaries are written (no Docker)."""

from __future__ import annotations

from swerl.data.task import Task
from swerl.grading.grader import GradingConfig
from swerl.grading.plan import WORK, _agent_patch, _canary_spec, _isolation, _test_steps
from swerl.grading.protected import task_scope
from swerl.grading.results import FailureClass, GradeResult

TEST_PATCH = ("diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n"
              "@@ -1 +1,2 @@\n x\n+y\n")
FIX = "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,1 +1,2 @@\n x\n+def fixed(): pass\n"
TASK = Task(instance_id="o__r-1", repo="o/r", base_commit="a" * 40, install_config={},
            FAIL_TO_PASS=["tests/test_a.py::test_fix"], PASS_TO_PASS=["tests/test_a.py::test_old"], test_patch=TEST_PATCH)


class Logs:
    def __init__(self):
        self.written: dict[str, str] = {}

    def write(self, name: str, text: str) -> None:
        self.written[name] = text


def agent(patch: str, config: GradingConfig | None = None):
    config = config or GradingConfig()
    result, logs = GradeResult(instance_id=TASK.instance_id, resolved=False), Logs()
    scope = task_scope(TASK, "pytest tests/test_a.py", config.protected, config.sandbox.workdir)
    return _agent_patch(TASK, patch, scope, config, result, logs, "n0nce"), result, logs


def test_the_agent_s_diff_is_applied_between_a_snapshot_and_the_guard():
    (files, steps, added), result, logs = agent(FIX)
    assert files == {f"{WORK}/agent.patch": (FIX, 0o644)} and logs.written["applied.diff"] == FIX
    assert [stage for stage, _ in steps] == ["snapshot", "apply", "guard"]
    assert steps[0][1] is steps[2][1] and steps[0][1]["scope"]["patch_paths"] == ["pkg/a.py"]
    assert added == {"pkg/a.py": ["fixed"]} and result.failure_class is None


def test_a_diff_whose_every_file_is_protected_needs_no_sandbox_unless_the_tests_run_anyway():
    planned, result, _ = agent(TEST_PATCH)
    assert planned is None and result.failure_class == FailureClass.NO_PATCH
    assert result.reason.startswith("every file of the patch was dropped: tests/test_a.py")
    planned, result, _ = agent(TEST_PATCH, GradingConfig(run_tests_without_patch=True))
    assert planned == ({}, [], {}) and result.failure_class == FailureClass.NO_PATCH


def test_a_diff_cut_short_of_its_newline_is_applied_as_published_unless_repairs_are_asked_for():
    (files, _, _), result, _ = agent(FIX[:-1])
    assert files[f"{WORK}/agent.patch"][0] == FIX[:-1] and result.repairs == []
    (files, _, _), result, _ = agent(FIX[:-1], GradingConfig(repair_patches=True))
    assert files[f"{WORK}/agent.patch"][0] == FIX and result.repairs == ["final newline"]


def test_what_is_not_a_diff_is_apply_failed():
    planned, result, _ = agent("not a diff\n")
    assert planned is None and result.failure_class == FailureClass.APPLY_FAILED


def test_the_test_files_are_restored_then_the_test_patch_applied_or_only_checked_for_a_published_script():
    config = GradingConfig()
    scope = task_scope(TASK, "pytest tests/test_a.py", config.protected, config.sandbox.workdir)
    files, steps = _test_steps(TASK, scope)
    assert files == {f"{WORK}/test.patch": (TEST_PATCH, 0o644)}
    assert [stage for stage, _ in steps] == ["restore", "test_patch"]
    assert "for f in tests/test_a.py; do" in steps[0][1] and f"git checkout -q {'a' * 40} --" in steps[0][1]
    assert steps[1][1] == f"git apply --verbose  {WORK}/test.patch"
    published = TASK.model_copy(update={"eval_script": "echo tests"})
    assert _test_steps(published, scope)[1][1][1] == f"git apply --verbose --check {WORK}/test.patch"


def test_the_tripwire_needs_the_test_user():
    on = _isolation(GradingConfig(), "n0nce")
    assert (on.uid, on.wire, on.evidence) == (54321, f"{WORK}/wire-n0nce", f"{WORK}/evidence-n0nce")
    assert (_isolation(GradingConfig(test_user=False), "n0nce").wire, _isolation(GradingConfig(tripwire=False), "x").wire) == (
        None, None)
    assert _isolation(GradingConfig(test_user=False), "n0nce").uid is None


def test_canaries_are_written_only_where_pytest_runs_whole_test_files():
    config, evidence = GradingConfig(), f"{WORK}/evidence-n0nce"
    spec = _canary_spec(TASK, config, "pytest -rA tests/test_a.py", evidence)
    assert spec is not None and (spec["targets"], spec["out"], spec["workdir"]) == (
        ["tests/test_a.py::test_fix"], f"{evidence}/canaries.json", config.sandbox.workdir)
    assert _canary_spec(TASK, config, "pytest tests/test_a.py::test_fix", evidence) is None
    assert _canary_spec(TASK, config, "pytest -k fix tests/test_a.py", evidence) is None
    assert _canary_spec(TASK, config, "./runtests.py", evidence) is None
    assert _canary_spec(TASK, GradingConfig(canaries=False), "pytest tests/test_a.py", evidence) is None
