"""How gold and empty gradings combine into a task verdict (no Docker)."""

from swerl.data.task import Task
from swerl.grading.results import FailureClass, GradeResult, TestDetail
from swerl.grading.validate import verdict

TASK = Task(instance_id="o__r-1", repo="o/r", base_commit="b" * 40, FAIL_TO_PASS=["t.py::fix"], PASS_TO_PASS=["t.py::old"])


def graded(fix: str, old: str = "PASSED", cls: FailureClass | None = None) -> GradeResult:
    ok = fix == "PASSED" and old == "PASSED"
    return GradeResult(
        instance_id="o__r-1", resolved=ok and cls is None, failure_class=None if ok and cls is None else (cls or FailureClass.TESTS_FAILED),
        tests={"t.py::fix": TestDetail(expected="FAIL_TO_PASS", status=fix, passed=fix == "PASSED"),
               "t.py::old": TestDetail(expected="PASS_TO_PASS", status=old, passed=old == "PASSED")},
    )


def test_gold_always_resolving_and_empty_failing_is_valid():
    v = verdict(TASK, "img", [graded("PASSED")] * 3, graded("FAILED"))
    assert (v.valid, v.reason, v.gold_resolved, v.empty_resolved) == (True, "gold resolved 3/3, empty unresolved", [True] * 3, False)
    assert v.fail_to_pass_failing_without_fix == ["t.py::fix"]


def test_a_test_changing_status_between_gold_runs_is_flaky():
    v = verdict(TASK, "img", [graded("PASSED"), graded("PASSED", old="FAILED"), graded("PASSED")], graded("FAILED"))
    assert v.valid is False and v.flaky_tests == ["t.py::old"]
    assert v.reason.endswith("flaky tests: t.py::old")


def test_an_empty_patch_that_resolves_means_the_tests_do_not_test_the_fix():
    v = verdict(TASK, "img", [graded("PASSED")], graded("PASSED"))
    assert (v.valid, v.reason) == (False, "the empty patch resolves the task: its tests do not test the fix")


def test_a_missing_fail_to_pass_test_is_named():
    v = verdict(TASK, "img", [graded("MISSING")], graded("MISSING"))
    assert v.valid is False and "tests not found in the log: t.py::fix" in v.reason


def test_a_failed_image_build_makes_the_task_invalid_with_the_build_error():
    v = verdict(TASK, None, [], None, build_error="building swerl-instance:x failed: exit 3\nmore")
    assert (v.valid, v.reason) == (False, "image build failed: building swerl-instance:x failed: exit 3")


def test_infrastructure_errors_are_reported_as_such():
    v = verdict(TASK, "img", [graded("MISSING", cls=FailureClass.INFRA_ERROR)], graded("FAILED"))
    assert v.valid is False and v.reason.startswith("infrastructure error")
