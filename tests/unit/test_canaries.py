"""Root's canaries (grading/canaries.py): copies of FAIL_TO_PASS tests written into their own files from their
own source, run for real by pytest: where they go, what they are named, what outcome each must have, and
which tests get none (said, never silently)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from swerl.grading.canaries import MAX_TARGETS, build


def outcomes(project: Path) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", str(project)],
                          cwd=project, capture_output=True, text=True, timeout=60)
    found = {}
    for line in proc.stdout.splitlines():  # "test_m.py::test_x PASSED   [ 50%]"
        parts = line.split()
        if len(parts) >= 2 and "::" in parts[0] and parts[1] in ("PASSED", "FAILED", "SKIPPED", "XFAIL", "ERROR"):
            found[parts[0]] = parts[1]
    return found


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "test_m.py").write_text(textwrap.dedent(text))
    return tmp_path


def test_a_must_fail_copy_fails_after_an_early_return_and_passes_on_a_skip(tmp_path):
    project = write(tmp_path, """\
        import pytest

        def test_returns_early():
            if True:
                return
            assert False

        def test_skips():
            pytest.skip("not here")
        """)
    built = build(str(project), ["test_m.py::test_returns_early", "test_m.py::test_skips"], seed=1)["built"]
    got = outcomes(project)
    by_test = {b["test"]: b for b in built}
    assert got[by_test["test_m.py::test_returns_early"]["must_fail"]] == "FAILED"  # returned early, still fails
    assert got[by_test["test_m.py::test_skips"]["must_fail"]] == "SKIPPED"  # what the body raised goes on
    assert {got[b["must_pass"]] for b in built} == {"PASSED"}
    assert got["test_m.py::test_returns_early"] == "PASSED"  # the original is untouched


def test_copies_keep_the_name_patterns_and_the_scope_of_nested_classes(tmp_path):
    project = write(tmp_path, """\
        class TestOuter:
            class TestInner:
                def test_deep(self):
                    assert 1

        def check_test():
            assert 1
        """)
    built = build(str(project), ["test_m.py::TestOuter::TestInner::test_deep", "test_m.py::check_test"], seed=2)["built"]
    names = {b["test"]: (b["must_fail"], b["must_pass"]) for b in built}
    for copy in names["test_m.py::TestOuter::TestInner::test_deep"]:
        assert copy.startswith("test_m.py::TestOuter::TestInner::test_deep_")
    for copy in names["test_m.py::check_test"]:
        assert copy.startswith("test_m.py::check_") and copy.endswith("_test")
    compile((project / "test_m.py").read_text(), "test_m.py", "exec")


def test_at_most_a_few_functions_are_copied_those_run_once_first(tmp_path):
    body = "".join(f"@pytest.mark.parametrize('x', [1, 2])\ndef test_p{i}(x):\n    assert x\n\n" for i in range(3))
    body += "".join(f"def test_s{i}():\n    assert 1\n\n" for i in range(3))
    project = write(tmp_path, "import pytest\n\n" + body)
    targets = [f"test_m.py::test_p{i}[1]" for i in range(3)] + [f"test_m.py::test_s{i}" for i in range(3)]
    built = build(str(project), targets, seed=3)["built"]
    assert len(built) == MAX_TARGETS == 3
    assert sorted(b["test"] for b in built) == ["test_m.py::test_s0", "test_m.py::test_s1", "test_m.py::test_s2"]


def test_what_cannot_be_copied_is_said_with_why(tmp_path):
    project = write(tmp_path, "def test_one_line(): assert 1\n")
    (project / "test_py2.py").write_text("print 'old'\n")
    result = build(str(project), ["test_m.py::test_one_line", "test_py2.py::test_x", "test_m.py::test_missing",
                                  "tests/test_x.py"], seed=4)
    assert result["built"] == []
    assert result["not_built"] == {
        "test_m.py::test_one_line": "its body shares the line of its def",
        "test_py2.py::test_x": "its file cannot be read as Python here: SyntaxError",
        "test_m.py::test_missing": "no such function in its file (made at run time?)",
        "tests/test_x.py": "the id names no test function of a Python file",
    }
    assert (project / "test_m.py").read_text() == "def test_one_line(): assert 1\n"  # untouched


def test_root_writes_copies_only_into_its_own_regular_files(tmp_path):
    # a set-up command runs as the tests' user before the canaries: a link (or a file of theirs) at a test file's
    # path could otherwise point root's write anywhere
    import os

    target = tmp_path / "elsewhere.py"
    target.write_text("def test_x():\n    assert 1\n")
    project = tmp_path / "repo"
    project.mkdir()
    (project / "test_link.py").symlink_to(target)
    (project / "test_theirs.py").write_text("def test_y():\n    assert 1\n")
    os.chown(project / "test_theirs.py", 54331, 54331)
    result = build(str(project), ["test_link.py::test_x", "test_theirs.py::test_y", "test_gone.py::test_z"], seed=1)
    assert result == {"built": [], "not_built": {
        "test_link.py::test_x": "its file is not root's own regular file",
        "test_theirs.py::test_y": "its file is not root's own regular file",
        "test_gone.py::test_z": "its file cannot be read here: FileNotFoundError"}}
    assert target.read_text() == "def test_x():\n    assert 1\n"


def test_copies_that_would_not_compile_are_dropped_and_their_file_left_as_it_was(tmp_path):
    # a copy goes after any statement that follows the original; one that ends on a line opening a bracket
    # would put it inside the bracket
    source = "def test_a():\n    assert 1\nx = 1; y = (\n    2)\n"
    for seed in range(1, 200):
        project = write(tmp_path, source)  # a seed whose copies compile rewrites the file
        result = build(str(project), ["test_m.py::test_a"], seed=seed)
        if result["not_built"]:
            break
    assert result["built"] == []
    assert result["not_built"]["test_m.py::test_a"].startswith("its copies do not compile: ")
    assert (project / "test_m.py").read_text() == source


def test_the_chosen_functions_are_grouped_per_file_each_named_by_its_first_id():
    from swerl.grading.canaries import _chosen, _Rng

    by_file, not_built = _chosen(["a.py::test_x[1]", "a.py::test_x[2]", "b.py::TestC::test_y", "c.txt::test_z",
                                  "a.py"], _Rng(5))
    assert not_built == {"c.txt::test_z": "the id names no test function of a Python file",
                         "a.py": "the id names no test function of a Python file"}
    assert by_file == {"a.py": [("a.py::test_x[1]", ["test_x"])], "b.py": [("b.py::TestC::test_y", ["TestC", "test_y"])]}
