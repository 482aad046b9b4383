"""Cross-field rules of the configs, refused when the config is built: before an image is built or a
model loaded. Each test states one rule and the exact words of its refusal."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from swerl.inference.base import SamplingConfig
from swerl.orchestration.params import DAPOParams, PipelineParams, SamplerParams
from swerl.rollout.sampler import SamplerConfig
from swerl.rl.rewards import RewardConfig, check_turn_window

REPLY_TOO_LONG = ("agent.max_new_tokens (512) must be below engine.max_context (512): a reply has to fit in the context "
                  "beside its prompt; lower agent.max_new_tokens or raise engine.max_context")
T_MAX_TOO_SMALL = ("dapo.reward.t_max (5) is below sampler.agent.max_turns (40): past turn 5 R_length falls below -1 and a "
                   "success scores under 0; set dapo.reward.t_max to 40 (the turn budget) or lower sampler.agent.max_turns")
L_THR_UNREACHABLE = ("dapo.reward.l_thr (10) is not below sampler.agent.max_turns (4): no run reaches the length penalty, "
                     "so R_length is 0 for every trajectory; set dapo.reward.length_penalty to false to say so, or lower "
                     "dapo.reward.l_thr below 4")


def only_error(e: pytest.ExceptionInfo[ValidationError]) -> tuple[tuple, str]:
    (error,) = e.value.errors()
    return error["loc"], error["msg"]


# --- a reply fits in the context -------------------------------------------------------------


def test_a_reply_as_long_as_the_engines_context_is_refused():
    with pytest.raises(ValidationError) as e:
        SamplerConfig(engine={"kind": "scripted", "max_context": 512}, agent={"max_new_tokens": 512})
    assert only_error(e) == ((), f"Value error, {REPLY_TOO_LONG}")


def test_a_reply_shorter_than_the_context_or_an_engine_sized_context_is_accepted():
    assert SamplerConfig(engine={"max_context": 512}, agent={"max_new_tokens": 511}).agent.max_new_tokens == 511
    assert SamplerConfig(agent={"max_new_tokens": 100_000}).engine.max_context is None  # the model's window caps each turn


def test_the_pipeline_form_refuses_a_reply_longer_than_its_context_and_says_where():
    with pytest.raises(ValidationError) as e:
        PipelineParams(sampler={"engine": {"max_context": 512}, "agent": {"max_new_tokens": 512}})
    assert only_error(e) == (("sampler",), f"Value error, {REPLY_TOO_LONG}")


def test_the_reply_cap_is_the_agents_alone():
    assert "max_new_tokens" not in SamplingConfig.model_fields  # each request carries the agent's cap
    with pytest.raises(ValidationError, match="max_new_tokens"):
        SamplerParams(agent={"max_new_tokens": 48}, sampling={"max_new_tokens": 64})


# --- the turn limit and the reward's turn window ---------------------------------------------------


def test_a_reward_window_shorter_than_the_turn_limit_is_refused():
    with pytest.raises(ValidationError) as e:
        PipelineParams(sampler={"agent": {"max_turns": 40}}, dapo={"reward": {"l_thr": 1, "t_max": 5}})
    assert only_error(e) == ((), f"Value error, {T_MAX_TOO_SMALL}")


def test_a_length_penalty_no_run_can_reach_is_refused_unless_switched_off():
    # the learning run's case: 4 turns, L_thr 10 -> R_length is 0 for every trajectory
    with pytest.raises(ValidationError) as e:
        PipelineParams(sampler={"agent": {"max_turns": 4}})
    assert only_error(e) == ((), f"Value error, {L_THR_UNREACHABLE}")
    off = PipelineParams(sampler={"agent": {"max_turns": 4}}, dapo={"reward": {"length_penalty": False}})
    assert off.dapo.reward.length_penalty is False


def test_the_window_of_the_paper_and_of_the_embedded_default_fit_their_turn_limits():
    assert PipelineParams().dapo.reward.t_max == PipelineParams().sampler.agent.max_turns == 40
    check_turn_window(4, RewardConfig(l_thr=1, t_max=5))  # a 4-turn agent with the length penalty on


def test_without_dapo_iterations_the_reward_window_is_not_checked():
    p = PipelineParams(sampler={"agent": {"max_turns": 4}}, dapo={"iterations": 0})
    assert p.dapo.reward.l_thr == 10


def test_a_dapo_iteration_refuses_the_window_before_any_rollout(tmp_path):
    from flows.dapo_iteration import dapo_iteration

    with pytest.raises(ValueError, match=r"^dapo\.reward\.t_max \(5\) is below sampler\.agent\.max_turns \(40\)"):
        dapo_iteration.fn(tasks=tmp_path / "none.jsonl", policy_path="none", policy_version="0", iteration=1,
                          out=tmp_path / "out", dapo=DAPOParams(reward={"l_thr": 1, "t_max": 5}),
                          sampler=SamplerParams(agent={"max_turns": 40}))
    assert not (tmp_path / "out").exists()


# --- the CLI refuses before Docker is asked ---------------------------------------------------------


def test_the_rollout_command_refuses_a_reply_longer_than_its_context_before_any_work(tmp_path, monkeypatch):
    import swerl.cli.rollout as cli_rollout
    from swerl.cli import app

    monkeypatch.setattr(cli_rollout, "docker_ready", lambda: pytest.fail("Docker was asked before the settings were checked"))
    result = CliRunner().invoke(app, ["rollout", "--tasks", str(tmp_path / "t.jsonl"), "--model", "m", "--out",
                                      str(tmp_path / "out"), "--max-context", "512", "--max-new-tokens", "512"])
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == f"error: invalid rollout settings: SamplerConfig: Value error, {REPLY_TOO_LONG}"
