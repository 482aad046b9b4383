"""Rollouts for real: Docker sandboxes, the in-sandbox tools, submit, grading, Parquet.

The scripted policy applies each demo task's gold patch through `open`/`edit`/`create`
and submits; the tiny model runs the same path with the transformers engine. The agent
loop's exit reasons are driven without Docker in tests/unit/test_agent_loop.py.
"""

from __future__ import annotations

import json

import pytest

from swerl.agent.loop import AgentConfig
from swerl.agent.trajectory import ExitReason
from swerl.envs.docker_sandbox import DockerSandboxConfig, running_containers
from swerl.envs.flaky_sandbox import FlakySandboxConfig
from swerl.grading.grader import GradingConfig
from swerl.inference.config import HFEngineConfig
from swerl.inference.hf_engine import HFEngine
from swerl.inference.scripted import ScriptedEngine, script_from_patch
from swerl.rollout.runner import RolloutConfig, rollout
from swerl.rollout.store import TrajectoryStore
from swerl.stages.errors import InfraFailureRate
from swerl.stages.rollout import RolloutStage, SamplerConfig, run_eval
from tests.support.trajectories import assert_prefix_invariant, assert_token_accounting, cmd

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DURATIONS = "swerl-demo__durations-1"


def test_scripted_gold_rollouts_resolve_every_demo_task_and_resume(demo_tasks, demo_images, tok, chat, tmp_path):
    tasks = list(demo_tasks.values())
    engine = ScriptedEngine(tok, {t.instance_id: script_from_patch(t.patch) for t in tasks})
    config = RolloutConfig(samples=1, sampler=SamplerConfig(concurrency=2, grading=GradingConfig(grading_logs=tmp_path / "grading")))
    seen = []
    summary = rollout(tasks, demo_images, engine, chat, config, tmp_path / "traj", on_done=seen.append)
    assert summary.produced == len(tasks) == 9
    assert summary.exit_reasons == {"submitted": 9}
    assert summary.resolved == summary.graded == 9
    stored = TrajectoryStore(tmp_path / "traj").trajectories()
    assert sorted(t.instance_id for t in stored) == sorted(demo_tasks)
    for t in stored:
        assert t.resolved and t.grade_failure is None and t.policy_version == "scripted"
        assert t.turns[-1].command == "submit"
        assert any((c or "").startswith("edit ") for c in (turn.command for turn in t.turns))
        assert t.patch.startswith("diff --git")
        assert t.fail_to_pass_passed == len(demo_tasks[t.instance_id].FAIL_TO_PASS) and t.pass_to_pass_failed == 0
        assert_token_accounting(t)
        assert_prefix_invariant(t, chat, tok)
    again = rollout(tasks, demo_images, engine, chat, config, tmp_path / "traj")
    assert (again.produced, again.skipped) == (0, 9)


def test_one_failing_pair_and_one_straggler_do_not_stop_the_others(demo_tasks, demo_images, tok, chat, tmp_path):
    tasks = [demo_tasks[DURATIONS], demo_tasks["swerl-demo__vercmp-1"], demo_tasks["swerl-demo__textkit-1"]]
    images = {t.instance_id: demo_images[t.instance_id] for t in tasks[:2]}  # textkit has no image: error
    scripts = {DURATIONS: [cmd("sleep 120")], "swerl-demo__vercmp-1": script_from_patch(tasks[1].patch)}
    config = RolloutConfig(samples=1, sampler=SamplerConfig(concurrency=3, agent=AgentConfig(deadline_s=4, command_timeout_s=120),
                                                            grading=GradingConfig(grading_logs=tmp_path / "g")))
    summary = rollout(tasks, images, ScriptedEngine(tok, scripts), chat, config, tmp_path / "traj")
    by_id = {t.instance_id: t for t in TrajectoryStore(tmp_path / "traj").trajectories()}
    assert by_id[DURATIONS].exit_reason is ExitReason.timeout and by_id[DURATIONS].resolved is False
    assert by_id["swerl-demo__vercmp-1"].exit_reason is ExitReason.submitted and by_id["swerl-demo__vercmp-1"].resolved
    assert by_id["swerl-demo__textkit-1"].exit_reason is ExitReason.error and "swerl images build" in by_id["swerl-demo__textkit-1"].error
    assert summary.exit_reasons == {"error": 1, "submitted": 1, "timeout": 1}
    # the errored pair is retried by a rerun, the others are not
    again = rollout(tasks, images, ScriptedEngine(tok, scripts), chat, config, tmp_path / "traj")
    assert (again.produced, again.skipped) == (1, 2)


def test_tiny_model_rollouts_run_to_completion_with_exact_tokens(demo_tasks, demo_images, tiny_model_dir, tok, chat, tmp_path):
    tasks = [demo_tasks[DURATIONS], demo_tasks["swerl-demo__vercmp-1"]]
    engine = HFEngine(HFEngineConfig(model=tiny_model_dir))
    try:
        config = RolloutConfig(samples=2, model_name=str(tiny_model_dir), sampler=SamplerConfig(
            concurrency=4, agent=AgentConfig(max_turns=3, max_new_tokens=32, max_format_errors=3),
            grading=GradingConfig(grading_logs=tmp_path / "g")))
        summary = rollout(tasks, demo_images, engine, chat, config, tmp_path / "traj")
    finally:
        engine.close()
    assert summary.produced == 4 and "error" not in summary.exit_reasons
    for t in TrajectoryStore(tmp_path / "traj").trajectories():
        assert t.exit_reason in (ExitReason.format_errors, ExitReason.max_turns, ExitReason.submitted)
        assert t.resolved is False and t.policy_version == "0" and t.engine == "hf"
        assert all(turn.policy_version == "0" for turn in t.turns)
        assert_token_accounting(t)
        assert all(lp < 0 for lp, m in zip(t.logprobs, t.action_mask) if m)
        # random tokens need not be the canonical tokenization of their text: compare text
        text = tok.decode(t.ids, skip_special_tokens=False)
        rendered = tok.apply_chat_template(t.messages, tokenize=False, add_generation_prompt=t.messages[-1]["role"] == "user")
        # the tail is the template's close of the last reply: "\n" after a sampled <|im_end|>, all of it after a length cut
        assert rendered.startswith(text) and rendered[len(text):] in ("", "\n", chat.assistant_end)


def test_a_policy_that_breaks_its_own_sandbox_scores_zero_and_is_never_dropped_as_infrastructure(demo_tasks, demo_images, tok,
                                                                                                chat, tmp_path):
    from swerl.rl.rewards import RewardConfig, score_trajectory

    task = demo_tasks[DURATIONS]
    # each kills what runs its commands, after a first command that worked: the runner, then the whole container
    attacks = {"runner": ["ls", "kill -9 $PPID; sleep 5", "submit"], "container": ["ls", "kill -9 -1; kill -9 1; sleep 5", "submit"]}
    for name, script in attacks.items():
        config = RolloutConfig(samples=1, sampler=SamplerConfig(concurrency=1, agent=AgentConfig(max_turns=5, command_timeout_s=20),
                                                                grading=GradingConfig(grading_logs=tmp_path / name / "g")))
        engine = ScriptedEngine(tok, {DURATIONS: [cmd(c) for c in script]})
        summary = rollout([task], demo_images, engine, chat, config, tmp_path / name / "traj")
        (t,) = TrajectoryStore(tmp_path / name / "traj").trajectories()
        assert (t.exit_reason, t.resolved, t.infra_failed, t.num_turns) == (ExitReason.sandbox_broken, False, False, 2), name
        assert t.error.startswith(("RunnerFailed", "SandboxError")) and summary.exit_reasons == {"sandbox_broken": 1}
        for error_policy in ("drop", "keep"):  # the policy's own doing whatever the policy for infrastructure errors
            scored = score_trajectory(t, RewardConfig(error_policy=error_policy))
            assert (scored.use, scored.reward) == ("keep", 0.0)
        # a rerun does not give it another try: the run is finished
        again = rollout([task], demo_images, engine, chat, config, tmp_path / name / "traj")
        assert (again.produced, again.skipped) == (0, 1)


def test_a_patch_already_graded_for_the_task_is_not_graded_again(demo_tasks, demo_images, tok, chat, tmp_path):
    task = demo_tasks[DURATIONS]
    engine = ScriptedEngine(tok, {DURATIONS: script_from_patch(task.patch)})
    for reuse, gradings in ((True, 1), (False, 3)):
        logs = tmp_path / f"grading-{reuse}"
        config = RolloutConfig(samples=3, sampler=SamplerConfig(reuse_grades=reuse, concurrency=3, grading=GradingConfig(grading_logs=logs)))
        summary = rollout([task], demo_images, engine, chat, config, tmp_path / f"traj-{reuse}")
        assert (summary.resolved, summary.graded) == (3, 3)
        assert len([p for p in logs.rglob("sample-*") if p.is_dir()]) == gradings  # one grading sandbox per patch
        for t in TrajectoryStore(tmp_path / f"traj-{reuse}").trajectories():
            assert t.fail_to_pass_passed == len(task.FAIL_TO_PASS) and t.pass_to_pass_failed == 0


def test_a_grade_cache_shared_by_two_rollouts_grades_each_patch_once_across_them(demo_tasks, demo_images, tok, chat, tmp_path):
    task = demo_tasks[DURATIONS]
    engine = ScriptedEngine(tok, {DURATIONS: script_from_patch(task.patch)})
    kept = tmp_path / "grades"

    def roll(name: str, **grading) -> tuple:
        config = RolloutConfig(samples=2, sampler=SamplerConfig(concurrency=2, grade_cache=kept,
                                                                grading=GradingConfig(grading_logs=tmp_path / name, **grading)))
        summary = rollout([task], demo_images, engine, chat, config, tmp_path / name / "traj")
        return summary.resolved, summary.graded, summary.grades_run

    assert roll("first") == (2, 2, 1)  # one sandbox for the two identical patches
    assert roll("second") == (2, 2, 0)  # a later stage: the verdict is on disk
    assert len(list(kept.rglob("*.json"))) == 1
    assert roll("other-settings", test_timeout_s=600.0) == (2, 2, 1)  # other grading settings: graded again
    for entry in kept.rglob("*.json"):
        entry.write_text("{not json", encoding="utf-8")  # a damaged entry is graded again, never trusted
    assert roll("damaged") == (2, 2, 1)


def test_an_evaluation_with_one_sandbox_start_in_three_failing_retries_and_scores_only_real_runs(
        demo, demo_tasks, tiny_model_dir, tmp_path, run_id):
    stage = RolloutStage(tasks=demo.tasks_file, repos=demo.repos_dir, model=str(tiny_model_dir), out=tmp_path / "eval",
                         log_dir=tmp_path / "logs", run_id=run_id, sampler=SamplerConfig(
                             engine="scripted", concurrency=3, agent=AgentConfig(max_turns=20),
                             sandbox=FlakySandboxConfig(fail_every=3, inner=DockerSandboxConfig(exec_channel=True))))
    # starts 1..9: the 3rd, 6th and 9th fail; 3 of 9 is over the 20% bound, so no Pass@1 is computed at all
    with pytest.raises(InfraFailureRate, match=r"^3 of 9 \(task, sample\) pairs \(33%\) failed for infrastructure"):
        run_eval(stage)
    assert not (tmp_path / "eval" / "eval.json").exists()
    # the rerun redoes those 3 pairs; its 3rd start (the 12th) fails again: 1 of 9 is within the bound
    report, result = run_eval(stage)
    assert (result.summary.skipped, result.summary.produced, result.summary.infra_failed) == (6, 3, 1)
    (failed,) = report.infra_failed_ids
    iid = failed.split("/")[0]
    # gold patches resolve every task that ran: the failed pair is left out, not counted unresolved
    assert (report.pass_at_1, report.tasks, report.infra_failed, report.ungraded) == (1.0, 9, 1, 0)
    assert report.per_task[iid] == [None] and sum(v == [True] for v in report.per_task.values()) == 8
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())["infra_failed_ids"] == [failed]
    assert running_containers(run_id) == []
