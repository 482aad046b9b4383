"""How gold and empty gradings combine into a task verdict (no Docker)."""

from pathlib import Path

from swerl.data.task import Task
from swerl.grading.results import FailureClass, GradeResult, TestDetail
from swerl.grading.validate import verdict

TASK = Task(instance_id="o__r-1", repo="o/r", base_commit="b" * 40, install_config={}, FAIL_TO_PASS=["t.py::fix"], PASS_TO_PASS=["t.py::old"])


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


# --- the verdict cache -------------------------------------------------------------------------

def test_the_verdict_key_covers_task_image_runs_and_grading_but_not_grading_logs_or_run_id(tmp_path):
    from swerl.grading.grader import GradingConfig
    from swerl.grading.validate import ValidationConfig, verdict_key

    base = ValidationConfig(validate_runs=1)
    key = verdict_key(TASK, "img:1", base)
    assert len(key) == 64
    relabelled = ValidationConfig(validate_runs=1, grading=GradingConfig(run_tests_without_patch=True, grading_logs=tmp_path),
                                  cache_dir=tmp_path)
    relabelled.grading.sandbox.run_id = "validate-elsewhere"
    assert verdict_key(TASK, "img:1", relabelled) == key
    changed = [
        verdict_key(TASK.model_copy(update={"PASS_TO_PASS": ["t.py::other"]}), "img:1", base),
        verdict_key(TASK.model_copy(update={"patch": "diff"}), "img:1", base),
        verdict_key(TASK, "img:2", base),
        verdict_key(TASK, "img:1", ValidationConfig(validate_runs=2)),
        verdict_key(TASK, "img:1", ValidationConfig(validate_runs=1, grading=GradingConfig(run_tests_without_patch=True,
                                                                                  test_timeout_s=5))),
    ]
    assert len({key, *changed}) == 6


def test_the_verdict_cache_round_trips_and_treats_a_corrupt_entry_as_absent(tmp_path):
    from swerl.grading.validate import VerdictCache

    cache = VerdictCache(tmp_path)
    v = verdict(TASK, "img", [graded("PASSED")], graded("FAILED"))
    assert cache.get("ab" * 32) is None
    cache.put("ab" * 32, v)
    assert cache.get("ab" * 32) == v
    assert [p.name for p in (tmp_path / "ab").iterdir()] == ["ab" * 32 + ".json"]  # no temp file left behind
    (tmp_path / "ab" / ("ab" * 32 + ".json")).write_text('{"instance_id": ')
    assert cache.get("ab" * 32) is None


def test_the_default_cache_dir_follows_swerl_cache_dir(monkeypatch, tmp_path):
    from swerl.grading.validate import default_cache_dir

    monkeypatch.setenv("SWERL_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "validation"
    monkeypatch.delenv("SWERL_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "swerl" / "validation"
