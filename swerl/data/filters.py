"""The paper's task-curation filters (arXiv 2508.03501), as pure functions.

A task is dropped when its gold patch touches more than 7 files or changes 500 lines or
more, when its tests are flaky over repeated runs of the same patch, or when its tests
fail on an import or attribute error (the environment, not the code under test, is
broken). Each filter returns a :class:`FilterVerdict`, so the reason a task was dropped is
always recorded; :func:`apply_filters` runs several over a task list.

The functions that need evidence (test runs, logs) take it as an argument: running the
tests is the caller's business, judging them is this module's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from swerl.data.task import Task
from swerl.grading.diffs import DiffParseError, split_diff

MAX_NAMED_TESTS = 5


class CurationConfig(BaseModel):
    """Limits of the curation filters; the defaults are the paper's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_patch_files: int = Field(
        7, ge=1, le=10_000, description="Drop a task whose gold patch touches more files than this (paper: 7)."
    )
    max_patch_lines: int = Field(
        500,
        ge=1,
        le=10_000_000,
        description="Keep a gold patch only when its changed lines (added + removed) are fewer than this (paper: 500).",
    )
    max_flaky_fraction: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Largest share of a task's FAIL_TO_PASS + PASS_TO_PASS tests that may be flaky; 0 drops a task "
        "with any flaky test (paper).",
    )


@dataclass(frozen=True)
class FilterVerdict:
    """Whether a filter keeps a task, and why not when it does not."""

    keep: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if not self.keep and not self.reason:
            raise ValueError("a FilterVerdict that drops a task must give the reason")


KEEP = FilterVerdict(True)


@dataclass(frozen=True)
class PatchSize:
    """How much a patch changes: files touched and lines added / removed."""

    files: int
    added: int
    removed: int

    @property
    def changed(self) -> int:
        return self.added + self.removed


def patch_size(patch: str) -> PatchSize:
    """Size of a unified diff; a rename counts as one file. Raises DiffParseError for non-diffs."""
    sections = split_diff(patch)
    return PatchSize(
        files=len(sections),
        added=sum(s.added for s in sections),
        removed=sum(s.removed for s in sections),
    )


def gold_patch_within_limits(task: Task, config: CurationConfig | None = None) -> FilterVerdict:
    """Keep a task whose gold patch is a non-empty diff within the file and line limits (default: the paper's)."""
    config = config or CurationConfig()
    try:
        size = patch_size(task.patch)
    except DiffParseError as e:
        return FilterVerdict(False, f"gold patch is not a valid diff: {e}")
    if size.files == 0:
        # Without a gold patch the task cannot be shown to be solvable.
        return FilterVerdict(False, "gold patch is empty")
    if size.files > config.max_patch_files:
        return FilterVerdict(False, f"gold patch touches {size.files} files (limit {config.max_patch_files})")
    if size.changed >= config.max_patch_lines:
        return FilterVerdict(
            False,
            f"gold patch changes {size.changed} lines (+{size.added} -{size.removed}); "
            f"it must change fewer than {config.max_patch_lines}",
        )
    return KEEP


def flaky_tests(runs: Sequence[Mapping[str, str]]) -> set[str]:
    """Tests whose status differs between repeated runs of the same patch.

    A test missing from some runs counts as a change of status. Fewer than two runs
    cannot show flakiness, so they give an empty set.
    """
    if len(runs) < 2:
        return set()
    everything = set().union(*(run.keys() for run in runs))
    return {test for test in everything if len({run.get(test) for run in runs}) > 1}


def no_flaky_tests(
    task: Task, runs: Sequence[Mapping[str, str]], config: CurationConfig | None = None
) -> FilterVerdict:
    """Keep a task unless too many of its FAIL_TO_PASS / PASS_TO_PASS tests are flaky in ``runs``."""
    config = config or CurationConfig()
    if len(runs) < 2:
        raise ValueError(
            f"no_flaky_tests({task.instance_id}) got {len(runs)} run(s); flakiness shows only across "
            "two or more runs of the same patch, so run the tests again"
        )
    judged = set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS)
    flaky = sorted(flaky_tests(runs) & judged)
    if not flaky or len(flaky) / len(judged) <= config.max_flaky_fraction:
        return KEEP
    named = ", ".join(flaky[:MAX_NAMED_TESTS]) + (f" (+{len(flaky) - MAX_NAMED_TESTS} more)" if len(flaky) > MAX_NAMED_TESTS else "")
    return FilterVerdict(False, f"{len(flaky)} of {len(judged)} tests are flaky over {len(runs)} runs: {named}")


_ERRORS = r"(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError|AttributeError)"
# Only lines where pytest reports a failure's cause: a test's own name or output may
# mention these errors (test_raises_attribute_error PASSED) without anything being broken.
_FAILURE_LINES = re.compile(
    rf"^(?:E\s+{_ERRORS}(?::|$)"  # the exception line of a traceback
    # -rA short summary, "FAILED t.py::test_x[a b] - AttributeError: ...": the node id, then the cause
    rf"|(?:FAILED|ERROR) [^\s\[]+(?:\[[^\]]*\])? - {_ERRORS}\b"
    r"|ImportError while importing test module\b)",  # a collection error
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def import_or_attribute_failure(log: str) -> str | None:
    """The first line of a pytest log showing a failure caused by an import or attribute error."""
    for line in log.splitlines():
        clean = _ANSI.sub("", line).rstrip()
        if _FAILURE_LINES.match(clean):
            return clean
    return None


def no_import_or_attribute_failures(task: Task, logs: str | Sequence[str]) -> FilterVerdict:
    """Keep a task unless one of the logs of its test runs shows an import or attribute error.

    ``task`` is taken so that every filter is called the same way (task first); the logs
    are expected to come from running that task's tests.
    """
    for log in [logs] if isinstance(logs, str) else logs:
        line = import_or_attribute_failure(log)
        if line is not None:
            return FilterVerdict(False, f"tests of {task.instance_id} fail on an import or attribute error: {line}")
    return KEEP


def apply_filters(
    tasks: Iterable[Task], verdict_fns: Sequence[Callable[[Task], FilterVerdict]]
) -> tuple[list[Task], list[tuple[Task, str]]]:
    """Split ``tasks`` into kept and dropped; a dropped task carries the first failing filter's reason.

    Filters run in the given order and stop at the first that drops the task, so put the
    cheap ones first.
    """
    kept: list[Task] = []
    dropped: list[tuple[Task, str]] = []
    for task in tasks:
        for verdict_fn in verdict_fns:
            verdict = verdict_fn(task)
            if not verdict.keep:
                dropped.append((task, verdict.reason or ""))
                break
        else:
            kept.append(task)
    return kept, dropped
