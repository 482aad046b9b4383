"""Rollouts for real: Docker sandboxes, the in-sandbox tools, submit, grading, Parquet.

The scripted policy applies each demo task's gold patch through `open`/`edit`/`create`
and submits; every exit reason is driven by a script or a limit; the tiny model runs the
same path with the transformers engine.
"""

from __future__ import annotations

import asyncio

import pytest

from swerl.agent.loop import Agent, AgentConfig
from swerl.agent.tools import install_tools
from swerl.agent.trajectory import ExitReason
from swerl.envs.docker_sandbox import DockerSandbox
from swerl.grading.grader import GradingConfig
from swerl.inference.hf_engine import HFEngine
from swerl.inference.scripted import ScriptedEngine, script_from_patch
from swerl.rollout.runner import RolloutConfig, rollout
from swerl.rollout.store import TrajectoryStore

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DURATIONS = "swerl-demo__durations-1"


def assert_prefix_invariant(traj, chat, tok):
    """The stored ids are the template's tokenization of the stored messages (up to the last turn's closing newline)."""
    rendered = tok.apply_chat_template(traj.messages, tokenize=True, return_dict=False,
                                       add_generation_prompt=traj.messages[-1]["role"] == "user")
    assert rendered[: len(traj.ids)] == traj.ids
    assert rendered[len(traj.ids):] in ([], chat.encode("\n"))


def assert_token_accounting(traj):
    assert len(traj.response_ids) == len(traj.action_mask) == len(traj.logprobs)
    assert sum(traj.action_mask) == sum(t.n_action_tokens for t in traj.turns)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.action_mask) if m == 0)


def test_scripted_gold_rollouts_resolve_every_demo_task_and_resume(demo_tasks, demo_images, tok, chat, tmp_path):
    tasks = list(demo_tasks.values())
    engine = ScriptedEngine(tok, {t.instance_id: script_from_patch(t.patch) for t in tasks})
    config = RolloutConfig(samples=1, concurrency=2, grading=GradingConfig(log_dir=tmp_path / "grading"))
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


async def _agent_run(task, image, engine, chat, **config):
    agent = Agent(engine, chat, AgentConfig(**config))
    sandbox = DockerSandbox(image, base_commit=task.base_commit)
    await asyncio.to_thread(sandbox.__enter__)
    try:
        await asyncio.to_thread(install_tools, sandbox)
        return await agent.run(task, sandbox, sample_index=0, seed=0)
    finally:
        await asyncio.to_thread(sandbox.close)


def scripted_run(demo_tasks, demo_images, tok, chat, replies, **config):
    task = demo_tasks[DURATIONS]
    engine = ScriptedEngine(tok, {DURATIONS: replies})
    return asyncio.run(_agent_run(task, demo_images[DURATIONS], engine, chat, **config))


def cmd(text: str) -> str:
    return f"Next step.\n```\n{text}\n```"


def test_max_turns_and_the_prompt_line_tracks_cd_and_open(demo_tasks, demo_images, tok, chat):
    traj = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("cd durations"), cmd("open __init__.py"), cmd("pwd"), cmd("ls")], max_turns=3)
    assert traj.exit_reason is ExitReason.max_turns and traj.num_turns == 3
    assert traj.turns[0].observation.endswith("(Open file: n/a)\n(Current directory: /testbed/durations)\nbash-$")
    assert "(Open file: /testbed/durations/__init__.py)" in traj.turns[1].observation
    assert traj.turns[2].observation.startswith("/testbed/durations\n")
    assert traj.patch == ""  # nothing was changed
    assert_token_accounting(traj)
    assert_prefix_invariant(traj, chat, tok)


def test_format_errors_are_observations_then_end_the_run(demo_tasks, demo_images, tok, chat):
    replies = ["I think it is fine.", "Two at once:\n```\nls\n```\n```\npwd\n```", cmd("ls"), "no", "no", "no"]
    traj = scripted_run(demo_tasks, demo_images, tok, chat, replies, max_format_errors=3)
    assert traj.exit_reason is ExitReason.format_errors
    assert [t.format_error is not None for t in traj.turns] == [True, True, False, True, True, True]
    assert traj.turns[0].observation.startswith("Your reply was not executed: no command found")
    assert "more than one command" in traj.turns[1].observation
    assert_prefix_invariant(traj, chat, tok)


def test_interactive_programs_are_refused_as_format_errors(demo_tasks, demo_images, tok, chat):
    traj = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("vim setup.py"), cmd("submit")])
    assert "interactive program 'vim'" in traj.turns[0].format_error
    assert traj.exit_reason is ExitReason.submitted


def test_the_deadline_ends_a_straggler_with_timeout(demo_tasks, demo_images, tok, chat):
    traj = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("sleep 60")], deadline_s=3, command_timeout_s=60)
    assert traj.exit_reason is ExitReason.timeout
    assert traj.turns[0].timed_out and traj.wall_s < 30


def test_a_command_timeout_is_an_observation_not_an_exit(demo_tasks, demo_images, tok, chat):
    traj = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("sleep 30"), cmd("submit")], command_timeout_s=1)
    assert traj.turns[0].observation.startswith("The command timed out after 1 seconds and was killed.")
    assert traj.exit_reason is ExitReason.submitted


def test_context_exceeded_when_the_next_turn_cannot_fit(demo_tasks, demo_images, tok, chat):
    probe = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("submit")])
    budget = len(probe.prompt_ids) + 40
    traj = scripted_run(demo_tasks, demo_images, tok, chat, [cmd("cat durations/__init__.py")] * 5, max_context=budget, min_turn_tokens=8)
    assert traj.exit_reason is ExitReason.context_exceeded
    assert len(traj.ids) <= budget
    assert_prefix_invariant(traj, chat, tok)


def test_an_engine_failure_is_an_error_exit_with_the_message(demo_tasks, demo_images, tok, chat):
    task = demo_tasks[DURATIONS]
    engine = ScriptedEngine(tok, {"some-other-task": []})
    traj = asyncio.run(_agent_run(task, demo_images[DURATIONS], engine, chat))
    assert traj.exit_reason is ExitReason.error
    assert "no script for trajectory" in traj.error


def test_one_failing_pair_and_one_straggler_do_not_stop_the_others(demo_tasks, demo_images, tok, chat, tmp_path):
    tasks = [demo_tasks[DURATIONS], demo_tasks["swerl-demo__vercmp-1"], demo_tasks["swerl-demo__textkit-1"]]
    images = {t.instance_id: demo_images[t.instance_id] for t in tasks[:2]}  # textkit has no image: error
    scripts = {DURATIONS: [cmd("sleep 120")], "swerl-demo__vercmp-1": script_from_patch(tasks[1].patch)}
    config = RolloutConfig(samples=1, concurrency=3, agent=AgentConfig(deadline_s=4, command_timeout_s=120),
                           grading=GradingConfig(log_dir=tmp_path / "g"))
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
    engine = HFEngine(tiny_model_dir)
    try:
        config = RolloutConfig(samples=2, concurrency=4, agent=AgentConfig(max_turns=3, max_new_tokens=32, max_format_errors=3),
                               grading=GradingConfig(log_dir=tmp_path / "g"), model_name=str(tiny_model_dir))
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


def test_a_patch_already_graded_for_the_task_is_not_graded_again(demo_tasks, demo_images, tok, chat, tmp_path):
    task = demo_tasks[DURATIONS]
    engine = ScriptedEngine(tok, {DURATIONS: script_from_patch(task.patch)})
    for reuse, gradings in ((True, 1), (False, 3)):
        logs = tmp_path / f"grading-{reuse}"
        config = RolloutConfig(samples=3, concurrency=3, reuse_grades=reuse, grading=GradingConfig(log_dir=logs))
        summary = rollout([task], demo_images, engine, chat, config, tmp_path / f"traj-{reuse}")
        assert (summary.resolved, summary.graded) == (3, 3)
        assert len([p for p in logs.rglob("sample-*") if p.is_dir()]) == gradings  # one grading sandbox per patch
        for t in TrajectoryStore(tmp_path / f"traj-{reuse}").trajectories():
            assert t.fail_to_pass_passed == len(task.FAIL_TO_PASS) and t.pass_to_pass_failed == 0
