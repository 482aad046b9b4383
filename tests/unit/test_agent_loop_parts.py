"""Pieces of the agent loop that need no sandbox: truncation, seeds, shell state, prompts."""

import pytest

from swerl.agent.loop import AgentConfig, _ShellState, truncate_middle, turn_seed
from swerl.agent.prompts import PromptError, Prompts


def test_truncate_middle_keeps_head_and_tail_with_a_marker():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    out = truncate_middle(text, 280)
    assert out.startswith(text[:100]) and out.endswith(text[-100:])
    assert "[... 800 characters truncated ...]" in out
    assert truncate_middle("short", 280) == "short"


def test_turn_seeds_are_stable_and_distinct():
    assert turn_seed(0, "t/0", 1) == turn_seed(0, "t/0", 1)
    assert len({turn_seed(0, "t/0", 1), turn_seed(0, "t/0", 2), turn_seed(0, "t/1", 1), turn_seed(1, "t/0", 1)}) == 4
    assert turn_seed(None, "t/0", 1) is None


def test_shell_state_follows_cd_and_the_open_file_and_hides_its_epilogue():
    shell = _ShellState("/testbed")
    wrapped = shell.wrap("cd src && ls")
    assert wrapped.startswith("cd -- '/testbed' 2>/dev/null\ncd src && ls\n")
    output = f"a.py\nb.py\n{shell.mark}/testbed/src{shell.mark}" + '{"file": "/testbed/src/a.py", "first": 1}'
    assert shell.absorb(output) == "a.py\nb.py"
    assert (shell.cwd, shell.open_file) == ("/testbed/src", "/testbed/src/a.py")


def test_output_without_epilogue_leaves_the_state_alone():
    shell = _ShellState("/testbed")
    assert shell.absorb("killed") == "killed"
    assert (shell.cwd, shell.open_file) == ("/testbed", None)


def test_quotes_in_the_directory_are_escaped():
    shell = _ShellState("/tmp/it's")
    assert shell.wrap("ls").startswith("cd -- '/tmp/it'\\''s' 2>/dev/null")


def test_prompt_line_and_observation_templates_render():
    p = Prompts()
    line = p.render("prompt_line", open_file=None, cwd="/testbed")
    assert line == "(Open file: n/a)\n(Current directory: /testbed)\nbash-$"
    assert p.render("observation", output="", timed_out=False, command_timeout_s=5, prompt_line=line) == (
        "Your command ran successfully and did not produce any output.\n" + line
    )
    assert p.render("observation", output="partial", timed_out=True, command_timeout_s=5, prompt_line=line) == (
        "The command timed out after 5 seconds and was killed.\npartial\n" + line
    )


def test_prompt_folder_overrides_one_template_and_keeps_the_rest(tmp_path):
    (tmp_path / "format_error.j2").write_text("NOPE: {{ error }}")
    p = Prompts(tmp_path)
    assert p.render("format_error", error="no command found", prompt_line="x") == "NOPE: no command found"
    assert p.render("prompt_line", open_file="/a", cwd="/b").startswith("(Open file: /a)")
    with pytest.raises(PromptError, match="error"):
        Prompts(tmp_path).render("format_error", prompt_line="x")
    with pytest.raises(PromptError, match="does not exist"):
        Prompts(tmp_path / "nope")


def test_agent_config_bounds():
    with pytest.raises(ValueError):
        AgentConfig(max_turns=0)
    assert AgentConfig().max_turns == 40


def _agent_and_trajectory(tok, chat, **config):
    from swerl.agent.loop import Agent
    from swerl.agent.trajectory import ExitReason, Trajectory
    from swerl.inference.scripted import ScriptedEngine

    agent = Agent(ScriptedEngine(tok, {}), chat, AgentConfig(**config))
    traj = Trajectory(instance_id="t", sample_index=0, trajectory_id="t/0", policy_version="7",
                      prompt_ids=[1, 2, 3], exit_reason=ExitReason.max_turns)
    return agent, traj


def test_a_reply_is_recorded_cut_after_its_first_command_and_its_tokens_accounted(tok, chat):
    from swerl.inference.base import Generation

    agent, traj = _agent_and_trajectory(tok, chat, end_reply_at_command=True)
    whole = "Look.\n```\nls\n```\nThen.\n```\npwd\n```"
    ids = tok(whole, add_special_tokens=False)["input_ids"]
    turn, kept = agent._record_reply(traj, Generation("t/0#0", ids, [-0.5] * len(ids), "length", "8"), 0, 1.5)
    assert chat.reply_text(kept).startswith("Look.\n```\nls\n```") and "pwd" not in chat.reply_text(kept)
    assert (turn.index, turn.finish_reason, turn.dropped_tokens, turn.n_action_tokens) == (
        0, "stop", len(ids) - len(kept), len(kept))
    assert (turn.reply, turn.generation_s, turn.policy_version) == (chat.reply_text(kept), 1.5, "8")
    assert (traj.response_ids, traj.action_mask, traj.logprobs) == (kept, [1] * len(kept), [-0.5] * len(kept))
    assert traj.turns == [turn] and traj.messages == [{"role": "assistant", "content": turn.reply}]


def test_an_observation_is_appended_masked_out_or_refused_when_no_turn_would_fit(tok, chat):
    from swerl.inference.base import Generation

    agent, traj = _agent_and_trajectory(tok, chat)
    ids = tok("Run.\n```\nls\n```", add_special_tokens=False)["input_ids"]
    turn, kept = agent._record_reply(traj, Generation("t/0#0", ids, [0.0] * len(ids), "stop"), 0, 0.0)
    before = len(traj.response_ids)
    assert agent._account_observation(traj, turn, kept, "a.py\nb.py") is True
    added = len(traj.response_ids) - before
    assert added == turn.n_observation_tokens > 0
    assert traj.action_mask[before:] == [0] * added and traj.logprobs[before:] == [0.0] * added
    assert traj.messages[-1] == {"role": "user", "content": "a.py\nb.py"}
    # a context that the observation would leave too small for another turn: refused, nothing appended
    agent.max_context = len(traj.prompt_ids) + len(traj.response_ids) + agent.config.min_turn_tokens
    length = len(traj.response_ids)
    assert agent._account_observation(traj, turn, kept, "more output") is False and len(traj.response_ids) == length
