"""The pipeline's policy stages as one typed list: which stages run, in which order, with what."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from swerl.orchestration.objectives import DAPOIteration, RFTIteration
from swerl.orchestration.params import PipelineParams
from swerl.orchestration.plan import EvalStep, StartStep, TrainStep, stage_plan


def test_the_default_pipeline_evaluates_the_start_then_rft_then_each_dapo_iteration():
    plan = stage_plan(PipelineParams(dapo={"iterations": 2}))
    assert [s.name for s in plan] == ["start-policy", "eval-start", "rft", "eval-rft", "iter-1", "eval-iter-1", "iter-2",
                                      "eval-iter-2"]
    assert isinstance(plan[0], StartStep)
    assert [(s.name, s.flow, s.step, s.on_parent) for s in plan if isinstance(s, TrainStep)] == [
        ("rft", "rft", 1, True), ("iter-1", "dapo_iteration", 2, True), ("iter-2", "dapo_iteration", 3, True)]
    assert [(s.name, s.step, s.row, s.after) for s in plan if isinstance(s, EvalStep)] == [
        ("eval-start", 0, "start", None), ("eval-rft", 1, "rft", "rft"), ("eval-iter-1", 2, "iter-1", "iter-1"),
        ("eval-iter-2", 3, "iter-2", "iter-2")]
    assert plan[4].objective == DAPOIteration(dapo=PipelineParams(dapo={"iterations": 2}).dapo, iteration=1)


def test_a_warm_start_comes_first_on_the_warm_up_tasks_and_replaces_the_start_s_registration():
    params = PipelineParams(warm_start={"tasks": Path("warm.jsonl"), "sampler": {"engine": {"kind": "scripted", "give_up": 0.5}}},
                            rft={"enabled": False}, dapo={"iterations": 1})
    plan = stage_plan(params)
    assert [s.name for s in plan] == ["warm-start", "eval-start", "iter-1", "eval-iter-1"]
    warm = plan[0]
    assert (warm.flow, warm.step, warm.task_set, warm.engine, warm.on_parent, warm.must_train) == (
        "rft", 0, "warm", "scripted", False, True)
    assert isinstance(warm.objective, RFTIteration) and warm.objective.stage == "warm-start"
    assert warm.objective.rft.require_resolved is False  # a noisy demonstrator's unfixed runs are imitated too
    assert warm.objective.grade is True and plan[2].objective.grade is True


def test_a_warm_start_may_skip_grading_a_noisy_demonstrator_but_never_one_kept_on_its_verdicts():
    noisy = {"tasks": Path("warm.jsonl"), "sampler": {"engine": {"kind": "scripted", "give_up": 0.5}}, "grade": False}
    warm = stage_plan(PipelineParams(warm_start=noisy))[0].objective
    assert (warm.grade, warm.rft.require_graded, warm.rft.require_resolved) == (False, False, False)
    with pytest.raises(ValidationError, match="grade false needs a noisy demonstrator"):
        PipelineParams(warm_start={**noisy, "sampler": {"engine": "scripted"}})


def test_without_the_start_s_evaluation_or_rft_only_the_iterations_remain():
    plan = stage_plan(PipelineParams(eval={"evaluate_start": False}, rft={"enabled": False, "sampler": {"engine": "scripted"}},
                                     dapo={"iterations": 1}))
    assert [s.name for s in plan] == ["iter-1", "eval-iter-1"]
    assert stage_plan(PipelineParams(rft={"sampler": {"engine": "scripted"}}, dapo={"iterations": 0}))[2].engine == "scripted"


def test_evaluating_the_last_iteration_only_drops_the_other_iterations_evaluations_not_their_training():
    plan = stage_plan(PipelineParams(dapo={"iterations": 3}, eval={"every_iteration": False}))
    assert [s.name for s in plan] == ["start-policy", "eval-start", "rft", "eval-rft", "iter-1", "iter-2", "iter-3",
                                      "eval-iter-3"]
    assert (plan[-1].row, plan[-1].after, plan[-1].step) == ("iter-3", "iter-3", 4)
    assert [s.name for s in stage_plan(PipelineParams(dapo={"iterations": 0}, eval={"every_iteration": False}))] == [
        "start-policy", "eval-start", "rft", "eval-rft"]
