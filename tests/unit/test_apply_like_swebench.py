"""A patch is applied as swebench's harness applies it; mending it is opt-in and recorded."""

from swerl.grading.plan import APPLY_COMMANDS, apply_command, recount_hunks, repair_patch
from swerl.grading.test_ids import lookup


def test_the_commands_are_swebench_s_in_swebench_s_order():
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    assert list(APPLY_COMMANDS) == GIT_APPLY_CMDS
    line = apply_command("/tmp/p.diff")
    positions = [line.index(f"if {c} /tmp/p.diff;") for c in GIT_APPLY_CMDS]
    assert positions == sorted(positions)
    # each retry starts from a pristine tree, as run_instance resets it; then an applied patch counts
    assert line.count("git checkout -- . ; git clean -fd; ") == 3
    assert line.endswith("if git apply --check --reverse /tmp/p.diff; then echo '@@via already applied'; exit 0; fi; exit 1")


HUNK = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,9 +1,9 @@\n a\n-b\n+c\n d"


def test_repairs_name_what_they_mended():
    fixed, repairs = repair_patch(HUNK + "\n", HUNK)
    assert repairs == ["final newline", "hunk counts"]
    assert fixed == "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n"
    assert repair_patch(fixed, fixed) == (fixed, [])


def test_recounting_stops_at_the_next_file():
    two = HUNK + "\ndiff --git a/n.py b/n.py\n--- a/n.py\n+++ b/n.py\n@@ -1 +1 @@\n-x\n+y\n"
    assert recount_hunks(two).split("\n")[3:13] == ["@@ -1,3 +1,3 @@", " a", "-b", "+c", " d", "diff --git a/n.py b/n.py",
                                                    "--- a/n.py", "+++ b/n.py", "@@ -1,1 +1,1 @@", "-x"]


def test_an_xfail_id_published_with_its_reason_finds_pytest_s_node():
    groups = {"tests/t.py::test_x": ["XFAIL"], "tests/t.py::test_y": ["PASSED"]}
    assert lookup("tests/t.py::test_x - explanation, gh issue #12", groups) == ["XFAIL"]
    assert lookup("tests/t.py::test_z - explanation", groups) is None
