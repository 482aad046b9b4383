"""Which files of an agent's diff grading refuses to apply, decided per task.

An agent that edits a test, plants a ``conftest.py`` or a pytest configuration, or adds an
interpreter start-up hook can make tests pass with no fix. Grading drops every such section of
the diff before applying the rest, and reports what it dropped. What counts as the task's tests
is read from the task (``task_scope``): its test patch, its listed tests and its test command,
never from a folder's name alone, so a fix to a library folder named ``testing`` (or to pytest's
own source) is applied as the official harness applies it.
"""

from __future__ import annotations

import posixpath
import shlex

from pydantic import BaseModel, Field

from swerl.data.task import Task
from swerl.grading.diffs import DiffParseError, FileDiff, split_diff
from swerl.grading.path_rules import INFRA_GLOBS, INFRA_NAMES, TEST_DIR_NAMES, TEST_FILE_GLOBS, path_reason


class ProtectedPathsConfig(BaseModel):
    """Rules for the parts of a prediction that grading never applies."""

    test_dir_names: tuple[str, ...] = Field(TEST_DIR_NAMES, description="The nearest folder of one of these names above "
                                            "one of the task's test files holds its tests: everything under it is "
                                            "protected. A folder of such a name that holds none of them is library code.")
    test_file_globs: tuple[str, ...] = Field(TEST_FILE_GLOBS, description="File names that are tests wherever they are, "
                                             "for a test command that collects whole folders.")
    infra_names: tuple[str, ...] = Field(INFRA_NAMES, description="File names that configure the test runner or interpreter.")
    infra_globs: tuple[str, ...] = Field(INFRA_GLOBS, description="Path globs the interpreter loads at start-up or "
                                         "instead of the source.")
    allow_symlinks: bool = Field(False, description="Apply diff sections that create symbolic links.")


def diff_paths(diff: str) -> set[str]:
    """Every path a diff touches (none when it does not read as a diff)."""
    try:
        return {p for s in split_diff(diff) for p in s.paths}
    except DiffParseError:
        return set()


def command_paths(command: str, workdir: str = "/testbed") -> tuple[list[str], bool]:
    """The repository paths a test command names (its runner script, test files, folders), and whether it
    collects whole folders (it names a folder, or no test file at all)."""
    paths, folders = [], False
    for line in command.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
            tokens = tokens[1:]  # VAR=value before the program
        for index, token in enumerate(tokens):
            if token.startswith(("-", "$", "/")) and not token.startswith(workdir.rstrip("/") + "/") or "=" in token:
                continue
            token = token.split("::", 1)[0]
            if token.startswith(workdir.rstrip("/") + "/"):
                token = token[len(workdir.rstrip("/")) + 1:]
            if "/" not in token and not token.endswith(".py"):
                continue
            path = posixpath.normpath(token)
            if path.startswith(".."):
                continue
            paths.append(path)
            # the program itself (./tests/runtests.py, bin/test) is a script, not a folder to collect
            folders = folders or (index > 0 and not path.endswith(".py") and "." not in posixpath.basename(path))
    return paths, folders or not any(p.endswith(".py") for p in paths)


def task_scope(task: Task, command: str, config: ProtectedPathsConfig, workdir: str = "/testbed") -> dict:
    """What the task's tests are, as path_rules reads it: the test patch's files, the test files (the test
    patch's, the listed tests', the command's), the folders holding them, the folders pytest loads a
    ``conftest.py`` from, and whether the command collects whole folders."""
    patch_files = diff_paths(task.test_patch)
    named, collection_wide = command_paths(command, workdir)
    listed = {t.split("::", 1)[0] for t in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS] if "::" in t}
    test_files = {posixpath.normpath(p) for p in (patch_files | listed | set(named)) if p}
    test_dirs, conftest_dirs = set(), {""}
    for path in test_files:
        parts = path.split("/")
        named_dirs = [i for i, part in enumerate(parts[:-1]) if part in config.test_dir_names]
        if named_dirs:
            test_dirs.add("/".join(parts[:named_dirs[-1] + 1]))
        conftest_dirs.update("/".join(parts[:i]) for i in range(len(parts)))
    for path in named:  # a folder the command names holds tests
        if not path.endswith(".py") and "." not in posixpath.basename(path):
            test_dirs.add(path)
    return {"test_patch_files": sorted(patch_files), "test_files": sorted(test_files), "test_dirs": sorted(test_dirs),
            "conftest_dirs": sorted(conftest_dirs), "collection_wide": collection_wide}


def protection_reason(section: FileDiff, scope: dict, config: ProtectedPathsConfig) -> str | None:
    """Why ``section`` must be dropped, or None when it may be applied (the rules of swerl.grading.path_rules)."""
    rules = config.model_dump()
    for path in section.paths:
        reason = path_reason(path, scope, rules, is_symlink=section.is_symlink)
        if reason is not None:
            return reason
    return None


def filter_sections(sections: list[FileDiff], scope: dict,
                    config: ProtectedPathsConfig) -> tuple[list[FileDiff], dict[str, str]]:
    """Split a diff into the sections to apply and ``{path: reason}`` for the dropped ones."""
    kept, dropped = [], {}
    for section in sections:
        reason = protection_reason(section, scope, config)
        if reason is None:
            kept.append(section)
        else:
            dropped[section.path] = reason
    return kept, dropped
