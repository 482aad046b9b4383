"""Which files of an agent's diff grading refuses to apply.

An agent that edits a test, plants a ``conftest.py`` or a pytest configuration, or adds
an interpreter start-up hook can make tests pass with no fix. Grading drops every such
section of the diff before applying the rest, and reports what it dropped.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from swerl.grading.diffs import FileDiff
from swerl.grading.path_rules import INFRA_GLOBS, INFRA_NAMES, TEST_DIRS, TEST_FILE_GLOBS, path_reason


class ProtectedPathsConfig(BaseModel):
    """Rules for the parts of a prediction that grading never applies."""

    test_dirs: tuple[str, ...] = Field(TEST_DIRS, description="Any path with one of these folders in it is a test file.")
    test_file_globs: tuple[str, ...] = Field(TEST_FILE_GLOBS, description="File names that are tests wherever they are.")
    infra_names: tuple[str, ...] = Field(INFRA_NAMES, description="File names that configure the test runner or interpreter.")
    infra_globs: tuple[str, ...] = Field(INFRA_GLOBS, description="Path globs that shadow or configure the test runner.")
    allow_symlinks: bool = Field(False, description="Apply diff sections that create symbolic links.")


def protection_reason(section: FileDiff, test_patch_files: set[str], config: ProtectedPathsConfig) -> str | None:
    """Why ``section`` must be dropped, or None when it may be applied (the rules of swerl.grading.path_rules)."""
    rules = config.model_dump()
    for path in section.paths:
        reason = path_reason(path, test_patch_files, rules, is_symlink=section.is_symlink)
        if reason is not None:
            return reason
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
