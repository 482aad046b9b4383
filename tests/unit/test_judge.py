"""Resolution rules: swebench's grading on the log, pytest's own report on top (no Docker)."""

from swerl.data.task import Task
from swerl.grading.plan import select_test_files
from swerl.grading.judge import Judgement, _reason, canary_problems, judge
from swerl.grading.log_parsers import get_log_parser
from swerl.grading.results import TestDetail
from swerl.grading.test_ids import group_by_parser_form, lookup, parser_form

TASK = Task(
    instance_id="o__r-1", repo="o/r", base_commit="a" * 40, install_config={},
    FAIL_TO_PASS=["tests/test_a.py::test_fix"], PASS_TO_PASS=["tests/test_a.py::test_old", "tests/test_b.py::test_other"],
    test_patch="diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1,2 @@\n x\n+y\n",
)
ALL_PASS = {"tests/test_a.py::test_fix": "PASSED", "tests/test_a.py::test_old": "PASSED", "tests/test_b.py::test_other": "PASSED"}
REPORT = {"complete": True, "tests": dict(ALL_PASS)}


def log_of(statuses: dict[str, str], exit_code: int = 0) -> str:
    """A test log as swerl's grading script prints it: pytest's -rA lines between SWE-bench's markers."""
    lines = ["+ cd /testbed", ">>>>> Start Test Output", "============ short test summary info ============"]
    lines += [f"{status} {name}" for name, status in statuses.items()]
    lines += [">>>>> End Test Output", f">>>>> Test Exit Code: {exit_code}"]
    return "\n".join(lines) + "\n"


def test_every_listed_test_passing_resolves():
    v = judge(TASK, log_of(ALL_PASS), REPORT, 0, True)
    assert (v.resolved, v.swebench_log_resolved, v.log_valid, v.reason) == (True, True, True, "all FAIL_TO_PASS and PASS_TO_PASS tests pass")
    assert v.tests["tests/test_a.py::test_fix"].expected == "FAIL_TO_PASS"


def test_a_failing_pass_to_pass_test_does_not_resolve():
    statuses = {**ALL_PASS, "tests/test_b.py::test_other": "FAILED"}
    v = judge(TASK, log_of(statuses, 1), {"complete": True, "tests": statuses}, 1, True)
    assert (v.resolved, v.swebench_log_resolved, v.log_valid) == (False, False, True)
    assert v.reason == "1 test(s) not passing: tests/test_b.py::test_other (FAILED)"


def test_a_missing_test_counts_as_failing_and_the_reason_carries_the_collection_error():
    statuses = {k: v for k, v in ALL_PASS.items() if "fix" not in k}
    report = {"complete": True, "tests": statuses,
              "collect_errors": [{"nodeid": "tests/test_c.py", "longrepr": "Traceback\nE   ModuleNotFoundError: No module named 'octo'"}]}
    v = judge(TASK, log_of(statuses), report, 0, True)
    assert v.resolved is False and v.tests["tests/test_a.py::test_fix"].status == "MISSING"
    assert v.reason == ("1 test(s) not passing: tests/test_a.py::test_fix (MISSING); collection errors: "
                        "tests/test_c.py: Traceback | E   ModuleNotFoundError: No module named 'octo'")


def test_without_a_report_the_first_error_lines_of_the_log_explain_missing_tests():
    log = ">>>>> Start Test Output\nImportError while loading conftest\nE   ModuleNotFoundError: No module named 'octo'\n>>>>> End Test Output\n"
    v = judge(TASK, log, None, 4, False)
    assert v.resolved is False
    assert "first errors in the log: ImportError while loading conftest | E   ModuleNotFoundError: No module named 'octo'" in v.reason


def test_a_skipped_fail_to_pass_test_counts_as_failing():
    statuses = {**ALL_PASS, "tests/test_a.py::test_fix": "SKIPPED"}
    v = judge(TASK, log_of(statuses), {"complete": True, "tests": statuses}, 0, True)
    assert v.resolved is False and v.tests["tests/test_a.py::test_fix"].passed is False


def test_a_skipped_pass_to_pass_test_is_maintained_as_in_swebench():
    statuses = {**ALL_PASS, "tests/test_b.py::test_other": "SKIPPED"}
    v = judge(TASK, log_of(statuses), {"complete": True, "tests": statuses}, 0, True)
    assert (v.resolved, v.swebench_log_resolved) == (True, True)


def test_an_xfailed_pass_to_pass_test_is_kept_like_swebench_without_a_validation_record():
    statuses = {**ALL_PASS, "tests/test_a.py::test_old": "XFAIL"}
    assert judge(TASK, log_of(statuses), {"complete": True, "tests": statuses}, 0, True).resolved is True


def test_forged_passed_line_disagreeing_with_pytest_report_is_invalid():
    report = {"complete": True, "tests": {**ALL_PASS, "tests/test_a.py::test_fix": "FAILED"}}
    v = judge(TASK, log_of(ALL_PASS, 1), report, 1, True)
    assert (v.resolved, v.swebench_log_resolved, v.log_valid) == (False, False, False)
    assert "log says tests/test_a.py::test_fix PASSED but pytest recorded FAILED" in v.reason


def test_forged_exit_code_line_does_not_hide_the_real_exit_code():
    # the code under test prints swebench's exit-code line first: swebench reads 0, swerl has the runner's 1
    report = {"complete": True, "tests": {k: "PASSED" for k in ALL_PASS}}
    log = ">>>>> Test Exit Code: 0\n" + log_of(ALL_PASS, 1)
    v = judge(TASK, log, report, 1, True)
    assert (v.swebench_log_resolved, v.resolved, v.log_valid) == (True, False, False)
    assert v.reason == "test command exited 1 while the log shows no failure"


def test_missing_pytest_report_is_invalid():
    v = judge(TASK, log_of(ALL_PASS), None, 0, True)
    assert (v.resolved, v.log_valid) == (False, False)
    assert v.reason.startswith("pytest's own report is missing")


def test_report_of_the_wrong_shape_is_missing_not_a_crash():
    for report in ([1, 2], {"complete": True, "tests": ["x"]}, "text"):
        v = judge(TASK, log_of(ALL_PASS), report, 0, True)  # type: ignore[arg-type]
        assert v.resolved is False


def test_nonzero_exit_with_no_failure_in_log_is_invalid():
    v = judge(TASK, log_of(ALL_PASS, 3), REPORT, 3, True)
    assert (v.resolved, v.log_valid) == (False, False)


def test_log_without_markers_holds_no_gradable_run():
    v = judge(TASK, "PASSED tests/test_a.py::test_fix\n", REPORT, 0, True)
    assert (v.resolved, v.swebench_log_resolved, v.log_valid) == (False, False, False)
    assert v.reason.startswith("the log holds no test run swebench can grade")


def test_non_pytest_commands_are_judged_on_the_log_alone():
    assert judge(TASK, log_of(ALL_PASS), None, 0, False).resolved is True


def test_targets_are_test_patch_files_plus_files_of_listed_tests():
    assert select_test_files(TASK) == ["tests/test_a.py", "tests/test_b.py"]


# --- ids as the publisher's parser writes them ---------------------------------------

SPACED = "tests/test_a.py::test_x[a b-1]"


def test_parser_forms_follow_each_parser():
    assert parser_form(SPACED, get_log_parser("parse_log_pytest")) == "tests/test_a.py::test_x[a"
    assert parser_form(SPACED, get_log_parser("parse_log_pytest_v2")) == SPACED
    assert parser_form("t.py::test_p[/tmp/x/y.txt]", get_log_parser("parse_log_pytest_options")) == "t.py::test_p[/y.txt]"
    assert parser_form("t.py::test_plain", get_log_parser("parse_log_pytest")) == "t.py::test_plain"


def test_nodes_cut_to_one_form_keep_every_outcome():
    groups = group_by_parser_form({SPACED: "PASSED", "tests/test_a.py::test_x[a c-2]": "FAILED"},
                                  get_log_parser("parse_log_pytest"))
    assert groups == {"tests/test_a.py::test_x[a": ["PASSED", "FAILED"]}
    assert lookup("tests/test_a.py::test_x[", groups) == ["PASSED", "FAILED"]  # cut inside the brackets: prefix
    assert lookup("tests/test_a.py::test_y", groups) is None


def _spaced_task(parser: str, f2p: str) -> Task:
    return TASK.model_copy(update={"FAIL_TO_PASS": [f2p], "PASS_TO_PASS": [],
                                   "install_config": TASK.install_config.model_copy(update={"log_parser": parser})})


def test_a_published_cut_id_grades_as_its_publisher_grades_it():
    task = _spaced_task("parse_log_pytest", "tests/test_a.py::test_x[a")
    truth = {"complete": True, "tests": {SPACED: "PASSED"}}
    v = judge(task, log_of({SPACED: "PASSED"}), truth, 0, True)
    assert (v.resolved, v.log_valid, v.tests["tests/test_a.py::test_x[a"].status) == (True, True, "PASSED")


def test_a_cut_id_whose_real_test_failed_still_disagrees_with_a_forged_line():
    task = _spaced_task("parse_log_pytest", "tests/test_a.py::test_x[a")
    truth = {"complete": True, "tests": {SPACED: "FAILED"}}
    v = judge(task, log_of({SPACED: "PASSED"}, 1), truth, 1, True)
    assert (v.resolved, v.log_valid) == (False, False)
    assert "log says tests/test_a.py::test_x[a PASSED but pytest recorded FAILED" in v.reason


def test_the_v2_parser_keeps_spaces_and_matches_the_full_node_id():
    task = _spaced_task("parse_log_pytest_v2", SPACED)
    v = judge(task, log_of({SPACED: "PASSED"}), {"complete": True, "tests": {SPACED: "PASSED"}}, 0, True)
    assert (v.resolved, v.log_valid) == (True, True)


def test_fail_only_counts_a_test_absent_from_the_log_as_passing_unless_pytest_says_otherwise():
    task = TASK.model_copy(update={"eval_type": "fail_only"})
    only_failures_log = log_of({})
    assert judge(task, only_failures_log + "1 passing\n", None, 0, False).resolved is True
    v = judge(task, only_failures_log + "1 passing\n", {"complete": True, "tests": {**ALL_PASS, "tests/test_a.py::test_fix": "FAILED"}}, 0, True)
    assert (v.swebench_log_resolved, v.resolved) == (True, False)
    assert "pytest recorded FAILED" in v.reason


# --- canaries --------------------------------------------------------------------------

CANARIES = {"must_fail": ["tests/test_a.py::test_fix_edge"], "must_pass": ["tests/test_a.py::test_fix_more"]}
BUILT = [{"test": "tests/test_a.py::test_fix", "must_fail": "tests/test_a.py::test_fix_edge",
          "must_pass": "tests/test_a.py::test_fix_more"}]


def test_canaries_with_their_known_outcomes_leave_the_verdict_alone():
    report = {**REPORT, "tests": {**ALL_PASS, CANARIES["must_fail"][0]: "FAILED", CANARIES["must_pass"][0]: "PASSED"}}
    v = judge(TASK, log_of({**ALL_PASS, CANARIES["must_fail"][0]: "FAILED"}, 1), report, 1, True, canaries=BUILT)
    assert (v.resolved, v.tampered) == (True, False)


def test_a_must_fail_canary_that_passed_or_xfailed_means_outcomes_were_forced():
    for forced in ("PASSED", "XFAIL", "SKIPPED"):
        report = {**REPORT, "tests": {**ALL_PASS, CANARIES["must_fail"][0]: forced, CANARIES["must_pass"][0]: "PASSED"}}
        v = judge(TASK, log_of(ALL_PASS), report, 0, True, canaries=BUILT)
        assert (v.resolved, v.tampered, v.log_valid) == (False, True, False)
        assert v.reason.startswith(f"canary tests/test_a.py::test_fix_edge (a copy of a FAIL_TO_PASS test that must "
                                   f"fail) was recorded {forced}: test outcomes were forced or test bodies emptied")


def test_a_must_pass_canary_that_failed_means_outcomes_were_forced():
    report = {**REPORT, "tests": {**ALL_PASS, CANARIES["must_fail"][0]: "FAILED", CANARIES["must_pass"][0]: "FAILED"}}
    assert judge(TASK, log_of(ALL_PASS, 1), report, 1, True, canaries=BUILT).tampered is True


def test_a_canary_root_built_that_never_ran_means_tests_were_removed():
    for missing in ("must_fail", "must_pass"):
        kept = "must_pass" if missing == "must_fail" else "must_fail"
        report = {**REPORT, "tests": {**ALL_PASS, CANARIES[kept][0]: "PASSED" if kept == "must_pass" else "FAILED"}}
        v = judge(TASK, log_of(ALL_PASS), report, 0, True, canaries=BUILT)
        assert (v.resolved, v.tampered) == (False, True)
        assert v.reason.startswith(f"canary {CANARIES[missing][0]} (a copy of tests/test_a.py::test_fix root wrote "
                                   "into its file) never ran: tests were removed from the run")


def test_a_parametrisation_the_real_test_xfailed_or_skipped_says_nothing_of_its_copies():
    built = [{"test": "tests/test_a.py::test_fix[1]", "must_fail": "tests/test_a.py::test_fix_edge",
              "must_pass": "tests/test_a.py::test_fix_more"}]
    tests = {"tests/test_a.py::test_fix[1]": "PASSED", "tests/test_a.py::test_fix[2]": "XFAIL",
             "tests/test_a.py::test_fix[3]": "SKIPPED",
             "tests/test_a.py::test_fix_edge[1]": "FAILED", "tests/test_a.py::test_fix_edge[2]": "XFAIL",
             "tests/test_a.py::test_fix_edge[3]": "SKIPPED",
             "tests/test_a.py::test_fix_more[1]": "PASSED", "tests/test_a.py::test_fix_more[2]": "FAILED",
             "tests/test_a.py::test_fix_more[3]": "SKIPPED"}
    assert canary_problems({"tests": tests}, built) == []
    tests["tests/test_a.py::test_fix_edge[1]"] = "PASSED"  # where the real test ran its body, the copy must fail
    assert len(canary_problems({"tests": tests}, built)) == 1
    tests["tests/test_a.py::test_fix_edge[1]"] = "FAILED"
    # a listed test xfailed (by code under test that calls pytest.xfail) is no mark: its copy must still fail
    listed = frozenset({"tests/test_a.py::test_fix[2]"})
    assert [p.split(" ")[1] for p in canary_problems({"tests": tests}, built, listed)] == [
        "tests/test_a.py::test_fix_edge", "tests/test_a.py::test_fix_more"]


def test_copies_of_a_test_that_never_ran_either_say_nothing():
    report = {**REPORT, "tests": {k: v for k, v in ALL_PASS.items() if k != "tests/test_a.py::test_fix"}}
    assert canary_problems(report, BUILT) == []  # a file that does not import: the real test is missing too


def test_a_listed_test_run_twice_means_the_tests_were_run_again():
    report = {**REPORT, "runs": {"tests/test_a.py::test_fix": 2, "tests/test_a.py::test_old": 1}}
    v = judge(TASK, log_of(ALL_PASS), report, 0, True)
    assert (v.resolved, v.tampered) == (False, True)
    assert v.reason.startswith("test tests/test_a.py::test_fix ran 2 times in one grading: the tests were run again")


# --- xfail and skips -------------------------------------------------------------------


def test_an_xfailed_fail_to_pass_test_is_not_a_fix_though_swebench_counts_it():
    statuses = {**ALL_PASS, "tests/test_a.py::test_fix": "XFAIL"}
    v = judge(TASK, log_of(statuses), {"complete": True, "tests": statuses}, 0, True)
    assert (v.swebench_log_resolved, v.resolved, v.tests["tests/test_a.py::test_fix"].passed) == (True, False, False)
    assert "counts as passing only where the gold patch's validation recorded the same status" in v.reason


def test_xfail_and_skips_are_earned_where_the_gold_patch_had_them():
    statuses = {**ALL_PASS, "tests/test_a.py::test_fix": "XFAIL", "tests/test_b.py::test_other": "SKIPPED"}
    report = {"complete": True, "tests": statuses}
    gold = TASK.model_copy(update={"gold_statuses": {"tests/test_a.py::test_fix": "XFAIL", "tests/test_b.py::test_other": "PASSED"}})
    v = judge(gold, log_of(statuses), report, 0, True)
    assert v.resolved is False and [n for n, d in v.tests.items() if not d.passed] == ["tests/test_b.py::test_other"]
    both = gold.model_copy(update={"gold_statuses": {**gold.gold_statuses, "tests/test_b.py::test_other": "SKIPPED"}})
    assert judge(both, log_of(statuses), report, 0, True).resolved is True


def test_the_test_command_loads_pytest_s_plugins_as_swebench_s_harness_does():
    from swerl.grading.test_script import Isolation, instrumentation, native_script, pre_tests

    script = native_script(TASK, ["tests/test_a.py"], "/testbed", instrumentation("/tmp/p", "swerl_report_x"),
                           Isolation("/tmp/u.py", "/tmp/ev", "/tmp/home", 54321), pre_tests("/tmp/t.py", "/tmp/ev", "/tmp/c.py", None))
    text = script.text
    # root's step (canaries, tripwire) runs before the tests; entry-point plugins autoload, in inner sessions too
    assert text.index('"$swerl_py" -I -c') < text.index("echo '>>>>> Start Test Output'")
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in text
    assert 'export PYTEST_ADDOPTS="-p no:cacheprovider ${PYTEST_ADDOPTS:-}"' in text


def test_an_xfail_published_with_its_reason_under_parse_log_pytest_v2_is_pytest_s_xfailed_node():
    # the publisher's parser keeps an XFAIL line's reason in the id; the gold run had the same XFAIL
    listed = "tests/test_b.py::test_other - explanation, gh issue #12"
    task = Task.model_validate({**TASK.model_dump(), "PASS_TO_PASS": ["tests/test_a.py::test_old", listed],
                                "install_config": {"log_parser": "parse_log_pytest_v2"}, "gold_statuses": {listed: "XFAIL"}})
    assert task.parser_name == "parse_log_pytest_v2"
    log = log_of({"tests/test_a.py::test_fix": "PASSED", "tests/test_a.py::test_old": "PASSED"}).replace(
        ">>>>> End", f"XFAIL {listed}\n>>>>> End")
    report = {"complete": True, "tests": {**ALL_PASS, "tests/test_b.py::test_other": "XFAIL"}}
    v = judge(task, log, report, 0, True, parser=get_log_parser("parse_log_pytest_v2"))
    assert (v.resolved, v.log_valid, v.tests[listed].status) == (True, True, "XFAIL"), v.reason


# --- the reason ----------------------------------------------------------------------------


def test_the_reason_is_the_evidence_s_problems_before_any_test_status():
    tests = {"t::a": TestDetail(expected="FAIL_TO_PASS", status="FAILED", passed=False)}
    problems = [f"problem {i}" for i in range(7)]
    assert _reason(Judgement(tests=tests, log_valid=False), problems, False) == "; ".join(problems[:5])


def test_the_reason_names_failing_tests_then_swebench_s_refusal_then_success():
    failing = {"t::a": TestDetail(expected="FAIL_TO_PASS", status="XFAIL", passed=False),
               "t::b": TestDetail(expected="PASS_TO_PASS", status="PASSED", passed=True)}
    assert _reason(Judgement(tests=failing), [], False) == "1 test(s) not passing: t::a (XFAIL)"
    assert _reason(Judgement(tests=failing), [], True).startswith("1 test(s) not passing: t::a (XFAIL); an XFAIL, XPASS")
    passing = {"t::b": failing["t::b"]}
    assert _reason(Judgement(tests=passing), [], False) == "swebench's grading does not resolve the run"
    assert _reason(Judgement(tests=passing, swebench_log_resolved=True), [], False) == (
        "all FAIL_TO_PASS and PASS_TO_PASS tests pass")
