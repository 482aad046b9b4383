"""A rollout's gradings (``swerl.rollout.runner._Grades``) without Docker: a patch is graded once per run however
often it is submitted, an infrastructure failure is graded again, and ``grade_cache`` carries verdicts across runs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from swerl.grading.results import FailureClass, GradeResult
from swerl.rollout import runner
from swerl.rollout.runner import RolloutConfig, _Grades
from swerl.rollout.sampler import SamplerConfig

AGENT = SimpleNamespace(engine=SimpleNamespace(name="scripted"))


@pytest.fixture
def task(demo_tasks):
    return next(iter(demo_tasks.values()))


@pytest.fixture
def graded(monkeypatch) -> list[tuple[str, str]]:
    """The (patch, model name) of every grading run; a patch "flaky" fails for infrastructure once."""
    calls: list[tuple[str, str]] = []

    def grade_prediction(task, patch, image, config, model_name, log_subdir):
        calls.append((patch, model_name))
        if patch == "flaky" and sum(p == "flaky" for p, _ in calls) == 1:
            return GradeResult(instance_id=task.instance_id, resolved=False, failure_class=FailureClass.INFRA_ERROR)
        return GradeResult(instance_id=task.instance_id, resolved=patch == "fix",
                           failure_class=None if patch == "fix" else FailureClass.TESTS_FAILED)

    monkeypatch.setattr(runner, "grade_prediction", grade_prediction)
    return calls


def _grade_all(grades: _Grades, task, patches: list[str]) -> list[GradeResult]:
    async def go():
        return await asyncio.gather(*(grades.grade(task, p, "image:tag", i) for i, p in enumerate(patches)))

    return asyncio.run(go())


def test_repeats_of_a_patch_share_one_grading(task, graded):
    grades = _Grades(RolloutConfig(), AGENT)
    results = _grade_all(grades, task, ["fix", "fix", "wrong", "fix"])
    assert [r.resolved for r in results] == [True, True, False, True]
    assert sorted(graded) == [("fix", "scripted"), ("wrong", "scripted")]
    assert grades.ran == [task.instance_id] * 2


def test_without_reuse_every_submission_is_graded(task, graded):
    grades = _Grades(RolloutConfig(sampler=SamplerConfig(reuse_grades=False), model_name="policy-7"), AGENT)
    _grade_all(grades, task, ["fix", "fix"])
    assert graded == [("fix", "policy-7")] * 2 and len(grades.ran) == 2


def test_an_infrastructure_failure_is_graded_again_and_never_kept(task, graded, tmp_path):
    config = RolloutConfig(sampler=SamplerConfig(grade_cache=tmp_path / "verdicts"))
    grades = _Grades(config, AGENT)
    assert _grade_all(grades, task, ["flaky"])[0].is_infra_error
    assert _grade_all(grades, task, ["flaky"])[0].failure_class is FailureClass.TESTS_FAILED
    assert _grade_all(grades, task, ["flaky", "fix"])[1].resolved and len(graded) == 3
    later = _Grades(config, AGENT)  # another run naming the same cache grades nothing again
    assert [r.resolved for r in _grade_all(later, task, ["flaky", "fix"])] == [False, True]
    assert len(graded) == 3 and later.ran == []
