"""Which files of an agent's diff grading refuses to apply.

An agent that edits a test, plants a ``conftest.py`` or a pytest configuration, or adds
an interpreter start-up hook can make tests pass with no fix. Grading drops every such
section of the diff before applying the rest, and reports what it dropped.
"""

from __future__ import annotations

import fnmatch
import posixpath

from pydantic import BaseModel, Field

from swerl.grading.diffs import FileDiff, safe_relative_path

TEST_DIRS = ("tests", "test", "testing")
TEST_FILE_GLOBS = ("test_*.py", "*_test.py", "tests.py", "conftest.py")
INFRA_NAMES = (
    "conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
    "pyproject.toml", "noxfile.py", "pytest.py", "py.py", "pluggy.py", ".coveragerc",
)
INFRA_GLOBS = ("*.pth", "*.pyc", "*.pyo", "__pycache__/*", "*/__pycache__/*", "_pytest/*", "pytest/*", "pluggy/*")


class ProtectedPathsConfig(BaseModel):
    """Rules for the parts of a prediction that grading never applies."""

    test_dirs: tuple[str, ...] = Field(TEST_DIRS, description="Any path with one of these folders in it is a test file.")
    test_file_globs: tuple[str, ...] = Field(TEST_FILE_GLOBS, description="File names that are tests wherever they are.")
    infra_names: tuple[str, ...] = Field(INFRA_NAMES, description="File names that configure the test runner or interpreter.")
    infra_globs: tuple[str, ...] = Field(INFRA_GLOBS, description="Path globs that shadow or configure the test runner.")
    allow_symlinks: bool = Field(False, description="Apply diff sections that create symbolic links.")


def protection_reason(section: FileDiff, test_patch_files: set[str], config: ProtectedPathsConfig) -> str | None:
    """Why ``section`` must be dropped, or None when it may be applied."""
    if section.is_symlink and not config.allow_symlinks:
        return "creates a symbolic link"
    for path in section.paths:
        if not safe_relative_path(path):
            return f"path {path!r} leaves the repository or touches .git"
        norm = posixpath.normpath(path)
        name = posixpath.basename(norm)
        if norm in test_patch_files:
            return "file is changed by the task's test patch"
        if any(part in config.test_dirs for part in norm.split("/")[:-1]):
            return "file is in a test folder"
        if any(fnmatch.fnmatch(name, g) for g in config.test_file_globs):
            return "file is a test module"
        if name in config.infra_names:
            return "file configures the test runner or the interpreter"
        if any(fnmatch.fnmatch(norm, g) for g in config.infra_globs):
            return "file could shadow or configure the test runner"
    return None


def filter_sections(sections: list[FileDiff], test_patch_files: set[str],
                    config: ProtectedPathsConfig) -> tuple[list[FileDiff], dict[str, str]]:
    """Split a diff into the sections to apply and ``{path: reason}`` for the dropped ones."""
    kept, dropped = [], {}
    for section in sections:
        reason = protection_reason(section, test_patch_files, config)
        if reason is None:
            kept.append(section)
        else:
            dropped[section.path] = reason
    return kept, dropped
