"""Task validation: the gold patch N times and the empty patch once, each in a fresh sandbox.

A task is valid when every gold run resolves it, the empty patch does not, at least one
FAIL_TO_PASS test fails without the fix, and no listed test changes status between the
gold runs (flaky tests make a noisy reward).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from swerl.data.filters import flaky_tests
from swerl.data.task import Task
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.results import FailureClass, GradeResult

GOLD, EMPTY = "gold", "empty"


class ValidationConfig(BaseModel):
    """How tasks are validated."""

    runs: int = Field(3, ge=1, le=100, description="Gold-patch runs per task (the paper used 50 for flakiness).")
    concurrency: int = Field(2, ge=1, le=64, description="Sandboxes graded at once.")
    grading: GradingConfig = Field(default_factory=lambda: GradingConfig(run_tests_without_patch=True))


class TaskValidation(BaseModel):
    """The verdict on one task."""

    instance_id: str
    valid: bool
    reason: str
    image: str | None = None
    gold_resolved: list[bool] = Field(default_factory=list)
    empty_resolved: bool | None = None
    fail_to_pass_failing_without_fix: list[str] = Field(default_factory=list)
    flaky_tests: list[str] = Field(default_factory=list)
    gold_failures: list[str] = Field(default_factory=list, description="Reasons of gold runs that did not resolve.")
    containers: list[str] = Field(default_factory=list, description="Images graded from; each run had its own container.")


class ValidationReport(BaseModel):
    total: int
    valid: int
    invalid: int
    runs: int
    tasks: list[TaskValidation]

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")


def verdict(task: Task, image: str | None, gold: list[GradeResult], empty: GradeResult | None, build_error: str | None = None) -> TaskValidation:
    """Combine one task's gradings into a verdict (pure: no Docker)."""
    v = TaskValidation(instance_id=task.instance_id, valid=False, reason="", image=image)
    if build_error:
        v.reason = f"image build failed: {build_error.splitlines()[0][:300]}"
        return v
    v.gold_resolved = [g.resolved for g in gold]
    v.gold_failures = [f"{g.failure_class.value if g.failure_class else '?'}: {g.reason}" for g in gold if not g.resolved]
    v.empty_resolved = empty.resolved if empty else None
    if empty is not None:
        v.fail_to_pass_failing_without_fix = [n for n, d in empty.tests.items() if d.expected == "FAIL_TO_PASS" and not d.passed]
    listed = set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS)
    runs = [{n: d.status for n, d in g.tests.items()} for g in gold if g.failure_class is not FailureClass.INFRA_ERROR]
    v.flaky_tests = sorted(t for t in flaky_tests(runs) if t in listed) if len(runs) > 1 else []
    problems = []
    infra = [g for g in [*gold, *([empty] if empty else [])] if g.is_infra_error]
    if infra:
        problems.append(f"infrastructure error: {infra[0].reason[:300]}")
    if not all(v.gold_resolved):
        missing = sorted({n for g in gold for n, d in g.tests.items() if d.status == "MISSING"})
        detail = f" (tests not found in the log: {', '.join(missing[:5])})" if missing else ""
        problems.append(f"gold patch resolved {sum(v.gold_resolved)}/{len(gold)} runs{detail}: {v.gold_failures[0][:300] if v.gold_failures else ''}")
    if v.empty_resolved:
        problems.append("the empty patch resolves the task: its tests do not test the fix")
    elif empty is not None and not v.fail_to_pass_failing_without_fix:
        problems.append("no FAIL_TO_PASS test fails without the fix")
    if v.flaky_tests:
        problems.append(f"flaky tests: {', '.join(v.flaky_tests[:5])}")
    v.valid = not problems
    v.reason = "; ".join(problems) if problems else f"gold resolved {len(gold)}/{len(gold)}, empty unresolved"
    return v


def validate_tasks(tasks: Sequence[Task], images: dict[str, str | None], config: ValidationConfig, *,
                   build_errors: dict[str, str] | None = None,
                   progress: Callable[[GradeResult], None] | None = None) -> ValidationReport:
    """Grade gold and empty patches for every task with an image; tasks without one are invalid."""
    build_errors = build_errors or {}
    jobs = []
    for task in tasks:
        image = images.get(task.instance_id)
        if image is None:
            continue
        jobs += [(task, task.patch, image, f"{GOLD}") for _ in range(config.runs)]
        jobs.append((task, "", image, EMPTY))
    results = grade_many(jobs, config.grading, concurrency=config.concurrency, progress=progress)
    by_task: dict[str, list[GradeResult]] = {}
    for (task, _, _, kind), res in zip(jobs, results):
        res.model_name_or_path = kind
        by_task.setdefault(task.instance_id, []).append(res)
    verdicts = []
    for task in tasks:
        got = by_task.get(task.instance_id, [])
        gold = [r for r in got if r.model_name_or_path == GOLD]
        empty = next((r for r in got if r.model_name_or_path == EMPTY), None)
        error = build_errors.get(task.instance_id) or (None if task.instance_id in images and images[task.instance_id] else "no image")
        verdicts.append(verdict(task, images.get(task.instance_id), gold, empty, error))
    valid = sum(v.valid for v in verdicts)
    return ValidationReport(total=len(verdicts), valid=valid, invalid=len(verdicts) - valid, runs=config.runs, tasks=verdicts)
