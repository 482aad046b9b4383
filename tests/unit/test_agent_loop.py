"""The agent loop end to end without Docker: a scripted policy, the real tools, a local sandbox.

Every exit reason is driven by a script or a limit; the rollout runner runs the same path
over every demo task. (The same runs in Docker sandboxes, graded, are in
tests/integration/test_rollout.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from swerl.agent.loop import Agent, AgentConfig
from swerl.agent.tools import install_tools
from swerl.agent.trajectory import ExitReason
from swerl.envs.factory import make_sandbox
from swerl.envs.local_sandbox import LocalSandboxConfig, local_sandbox_folders
from swerl.envs.repos import MirrorRepoSource
from swerl.envs.sandbox import HostLost
from swerl.inference.config import ScriptedEngineConfig
from swerl.inference.scripted import ScriptedEngine, script_from_patch
from swerl.rollout.runner import RolloutConfig, rollout
from swerl.rollout.sampler import SamplerConfig
from swerl.rollout.store import TrajectoryStore
from tests.support.trajectories import assert_prefix_invariant, assert_token_accounting, changed_lines, cmd

DURATIONS = "swerl-demo__durations-1"


@pytest.fixture
def sandbox_config(tmp_path, run_id):
    config = LocalSandboxConfig(run_id=run_id, parent_dir=tmp_path / "sandboxes")
    yield config
    assert local_sandbox_folders(run_id, config.parent_dir) == []


@pytest.fixture
def run(demo, demo_tasks, tok, chat, sandbox_config):
    """``run(replies, **agent_config)``: the trajectory of one scripted run on `durations`, and the sandbox's workdir."""
    task = demo_tasks[DURATIONS]
    mirror = str(MirrorRepoSource(demo.repos_dir).locate(task.repo))

    async def agent_run(engine, config):
        sandbox = make_sandbox(sandbox_config, mirror, base_commit=task.base_commit)
        await asyncio.to_thread(sandbox.start)
        try:
            await asyncio.to_thread(install_tools, sandbox)
            return await Agent(engine, chat, config).run(task, sandbox, sample_index=0, seed=0), sandbox.workdir
        finally:
            await asyncio.to_thread(sandbox.close)

    def go(replies, engine=None, **config):
        return asyncio.run(agent_run(engine or ScriptedEngine(tok, {DURATIONS: replies}), AgentConfig(**config)))

    return go


def test_max_turns_ends_the_run_and_the_prompt_line_tracks_cd_and_open(run, chat, tok):
    traj, workdir = run([cmd("cd durations"), cmd("open __init__.py"), cmd("pwd"), cmd("ls")], max_turns=3)
    assert traj.exit_reason is ExitReason.max_turns and traj.num_turns == 3
    assert traj.turns[0].observation.endswith(f"(Open file: n/a)\n(Current directory: {workdir}/durations)\nbash-$")
    assert f"(Open file: {workdir}/durations/__init__.py)" in traj.turns[1].observation
    assert traj.turns[2].observation.startswith(f"{workdir}/durations\n")
    assert traj.patch == ""  # nothing was changed
    assert_token_accounting(traj)
    assert_prefix_invariant(traj, chat, tok)


def test_the_gold_patch_applied_through_the_tools_is_the_patch_submitted(run, demo_tasks):
    task = demo_tasks[DURATIONS]
    traj, _ = run(script_from_patch(task.patch))
    assert traj.exit_reason is ExitReason.submitted and traj.turns[-1].command == "submit"
    assert any((t.command or "").startswith("edit ") for t in traj.turns)
    assert changed_lines(traj.patch) == changed_lines(task.patch)


def test_format_errors_are_observations_then_end_the_run(run, chat, tok):
    replies = ["I think it is fine.", "Two at once:\n```\nls\n```\n```\npwd\n```", cmd("ls"), "no", "no", "no"]
    traj, _ = run(replies, max_format_errors=3)
    assert traj.exit_reason is ExitReason.format_errors
    assert [t.format_error is not None for t in traj.turns] == [True, True, False, True, True, True]
    assert traj.turns[0].observation.startswith("Your reply was not executed: no command found")
    assert "more than one command" in traj.turns[1].observation
    assert_prefix_invariant(traj, chat, tok)


class NumberedLogprobs(ScriptedEngine):
    """A scripted policy whose k-th id of a reply has log-prob -k/1000: shows which sampled ids a trajectory kept."""

    async def generate(self, request):
        gen = await super().generate(request)
        gen.logprobs = [-(k + 1) / 1000 for k in range(len(gen.token_ids))]
        return gen


def test_ending_replies_at_the_command_drops_what_follows_the_first_block_and_keeps_the_rest_exact(run, chat, tok):
    replies = ["Two at once:\n```\nls\n```\n```\npwd\n```", cmd("cat setup.py") + " and more", cmd("submit")]
    traj, _ = run(replies, engine=NumberedLogprobs(tok, {DURATIONS: replies}), end_reply_at_command=True)
    assert traj.exit_reason is ExitReason.submitted
    assert [t.command for t in traj.turns] == ["ls", "cat setup.py", "submit"]
    assert [t.format_error for t in traj.turns] == [None, None, None]
    assert [t.reply for t in traj.turns] == ["Two at once:\n```\nls\n```", cmd("cat setup.py"), cmd("submit")]
    assert [t.dropped_tokens for t in traj.turns] == [len(tok.encode("\n```\npwd\n```")) + 1,
                                                      len(tok.encode(" and more")) + 1, 0]
    assert [t.finish_reason for t in traj.turns] == ["stop"] * 3
    kept = [traj.logprobs[i] for i, m in enumerate(traj.action_mask) if m]
    assert kept == [-(k + 1) / 1000 for t in traj.turns for k in range(t.n_action_tokens)]  # each reply's own first ids
    assert_token_accounting(traj)
    assert_prefix_invariant(traj, chat, tok)


def test_without_ending_replies_at_the_command_a_second_block_stays_a_format_error(run):
    traj, _ = run(["Two at once:\n```\nls\n```\n```\npwd\n```", cmd("submit")])
    assert "more than one command" in traj.turns[0].format_error and traj.turns[0].dropped_tokens == 0


def test_interactive_programs_are_refused_as_format_errors(run):
    traj, _ = run([cmd("vim setup.py"), cmd("submit")])
    assert "interactive program 'vim'" in traj.turns[0].format_error
    assert traj.exit_reason is ExitReason.submitted


def test_the_deadline_ends_a_straggler_with_timeout(run):
    traj, _ = run([cmd("sleep 60")], deadline_s=2, command_timeout_s=60)
    assert traj.exit_reason is ExitReason.timeout
    assert traj.turns[0].timed_out and traj.wall_s < 15


def test_a_command_timeout_is_an_observation_not_an_exit(run):
    traj, _ = run([cmd("sleep 30"), cmd("submit")], command_timeout_s=1)
    assert traj.turns[0].observation.startswith("The command timed out after 1 seconds and was killed.")
    assert traj.exit_reason is ExitReason.submitted


def test_context_exceeded_when_the_next_turn_cannot_fit(run, chat, tok):
    probe, _ = run([cmd("submit")])
    budget = len(probe.prompt_ids) + 40
    engine = ScriptedEngine(tok, {DURATIONS: [cmd("cat durations/__init__.py")] * 5}, ScriptedEngineConfig(max_context=budget))
    traj, _ = run([], engine=engine, max_new_tokens=40, min_turn_tokens=8)  # the engine's context is the agent's budget
    assert traj.exit_reason is ExitReason.context_exceeded
    assert len(traj.ids) <= budget
    assert_prefix_invariant(traj, chat, tok)


def test_an_engine_failure_is_an_error_exit_with_the_message(run, tok):
    traj, _ = run([], engine=ScriptedEngine(tok, {"some-other-task": []}))
    assert traj.exit_reason is ExitReason.error
    assert "no script for trajectory" in traj.error


def test_a_sandbox_whose_host_is_lost_is_an_infrastructure_exit_not_the_policys(demo, demo_tasks, tok, chat,
                                                                               sandbox_config):
    task = demo_tasks[DURATIONS]
    sandbox = make_sandbox(sandbox_config, str(MirrorRepoSource(demo.repos_dir).locate(task.repo)),
                           base_commit=task.base_commit)

    def lost(*args, **kwargs):  # what a sandbox on a Docker host that died raises (swerl.envs.docker_hosts)
        raise HostLost("Docker host tcp://10.0.0.2:2375 stopped answering")

    with sandbox:
        install_tools(sandbox)
        sandbox.exec = lost
        traj = asyncio.run(Agent(ScriptedEngine(tok, {DURATIONS: [cmd("ls")]}), chat, AgentConfig()).run(task, sandbox))
    assert (traj.exit_reason, traj.infra_failed) == (ExitReason.infra_error, True)
    assert traj.error == "HostLost: Docker host tcp://10.0.0.2:2375 stopped answering"


def test_local_rollouts_of_every_demo_task_submit_the_gold_change_and_a_rerun_skips_them(
        demo, demo_tasks, tok, chat, sandbox_config, tmp_path):
    tasks = list(demo_tasks.values())
    source = MirrorRepoSource(demo.repos_dir)
    mirrors = {t.instance_id: str(source.locate(t.repo)) for t in tasks}
    engine = ScriptedEngine(tok, {t.instance_id: script_from_patch(t.patch) for t in tasks})
    config = RolloutConfig(samples=1, grade=False, sampler=SamplerConfig(concurrency=3, sandbox=sandbox_config))
    summary = rollout(tasks, mirrors, engine, chat, config, tmp_path / "traj")
    assert (summary.produced, summary.exit_reasons, summary.infra_failed, summary.graded) == (9, {"submitted": 9}, 0, 0)
    for t in TrajectoryStore(tmp_path / "traj").trajectories():
        assert changed_lines(t.patch) == changed_lines(demo_tasks[t.instance_id].patch)
        assert t.resolved is None  # not graded
        assert_token_accounting(t)
    again = rollout(tasks, mirrors, engine, chat, config, tmp_path / "traj")
    assert (again.produced, again.skipped) == (0, 9)
