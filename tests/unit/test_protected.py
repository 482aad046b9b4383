"""Which diff sections grading refuses to apply."""

import pytest

from swerl.grading.diffs import split_diff
from swerl.grading.protected import ProtectedPathsConfig, filter_sections


def section(path: str, new: bool = True, mode: str = "100644") -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
            if new else f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize("path,reason", [
    ("conftest.py", "file is a test module"),
    ("pkg/conftest.py", "file is a test module"),
    ("tests/test_core.py", "file is in a test folder"),
    ("pkg/tests/helpers.py", "file is in a test folder"),
    ("test_thing.py", "file is a test module"),
    ("sitecustomize.py", "the interpreter imports this at start-up"),
    ("usercustomize.py", "the interpreter imports this at start-up"),
    ("pkg/sitecustomize/__init__.py", "the interpreter imports this at start-up"),
    ("sitecustomize.cpython-311-x86_64-linux-gnu.so", "the interpreter imports this at start-up"),
    ("pytest.toml", "file configures the test runner or the interpreter"),
    (".pytest.toml", "file configures the test runner or the interpreter"),
    ("pkg.egg-info/entry_points.txt", "file configures the test runner or the interpreter"),
    ("evil.egg-info/PKG-INFO", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("src/evil-1.0.dist-info/METADATA", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("evil.egg-link", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("vendor/pluggy/_hooks.py", "file could shadow or configure the test runner"),
    ("pytest.ini", "file configures the test runner or the interpreter"),
    ("pyproject.toml", "file configures the test runner or the interpreter"),
    ("tox.ini", "file configures the test runner or the interpreter"),
    ("setup.cfg", "file configures the test runner or the interpreter"),
    ("pytest.py", "file configures the test runner or the interpreter"),
    ("_pytest/runner.py", "file could shadow or configure the test runner"),
    ("evil.pth", "file could shadow or configure the test runner"),
    ("pkg/__pycache__/core.cpython-311.pyc", "file could shadow or configure the test runner"),
    ("../outside.py", "path '../outside.py' leaves the repository or touches .git"),
    (".git/hooks/pre-commit", "path '.git/hooks/pre-commit' leaves the repository or touches .git"),
])
def test_protected_paths_are_dropped_with_a_reason(path, reason):
    kept, dropped = filter_sections(split_diff(section(path)), set(), ProtectedPathsConfig())
    assert kept == [] and dropped == {path: reason}


def test_files_of_the_test_patch_are_dropped_wherever_they_are():
    kept, dropped = filter_sections(split_diff(section("docs/spec.txt", new=False)), {"docs/spec.txt"}, ProtectedPathsConfig())
    assert dropped == {"docs/spec.txt": "file is changed by the task's test patch"}


def test_symlinks_are_dropped():
    kept, dropped = filter_sections(split_diff(section("pkg/link.py", mode="120000")), set(), ProtectedPathsConfig())
    assert dropped == {"pkg/link.py": "creates a symbolic link"}


def test_source_files_are_kept():
    diff = section("pkg/core.py", new=False) + section("pkg/util/latest.py")
    kept, dropped = filter_sections(split_diff(diff), set(), ProtectedPathsConfig())
    assert [s.path for s in kept] == ["pkg/core.py", "pkg/util/latest.py"] and dropped == {}
