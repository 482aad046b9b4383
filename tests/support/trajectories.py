"""Checks every stored trajectory must pass, shared by the agent-loop and rollout tests."""

from __future__ import annotations


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


def changed_lines(patch: str) -> list[str]:
    """The lines a diff adds or removes, without headers: equal for two diffs that make the same change."""
    return [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def cmd(text: str) -> str:
    """A policy reply that runs one command."""
    return f"Next step.\n```\n{text}\n```"
