"""pytest's account of a graded run, rebuilt from the plugin's event lines: lines only add evidence,
so a test keeps the worst outcome it was ever given, each call phase counts as a run, and anything the
plugin never sends is tampering (never an exception of another kind)."""

from __future__ import annotations

import json

import pytest

from swerl.grading.evidence import MalformedReport, report_from_events


def lines(*events: dict) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def outcome(nodeid: str, status: str, phase: str = "call") -> dict:
    return {"event": "test", "id": nodeid, "status": status, "phase": phase}


FINISH_OK = {"event": "finish", "exitstatus": 0}


def test_events_become_the_report_the_judge_reads():
    hooks = {"event": "hooks", "impls": [["pytest_runtest_makereport", "/testbed/pkg/plug.py", "forced"]]}
    raw = lines(hooks, outcome("t.py::a", "PASSED"), outcome("t.py::a_x1", "FAILED"),
                {"event": "collect_error", "nodeid": "u.py", "longrepr": "ImportError"}, FINISH_OK)
    assert report_from_events(raw) == {
        "complete": True, "exitstatus": 0, "tests": {"t.py::a": "PASSED", "t.py::a_x1": "FAILED"},
        "runs": {"t.py::a": 1, "t.py::a_x1": 1}, "sessions": 1,
        "collect_errors": [{"nodeid": "u.py", "longrepr": "ImportError"}],
        "hooks": [["pytest_runtest_makereport", "/testbed/pkg/plug.py", "forced"]],
    }


@pytest.mark.parametrize("impls", [[["a", "b"]], [["a", "b", 3]], ["a"], [["a", "b", "c", "d"]]])
def test_a_hook_record_that_is_not_three_strings_is_tampering(impls):
    with pytest.raises(MalformedReport, match="a hook implementation is not"):
        report_from_events(lines({"event": "hooks", "impls": impls}, FINISH_OK))


def test_a_hook_the_patch_added_is_refused_and_one_it_only_changed_is_not():
    from swerl.grading.judge import added_hooks

    hooks = [["pytest_runtest_makereport", "/testbed/pkg/testing/conftest.py", "forced"],
             ["pytest_configure", "/testbed/pkg/testing/conftest.py", "pytest_configure"],
             ["pytest_runtest_setup", "/testbed/tests/conftest.py", "setup"]]
    added = {"pkg/testing/conftest.py": ["forced", "helper"]}
    assert added_hooks(hooks, "/testbed", ["pkg/testing/conftest.py"], added) == (
        "pytest registered a hook implementation the patch adds, which decides what runs or how it is reported: "
        "pytest_runtest_makereport from pkg/testing/conftest.py:forced")
    assert added_hooks(hooks, "/testbed", ["pkg/testing/conftest.py"], {"pkg/testing/conftest.py": ["helper"]}) == ""
    # a file that changed in the container though the applied diff never showed it: any hook from it counts
    assert added_hooks(hooks, "/testbed", ["pkg/testing/conftest.py"], {}).endswith("conftest.py:pytest_configure")


def test_where_the_repository_is_pytest_a_hook_its_fix_adds_to_pytest_is_pytest_s():
    from swerl.grading.judge import added_hooks

    hooks = [["pytest_collection_modifyitems", "/testbed/src/_pytest/mark/__init__.py", "pytest_collection_modifyitems"],
             ["pytest_runtest_makereport", "/testbed/testing/conftest.py", "forced"]]
    changed = ["src/_pytest/mark/__init__.py", "testing/conftest.py"]
    added = {"src/_pytest/mark/__init__.py": ["pytest_collection_modifyitems"], "testing/conftest.py": ["forced"]}
    assert added_hooks(hooks, "/testbed", changed, added, runner=("/testbed/src/_pytest/", "/testbed/src/pytest/")) == (
        "pytest registered a hook implementation the patch adds, which decides what runs or how it is reported: "
        "pytest_runtest_makereport from testing/conftest.py:forced")
    assert "src/_pytest/mark/__init__.py" in added_hooks(hooks, "/testbed", changed, added)


def test_the_names_a_diff_adds_are_its_added_definitions():
    from swerl.grading.diffs import split_diff
    from swerl.grading.plan import added_definitions

    diff = ("diff --git a/p.py b/p.py\n--- a/p.py\n+++ b/p.py\n@@ -1,2 +1,6 @@\n def kept():\n-    x = 1\n"
            "+    x = 2\n+def pytest_runtest_makereport(item, call):\n+    pass\n+class Plug:\n+hook: object = kept\n"
            "+if a == b:\n")
    assert added_definitions(split_diff(diff)) == {"p.py": ["Plug", "hook", "pytest_runtest_makereport", "x"]}


def test_each_call_phase_counts_as_one_run_of_the_test():
    raw = lines(outcome("t.py::a", "PASSED", "setup"), outcome("t.py::a", "PASSED"), outcome("t.py::a", "ERROR", "teardown"),
                outcome("t.py::a", "PASSED"), FINISH_OK)
    assert report_from_events(raw)["runs"] == {"t.py::a": 2}


def test_a_pass_sent_after_a_failure_does_not_undo_it():
    raw = lines(outcome("t.py::a", "FAILED"), FINISH_OK, outcome("t.py::a", "PASSED"), {"event": "finish", "exitstatus": 0})
    assert report_from_events(raw)["tests"] == {"t.py::a": "FAILED"}


def test_an_error_in_teardown_outranks_a_passing_call():
    raw = lines(outcome("t.py::a", "PASSED"), outcome("t.py::a", "ERROR", "teardown"), FINISH_OK)
    assert report_from_events(raw)["tests"] == {"t.py::a": "ERROR"}


def test_any_unclean_finish_makes_the_run_unclean_whatever_finish_comes_first():
    raw = lines(FINISH_OK, outcome("t.py::a", "FAILED"), {"event": "finish", "exitstatus": 1})
    assert (report_from_events(raw)["complete"], report_from_events(raw)["exitstatus"]) == (True, 1)


def test_a_run_with_no_finish_is_incomplete_and_one_with_no_events_has_no_report():
    assert report_from_events(lines(outcome("t.py::a", "PASSED")))["complete"] is False
    assert report_from_events(b"") is None
    assert report_from_events(b"\n\n") is None


@pytest.mark.parametrize("raw, says", [
    (b"\xff\xfe not utf-8\n", "not UTF-8"),
    (b"[1, 2, 3]\n", "event 1 is not one the plugin sends"),
    (lines(outcome("t.py::a", "PASSED"))[:-1], "cut off"),
    (b"{not json\n", "event 1 is not JSON"),
    (lines(FINISH_OK, {"event": "test", "id": "t.py::a", "status": ["PASSED"], "phase": "call"}),
     "event 2: 'status' is not a str"),
    (lines({"event": "test", "id": "t.py::a", "status": "WON", "phase": "call"}), "'WON' in 'call' is not a pytest outcome"),
    (lines({"event": "test", "id": "t.py::a", "status": "PASSED", "phase": "rerun"}), "is not a pytest outcome"),
    (lines({"event": ["test"], "id": "t.py::a", "status": "PASSED", "phase": "call"}), "event 1 is not one the plugin sends"),
    (lines({"event": {"test": 1}}), "event 1 is not one the plugin sends"),
    (lines({"event": "test", "id": "t.py::a", "status": "PASSED"}), "event 1 is not one the plugin sends"),
    (lines({"event": "finish", "exitstatus": True}), "'exitstatus' is not a int"),
    (lines({"event": "finish", "exitstatus": 0, "tests": {}}), "not one the plugin sends"),
    (lines({"event": "canary", "kind": "must_fail", "id": "x"}), "not one the plugin sends"),
    (lines({"event": "report", "tests": {"t.py::a": "PASSED"}}), "not one the plugin sends"),
])
def test_anything_the_plugin_never_sends_is_malformed(raw, says):
    with pytest.raises(MalformedReport, match=says.replace("[", r"\[").replace("(", r"\(")):
        report_from_events(raw)
