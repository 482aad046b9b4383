"""Resolution rules, decided from the parsed log and pytest's own report (no Docker)."""

from swerl.data.task import Task
from swerl.grading.grader import judge, select_test_files

TASK = Task(
    instance_id="o__r-1", repo="o/r", base_commit="a" * 40,
    FAIL_TO_PASS=["tests/test_a.py::test_fix"], PASS_TO_PASS=["tests/test_a.py::test_old", "tests/test_b.py::test_other"],
    test_patch="diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1,2 @@\n x\n+y\n",
)
ALL_PASS = {"tests/test_a.py::test_fix": "PASSED", "tests/test_a.py::test_old": "PASSED", "tests/test_b.py::test_other": "PASSED"}
REPORT = {"complete": True, "tests": dict(ALL_PASS)}


def test_every_listed_test_passing_resolves():
    tests, resolved, reason, valid = judge(TASK, ALL_PASS, REPORT, 0, True)
    assert (resolved, valid, reason) == (True, True, "all FAIL_TO_PASS and PASS_TO_PASS tests pass")
    assert tests["tests/test_a.py::test_fix"].expected == "FAIL_TO_PASS"


def test_a_failing_pass_to_pass_test_does_not_resolve():
    statuses = {**ALL_PASS, "tests/test_b.py::test_other": "FAILED"}
    _, resolved, reason, valid = judge(TASK, statuses, {"complete": True, "tests": statuses}, 1, True)
    assert (resolved, valid) == (False, True)
    assert reason == "1 test(s) not passing: tests/test_b.py::test_other (FAILED)"


def test_a_missing_test_counts_as_failing():
    statuses = {k: v for k, v in ALL_PASS.items() if "fix" not in k}
    tests, resolved, _, _ = judge(TASK, statuses, {"complete": True, "tests": statuses}, 0, True)
    assert resolved is False and tests["tests/test_a.py::test_fix"].status == "MISSING"


def test_a_skipped_test_counts_as_failing():
    statuses = {**ALL_PASS, "tests/test_a.py::test_fix": "SKIPPED"}
    tests, resolved, _, _ = judge(TASK, statuses, {"complete": True, "tests": statuses}, 0, True)
    assert resolved is False and tests["tests/test_a.py::test_fix"].passed is False


def test_xfail_counts_as_passing_like_swebench():
    statuses = {**ALL_PASS, "tests/test_a.py::test_old": "XFAIL"}
    assert judge(TASK, statuses, {"complete": True, "tests": statuses}, 0, True)[1] is True


def test_forged_passed_line_disagreeing_with_pytest_report_is_invalid():
    report = {"complete": True, "tests": {**ALL_PASS, "tests/test_a.py::test_fix": "FAILED"}}
    _, resolved, reason, valid = judge(TASK, ALL_PASS, report, 1, True)
    assert (resolved, valid) == (False, False)
    assert "log says tests/test_a.py::test_fix PASSED but pytest recorded FAILED" in reason


def test_missing_pytest_report_is_invalid():
    _, resolved, reason, valid = judge(TASK, ALL_PASS, None, 0, True)
    assert (resolved, valid) == (False, False)
    assert reason.startswith("pytest's own report is missing")


def test_nonzero_exit_with_no_failure_in_log_is_invalid():
    _, resolved, reason, valid = judge(TASK, ALL_PASS, REPORT, 3, True)
    assert (resolved, valid, reason) == (False, False, "test command exited 3 while the log shows no failure")


def test_non_pytest_commands_are_judged_on_the_log_alone():
    assert judge(TASK, ALL_PASS, None, 0, False)[1] is True


def test_targets_are_test_patch_files_plus_files_of_listed_tests():
    assert select_test_files(TASK) == ["tests/test_a.py", "tests/test_b.py"]
