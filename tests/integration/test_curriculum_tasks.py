"""Generated curriculum tasks in real Docker: valid SWE tasks, solved by the scripted policy in few tokens.

Two tasks per split: their images build, each gold patch resolves and each empty patch
does not (swerl's own task validation), and a scripted rollout (gold patch replayed
through `open` / `edit` / `submit`) resolves every one of them with trajectories short
enough for a tiny policy's context.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.curriculum import SPLITS, CurriculumConfig, generate_curriculum
from swerl.agent.loop import AgentConfig
from swerl.data.loaders import load_tasks
from swerl.envs.images import ImageBuilder, ImageConfig
from swerl.grading.validate import ValidationConfig, validate_tasks
from swerl.stages.rollout import RolloutStage, SamplerConfig, run_rollout, stored_trajectories

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MAX_MEAN_TOKENS = 1500


@pytest.fixture(scope="module")
def small_curriculum(tmp_path_factory, docker_ready):
    """Two tasks per split, every split in one tasks file (the rollout stage reads one file)."""
    result = generate_curriculum(tmp_path_factory.mktemp("curriculum"), CurriculumConfig(warmup=2, train=2, heldout=2))
    combined = result.out / "all.jsonl"
    combined.write_text("".join(result.tasks_files[split].read_text() for split in SPLITS))
    return result, combined


@pytest.fixture(scope="module")
def curriculum_images(small_curriculum, build_dir) -> dict[str, str]:
    result, combined = small_curriculum
    tasks = load_tasks(combined).tasks
    outcomes = ImageBuilder(ImageConfig(repos=result.repos_dir, build_logs=build_dir, builds=2)).build_all(tasks)
    failed = [o for o in outcomes if not o.ok]
    assert not failed, f"curriculum image builds failed: {[o.error for o in failed]}"
    return {o.instance_id: o.image for o in outcomes}


def test_every_generated_task_is_valid_gold_resolves_and_empty_does_not(small_curriculum, curriculum_images):
    _, combined = small_curriculum
    tasks = load_tasks(combined).tasks
    report = validate_tasks(tasks, curriculum_images, ValidationConfig(validate_runs=1))
    assert (report.total, report.valid, report.invalid) == (6, 6, 0), [v.reason for v in report.tasks if not v.valid]
    for verdict in report.tasks:
        assert (verdict.gold_resolved, verdict.empty_resolved, verdict.flaky_tests) == ([True], False, [])
        assert verdict.fail_to_pass_failing_without_fix


def test_a_scripted_rollout_resolves_every_task_in_under_1500_tokens(small_curriculum, curriculum_images, tiny_model_dir,
                                                                      tmp_path, record_property):
    result, combined = small_curriculum
    stage = RolloutStage(tasks=combined, repos=result.repos_dir, model=str(tiny_model_dir), out=tmp_path / "rollout",
                         log_dir=tmp_path / "logs", sampler=SamplerConfig(engine="scripted", concurrency=2))
    run_rollout(stage)
    trajectories = stored_trajectories(tmp_path / "rollout" / "trajectories")
    assert sorted(t.instance_id for t in trajectories) == sorted(i for ids in result.instance_ids.values() for i in ids)
    for t in trajectories:
        assert (t.exit_reason.value, t.resolved, t.pass_to_pass_failed) == ("submitted", True, 0), t.instance_id
        assert [turn.command.split(None, 1)[0] for turn in t.turns] == ["ls", "open", "edit", "submit"]
    lengths = [len(t.ids) for t in trajectories]
    mean = sum(lengths) / len(lengths)
    record_property("mean_trajectory_tokens", mean)
    print(f"scripted trajectories: mean {mean:.0f} tokens, min {min(lengths)}, max {max(lengths)}")
    assert mean < MAX_MEAN_TOKENS and max(lengths) < MAX_MEAN_TOKENS + 300


def test_the_replace_demonstrator_with_the_curriculum_prompts_resolves_every_task_in_three_turns(
        small_curriculum, curriculum_images, tiny_model_dir, tmp_path):
    result, combined = small_curriculum
    prompts = Path(__file__).resolve().parents[2] / "swerl" / "curriculum" / "prompts"
    stage = RolloutStage(tasks=combined, repos=result.repos_dir, model=str(tiny_model_dir), out=tmp_path / "rollout",
                         log_dir=tmp_path / "logs", sampler=SamplerConfig(engine={"kind": "scripted", "demo": "replace"}, concurrency=2,
                                                                          agent=AgentConfig(prompt_dir=prompts)))
    run_rollout(stage)
    trajectories = stored_trajectories(tmp_path / "rollout" / "trajectories")
    assert len(trajectories) == 6
    for t in trajectories:
        assert (t.exit_reason.value, t.resolved, t.pass_to_pass_failed) == ("submitted", True, 0), t.instance_id
        commands = [turn.command.split(None, 1)[0] for turn in t.turns]
        assert commands in (["open", "replace", "submit"], ["open", "edit", "submit"]), (t.instance_id, commands)
        assert t.messages[0]["content"].startswith("Fix the bug in the Python repository at /testbed.")
        assert len(t.ids) < 900, (t.instance_id, len(t.ids))
