"""Specification of swerl.data.filters: the paper's curation filters."""

import pytest
from pydantic import ValidationError

from swerl.data.filters import (
    CurationConfig,
    FilterVerdict,
    PatchSize,
    apply_filters,
    flaky_tests,
    gold_patch_within_limits,
    import_or_attribute_failure,
    no_flaky_tests,
    no_import_or_attribute_failures,
    patch_size,
)
from swerl.data.task import Task
from swerl.grading.diffs import DiffParseError


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def task(patch: str = "", n: int = 1, fail_to_pass=("tests/test_utils.py::test_parse_params",), pass_to_pass=()) -> Task:
    return Task.model_validate(
        {
            "instance_id": f"octo__demo-{n}",
            "repo": "octo/demo",
            "base_commit": "a091fab020ac26548250c907bae0855273a98778",
            "patch": patch,
            "install_config": {},
            "FAIL_TO_PASS": list(fail_to_pass),
            "PASS_TO_PASS": list(pass_to_pass),
        }
    )


def new_files_patch(files: int, lines_each: int) -> str:
    """A patch creating ``files`` files of ``lines_each`` lines."""
    out = []
    for f in range(files):
        out += [f"diff --git a/src/m{f}.py b/src/m{f}.py", "new file mode 100644", "--- /dev/null", f"+++ b/src/m{f}.py"]
        out += [f"@@ -0,0 +1,{lines_each} @@"] + [f"+x{i} = {i}" for i in range(lines_each)]
    return lines(*out)


def edit_patch(added: int, removed: int) -> str:
    """A one-file patch replacing ``removed`` lines by ``added`` lines."""
    return lines(
        "diff --git a/src/big.py b/src/big.py",
        "--- a/src/big.py",
        "+++ b/src/big.py",
        f"@@ -1,{removed} +1,{added} @@",
        *[f"-old{i}" for i in range(removed)],
        *[f"+new{i}" for i in range(added)],
    )


GOLD = lines(
    "diff --git a/spectree/utils.py b/spectree/utils.py",
    "index 1b2c3d4..5e6f7a8 100644",
    "--- a/spectree/utils.py",
    "+++ b/spectree/utils.py",
    "@@ -10,7 +10,9 @@ def parse_comments(func):",
    "     doc = inspect.getdoc(func)",
    "     if doc is None:",
    "         return None, None",
    "-    parts = doc.split('\\n\\n', 1)",
    "+    parts = doc.strip().split('\\n\\n', 1)",
    "+    if len(parts) == 1:",
    "+        return parts[0], None",
    "     return parts[0], parts[1]",
    " ",
    " ",
    "diff --git a/spectree/params.py b/spectree/params.py",
    "new file mode 100644",
    "index 0000000..9a8b7c6",
    "--- /dev/null",
    "+++ b/spectree/params.py",
    "@@ -0,0 +1,2 @@",
    '+"""Query parameter helpers."""',
    "+DEFAULT_SEPARATOR = ','",
)


# --- gold patch size -----------------------------------------------------------------


def test_patch_size_counts_files_and_added_and_removed_lines():
    size = patch_size(GOLD)
    assert size == PatchSize(files=2, added=5, removed=1)
    assert size.changed == 6


def test_patch_size_of_an_empty_patch_is_zero():
    assert patch_size("") == PatchSize(0, 0, 0)


def test_patch_size_of_text_that_is_not_a_diff_raises():
    with pytest.raises(DiffParseError):
        patch_size("fixed it")


def test_the_paper_limits_are_the_defaults():
    assert CurationConfig() == CurationConfig(max_patch_files=7, max_patch_lines=500, max_flaky_fraction=0.0)


def test_a_gold_patch_touching_exactly_7_files_is_kept():
    assert gold_patch_within_limits(task(new_files_patch(7, 1))) == FilterVerdict(True, None)


def test_a_gold_patch_touching_8_files_is_dropped():
    assert gold_patch_within_limits(task(new_files_patch(8, 1))) == FilterVerdict(False, "gold patch touches 8 files (limit 7)")


def test_a_gold_patch_changing_499_lines_is_kept():
    assert gold_patch_within_limits(task(edit_patch(added=300, removed=199))).keep is True


def test_a_gold_patch_changing_exactly_500_lines_is_dropped():
    assert gold_patch_within_limits(task(edit_patch(added=250, removed=250))) == FilterVerdict(
        False, "gold patch changes 500 lines (+250 -250); it must change fewer than 500"
    )


def test_patch_limits_come_from_the_config():
    config = CurationConfig(max_patch_files=1, max_patch_lines=6)
    assert gold_patch_within_limits(task(GOLD), config) == FilterVerdict(False, "gold patch touches 2 files (limit 1)")
    assert gold_patch_within_limits(task(edit_patch(3, 3)), config).reason == "gold patch changes 6 lines (+3 -3); it must change fewer than 6"
    assert gold_patch_within_limits(task(edit_patch(3, 2)), config).keep is True


def test_an_empty_or_unparsable_gold_patch_is_dropped():
    assert gold_patch_within_limits(task("")) == FilterVerdict(False, "gold patch is empty")
    assert gold_patch_within_limits(task("fixed it")) == FilterVerdict(
        False, "gold patch is not a valid diff: no 'diff --git' or '---/+++' file header found: this is not a unified diff"
    )


@pytest.mark.parametrize("bad", [{"max_patch_files": 0}, {"max_patch_lines": 0}, {"max_flaky_fraction": 1.5}, {"max_files": 7}])
def test_curation_config_rejects_out_of_range_and_unknown_settings(bad):
    with pytest.raises(ValidationError):
        CurationConfig(**bad)


def test_a_verdict_that_drops_must_say_why():
    with pytest.raises(ValueError, match="^a FilterVerdict that drops a task must give the reason$"):
        FilterVerdict(False)


# --- flaky tests ---------------------------------------------------------------------

RUNS = [
    {"t.py::a": "PASSED", "t.py::b": "PASSED", "t.py::c": "FAILED", "t.py::d": "PASSED"},
    {"t.py::a": "PASSED", "t.py::b": "FAILED", "t.py::c": "FAILED", "t.py::d": "PASSED"},
    {"t.py::a": "PASSED", "t.py::b": "PASSED", "t.py::c": "FAILED"},  # d did not run
]


def test_flaky_tests_are_those_whose_status_changes_or_that_go_missing_across_runs():
    assert flaky_tests(RUNS) == {"t.py::b", "t.py::d"}


def test_a_single_run_shows_no_flakiness():
    assert flaky_tests(RUNS[:1]) == set()
    assert flaky_tests([]) == set()


def test_a_task_with_a_flaky_pass_to_pass_test_is_dropped():
    flaky_task = task(fail_to_pass=["t.py::c"], pass_to_pass=["t.py::a", "t.py::b"])
    assert no_flaky_tests(flaky_task, RUNS) == FilterVerdict(False, "1 of 3 tests are flaky over 3 runs: t.py::b")


def test_flaky_tests_outside_the_task_do_not_matter():
    assert no_flaky_tests(task(fail_to_pass=["t.py::c"], pass_to_pass=["t.py::a"]), RUNS).keep is True


def test_max_flaky_fraction_tolerates_a_share_of_flaky_tests():
    flaky_task = task(fail_to_pass=["t.py::c"], pass_to_pass=["t.py::a", "t.py::b"])
    assert no_flaky_tests(flaky_task, RUNS, CurationConfig(max_flaky_fraction=0.34)).keep is True
    assert no_flaky_tests(flaky_task, RUNS, CurationConfig(max_flaky_fraction=0.33)).keep is False


def test_judging_flakiness_from_one_run_is_an_error():
    with pytest.raises(ValueError) as caught:
        no_flaky_tests(task(), RUNS[:1])
    assert str(caught.value) == (
        "no_flaky_tests(octo__demo-1) got 1 run(s); flakiness shows only across two or more runs of the same patch, "
        "so run the tests again"
    )


# --- import and attribute errors -----------------------------------------------------

COLLECTION_ERROR_LOG = lines(
    "============================= test session starts ==============================",
    "collected 0 items / 1 error",
    "",
    "==================================== ERRORS ====================================",
    "____________________ ERROR collecting tests/test_parser.py _____________________",
    "ImportError while importing test module '/testbed/tests/test_parser.py'.",
    "Hint: make sure your test modules/packages have valid Python names.",
    "Traceback:",
    "tests/test_parser.py:3: in <module>",
    "    from spectree.utils import parse_params",
    "E   ImportError: cannot import name 'parse_params' from 'spectree.utils' (/testbed/spectree/utils.py)",
    "=========================== short test summary info ============================",
    "ERROR tests/test_parser.py",
    "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!",
)

TRACEBACK_LOG = lines(
    "=================================== FAILURES ===================================",
    "______________________________ test_load_config _______________________________",
    "",
    "    def test_load_config():",
    ">       import yaml",
    "E       ModuleNotFoundError: No module named 'yaml'",
    "",
    "tests/test_config.py:4: ModuleNotFoundError",
)

SUMMARY_LOG = lines(
    "=========================== short test summary info ============================",
    "PASSED tests/test_utils.py::test_comments",
    "FAILED tests/test_utils.py::test_parse_params - AttributeError: module 'spectree.utils' has no attribute 'parse_params'",
    "========================= 1 failed, 1 passed in 0.12s ==========================",
)

CLEAN_LOG = lines(
    "=========================== short test summary info ============================",
    "PASSED tests/test_errors.py::test_raises_AttributeError_for_unknown_field",
    "PASSED tests/test_errors.py::test_ImportError_message_names_the_module",
    "FAILED tests/test_errors.py::test_AttributeError_is_wrapped - assert 'AttributeError' == 'KeyError'",
    "========================= 1 failed, 2 passed in 0.05s ==========================",
)


def test_a_collection_import_error_is_found():
    assert import_or_attribute_failure(COLLECTION_ERROR_LOG) == "ImportError while importing test module '/testbed/tests/test_parser.py'."


def test_a_module_not_found_error_in_a_traceback_is_found():
    assert import_or_attribute_failure(TRACEBACK_LOG) == "E       ModuleNotFoundError: No module named 'yaml'"


def test_an_attribute_error_in_the_short_summary_is_found():
    assert import_or_attribute_failure(SUMMARY_LOG) == (
        "FAILED tests/test_utils.py::test_parse_params - AttributeError: module 'spectree.utils' has no attribute 'parse_params'"
    )


def test_an_error_summary_line_of_a_collection_error_is_found():
    log = "ERROR tests/test_a.py - ModuleNotFoundError: No module named 'x'\n"
    assert import_or_attribute_failure(log) == "ERROR tests/test_a.py - ModuleNotFoundError: No module named 'x'"


def test_a_parametrized_test_id_with_spaces_is_read_as_one_id():
    log = "FAILED tests/test_p.py::test_load[a b] - ImportError: cannot import name 'load'\n"
    assert import_or_attribute_failure(log) == "FAILED tests/test_p.py::test_load[a b] - ImportError: cannot import name 'load'"


def test_colour_codes_are_removed_before_matching():
    log = "\x1b[31mFAILED\x1b[0m tests/t.py::test_x - AttributeError: 'NoneType' object has no attribute 'id'\n"
    assert import_or_attribute_failure(log) == "FAILED tests/t.py::test_x - AttributeError: 'NoneType' object has no attribute 'id'"


def test_error_names_inside_test_names_or_assertion_messages_are_not_failures():
    assert import_or_attribute_failure(CLEAN_LOG) is None


def test_a_task_whose_tests_fail_on_an_import_error_is_dropped():
    assert no_import_or_attribute_failures(task(), [CLEAN_LOG, TRACEBACK_LOG]) == FilterVerdict(
        False, "tests of octo__demo-1 fail on an import or attribute error: E       ModuleNotFoundError: No module named 'yaml'"
    )
    assert no_import_or_attribute_failures(task(), CLEAN_LOG) == FilterVerdict(True, None)


# --- applying filters ----------------------------------------------------------------


def test_apply_filters_keeps_the_tasks_every_filter_keeps_and_records_the_first_reason():
    small, wide, broken = task(GOLD, n=1), task(new_files_patch(8, 1), n=2), task(GOLD, n=3)
    logs = {"octo__demo-1": CLEAN_LOG, "octo__demo-2": TRACEBACK_LOG, "octo__demo-3": SUMMARY_LOG}
    kept, dropped = apply_filters(
        [small, wide, broken],
        [gold_patch_within_limits, lambda t: no_import_or_attribute_failures(t, logs[t.instance_id])],
    )
    assert kept == [small]
    assert [(t.instance_id, reason) for t, reason in dropped] == [
        ("octo__demo-2", "gold patch touches 8 files (limit 7)"),
        (
            "octo__demo-3",
            (
                "tests of octo__demo-3 fail on an import or attribute error: FAILED tests/test_utils.py::test_parse_params - "
                "AttributeError: module 'spectree.utils' has no attribute 'parse_params'"
            ),
        ),
    ]
