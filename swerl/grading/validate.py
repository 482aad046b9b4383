"""Task validation: the gold patch N times and the empty patch once, each in a fresh sandbox.

A task is valid when every gold run resolves it, the empty patch does not, at least one
FAIL_TO_PASS test fails without the fix, and no listed test changes status between the
gold runs (flaky tests make a noisy reward).

Verdicts can be cached by content (``ValidationConfig.cache_dir``): the key covers the task
record, its image tag (a hash of the image's build inputs), the number of gold runs and the
grading settings, so a task set validated once is not graded again by a later run, and a
crash mid-validation keeps every verdict already reached. Verdicts touched by an
infrastructure error are never cached: they say nothing about the task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from swerl.data.filters import flaky_tests
from swerl.data.task import Task
from swerl.grading.grader import GradingConfig, GradingSandboxesSettings, grade_many
from swerl.grading.results import FailureClass, GradeResult
from swerl.grading.verdict_store import JsonVerdictStore, content_key, grading_settings

GOLD, EMPTY = "gold", "empty"


class ValidationSettings(GradingSandboxesSettings):
    """How a task set is validated: its gold patch graded ``validate_runs`` times per task (the empty patch once more),
    ``grading_sandboxes`` at once."""

    validate_runs: int = Field(1, ge=0, le=100, description="Gold-patch runs per task when validating a task set (its "
                               "empty patch runs once more; more runs find flaky tests: the paper used 50); 0: no "
                               "validation.")


class ValidationConfig(ValidationSettings):
    """How tasks are validated, and where the verdicts are kept."""

    grading: GradingConfig = Field(default_factory=lambda: GradingConfig(run_tests_without_patch=True))
    cache_dir: Path | None = Field(None, description="Verdict cache keyed by content (None: no cache); see "
                                   "default_cache_dir().")

    @model_validator(mode="after")
    def _runs_something(self) -> ValidationConfig:
        if self.validate_runs < 1:
            raise ValueError("validate_runs 0 validates nothing: skip the validation instead (a form's 0 means that)")
        return self


def default_cache_dir() -> Path:
    """``$SWERL_CACHE_DIR/validation``, else ``~/.cache/swerl/validation`` (the Hugging Face convention)."""
    root = os.environ.get("SWERL_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "swerl") / "validation"


def verdict_key(task: Task, image: str, config: ValidationConfig) -> str:
    """What a verdict depends on: the task record, the image tag, the gold runs, the grading settings."""
    return content_key("swerl-validation-v2", task, image, str(config.validate_runs), grading_settings(config.grading))


class VerdictCache(JsonVerdictStore["TaskValidation"]):
    """Task verdicts, one JSON file each (see :class:`JsonVerdictStore`)."""

    def __init__(self, root: Path):
        super().__init__(root, TaskValidation)


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
    infra_error: bool = Field(False, description="An image build or a sandbox failed: the verdict says nothing about the task.")
    gold_dropped: dict[str, str] = Field(default_factory=dict, description="Files of the gold patch a protection rule "
                                         "dropped or put back, with the rule: a validation error, since the rule "
                                         "would fail the real fix (the task is not graded as its publisher grades it).")
    gold_statuses: dict[str, str] = Field(default_factory=dict, description="Each listed test's status in the first "
                                          "resolved gold run (Task.gold_statuses: what a skip or xfail is checked against).")


class ValidationReport(BaseModel):
    total: int
    valid: int
    invalid: int
    runs: int
    tasks: list[TaskValidation]
    cached: int = Field(0, description="Verdicts taken from the cache, not graded this time.")

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")


def verdict(task: Task, image: str | None, gold: list[GradeResult], empty: GradeResult | None, build_error: str | None = None) -> TaskValidation:
    """Combine one task's gradings into a verdict (pure: no Docker)."""
    v = TaskValidation(instance_id=task.instance_id, valid=False, reason="", image=image)
    if build_error:
        v.reason = f"image build failed: {build_error.splitlines()[0][:600]}"
        v.infra_error = True
        return v
    v.gold_resolved = [g.resolved for g in gold]
    v.gold_failures = [f"{g.failure_class.value if g.failure_class else '?'}: {g.reason}" for g in gold if not g.resolved]
    v.empty_resolved = empty.resolved if empty else None
    first = next((g for g in gold if g.resolved), None)
    v.gold_statuses = {n: d.status for n, d in first.tests.items()} if first else {}
    if empty is not None:
        v.fail_to_pass_failing_without_fix = [n for n, d in empty.tests.items() if d.expected == "FAIL_TO_PASS" and not d.passed]
    listed = set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS)
    runs = [{n: d.status for n, d in g.tests.items()} for g in gold if g.failure_class is not FailureClass.INFRA_ERROR]
    v.flaky_tests = sorted(t for t in flaky_tests(runs) if t in listed) if len(runs) > 1 else []
    problems = []
    infra = [g for g in [*gold, *([empty] if empty else [])] if g.is_infra_error]
    if infra:
        problems.append(f"infrastructure error: {infra[0].reason[:300]}")
        v.infra_error = True
    v.gold_dropped = {p: r for g in gold for p, r in g.dropped_files.items()}
    if v.gold_dropped:
        problems.append("swerl's protection rules drop files the gold patch changes, so they would fail the real fix: "
                        + "; ".join(f"{p}: {r}" for p, r in list(v.gold_dropped.items())[:5]))
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


def _verdict_of(task: Task, image: str | None, got: list[GradeResult], build_error: str | None = None) -> TaskValidation:
    gold = [r for r in got if r.model_name_or_path == GOLD]
    empty = next((r for r in got if r.model_name_or_path == EMPTY), None)
    return verdict(task, image, gold, empty, build_error)


def validate_tasks(tasks: Sequence[Task], images: dict[str, str | None], config: ValidationConfig, *,
                   build_errors: dict[str, str] | None = None,
                   progress: Callable[[GradeResult], None] | None = None) -> ValidationReport:
    """Grade gold and empty patches for every task with an image; tasks without one are invalid.

    With ``config.cache_dir``, tasks whose verdict is cached are not graded, and each new
    verdict is cached as soon as its task's last run is graded.
    """
    build_errors = build_errors or {}
    cache = VerdictCache(config.cache_dir) if config.cache_dir else None
    keys = {t.instance_id: verdict_key(t, images[t.instance_id], config)
            for t in tasks if cache and images.get(t.instance_id)}
    cached = {iid: v for iid, key in keys.items() if (v := cache.get(key)) is not None} if cache else {}
    jobs = []
    for task in tasks:
        image = images.get(task.instance_id)
        if image is None or task.instance_id in cached:
            continue
        jobs += [(task, task.patch, image, f"{GOLD}") for _ in range(config.validate_runs)]
        jobs.append((task, "", image, EMPTY))
    by_task: dict[str, list[GradeResult]] = {}

    def done(job_index: int, res: GradeResult) -> None:
        task, _, image, kind = jobs[job_index]
        res.model_name_or_path = kind
        got = by_task.setdefault(task.instance_id, [])
        got.append(res)
        if cache and len(got) == config.validate_runs + 1 and not any(r.failure_class is FailureClass.INFRA_ERROR for r in got):
            cache.put(keys[task.instance_id], _verdict_of(task, image, got))

    grade_many(jobs, config.grading, concurrency=config.grading_sandboxes, progress=progress, on_result=done)
    verdicts = []
    for task in tasks:
        if task.instance_id in cached:
            verdicts.append(cached[task.instance_id])
            continue
        error = build_errors.get(task.instance_id) or (None if task.instance_id in images and images[task.instance_id] else "no image")
        verdicts.append(_verdict_of(task, images.get(task.instance_id), by_task.get(task.instance_id, []), error))
    valid = sum(v.valid for v in verdicts)
    return ValidationReport(total=len(verdicts), valid=valid, invalid=len(verdicts) - valid, runs=config.validate_runs, tasks=verdicts,
                            cached=len(cached))
