"""Every grading setting has one home, ``GradingConfig``, and reaches every place that grades: a pipeline's
rollouts and its task validation, a standalone rollout or evaluation, and ``swerl grade``'s Prefect flow."""

from __future__ import annotations

from pathlib import Path

from flows.rollout import rollout_stage
from swerl.grading.grader import GradingConfig
from swerl.orchestration.params import EvaluateParams, GradeParams, PipelineParams, RolloutParams
from swerl.stages.rollout import rollout_config
from swerl.util.config_reference import reachable


def test_every_form_that_grades_nests_the_grader_s_own_settings():
    for params in (PipelineParams, EvaluateParams, RolloutParams, GradeParams):
        assert GradingConfig in reachable([params]), params.__name__
    # and declares none of its fields again: a limit set in one place is the limit
    assert "test_timeout_s" not in GradeParams.model_fields


def test_a_pipeline_s_test_time_limit_reaches_its_rollouts_and_its_validation(tmp_path):
    params = PipelineParams.model_validate({"sampler": {"grading": {"test_timeout_s": 60, "canaries": False}}})
    stage = rollout_stage(tasks=tmp_path / "tasks.jsonl", repos=None, model="m", out=tmp_path / "out", samples=2, seed=0,
                          policy_version="1", sampler=params.sampler, container_label="pipe-1")
    config = rollout_config(stage)
    assert (config.sampler.grading.test_timeout_s, config.sampler.grading.canaries) == (60, False)
    # the stage's own logs and run label, the user's settings untouched
    assert (config.sampler.grading.grading_logs, config.sampler.grading.sandbox.run_id) == (Path(".swerl/logs/grading"), "pipe-1")
    assert params.sampler.grading.grading_logs is None and params.sampler.grading.sandbox.run_id is None
    # validation grades as the rollouts do, the tests run for the empty patch too
    validation = params.sampler.grading.for_run(tmp_path / "validate", "validate-1", run_tests_without_patch=True)
    assert (validation.test_timeout_s, validation.canaries, validation.run_tests_without_patch) == (60, False, True)
    assert (validation.grading_logs, validation.sandbox.run_id) == (tmp_path / "validate", "validate-1")


def test_a_grading_log_folder_the_user_set_is_kept(tmp_path):
    params = PipelineParams.model_validate({"sampler": {"grading": {"grading_logs": str(tmp_path / "mine")}}})
    stage = rollout_stage(tasks=tmp_path / "t.jsonl", repos=None, model="m", out=tmp_path / "o", samples=1, seed=0,
                          policy_version="0", sampler=params.sampler)
    assert rollout_config(stage).sampler.grading.grading_logs == tmp_path / "mine"


def test_the_grade_flow_s_form_carries_the_grading_settings():
    params = GradeParams.model_validate({"predictions": "p.jsonl", "out": "r.jsonl", "grading": {"test_timeout_s": 30}})
    assert params.grading.test_timeout_s == 30
    assert GradeParams.model_validate({"predictions": "p.jsonl", "out": "r.jsonl"}).grading == GradingConfig()
