"""The RL math of the paper (Golubev et al., arXiv 2508.03501): rewards, group advantages, the
DAPO loss, chunked action log-probs and micro-batching. Pure functions; the training loop lives
elsewhere."""

import importlib
from typing import Any

# names -> the module that defines them, imported on first use: the rewards are pure Python, and a
# command that only needs them (the CLI's options, a grader) should not pay torch's import
_HOME = {
    "BatchAdvantages": "advantages", "batch_advantages": "advantages", "group_advantages": "advantages",
    "action_token_count": "batching", "pack_microbatches": "batching",
    "action_logprobs": "logprobs", "action_logprobs_and_entropy": "logprobs", "sequence_action_logprobs": "logprobs",
    "clipped_objective": "loss", "dapo_loss": "loss", "masked_mean": "loss",
    "RewardConfig": "rewards", "ScoredTrajectory": "rewards", "reward": "rewards", "score_trajectories": "rewards",
    "score_trajectory": "rewards", "turn_length_penalty": "rewards",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'swerl.rl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"swerl.rl.{_HOME[name]}"), name)


__all__ = [
    "BatchAdvantages", "RewardConfig", "ScoredTrajectory", "action_logprobs", "action_logprobs_and_entropy",
    "action_token_count", "batch_advantages", "clipped_objective", "dapo_loss", "group_advantages", "masked_mean",
    "pack_microbatches", "reward", "score_trajectories", "score_trajectory", "sequence_action_logprobs",
    "turn_length_penalty",
]
