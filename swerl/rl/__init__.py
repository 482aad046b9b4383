"""The RL math of the paper (Golubev et al., arXiv 2508.03501): rewards, group advantages, the
DAPO loss, chunked action log-probs and micro-batching. Pure functions; the training loop lives
elsewhere."""

from swerl.rl.advantages import BatchAdvantages, batch_advantages, group_advantages
from swerl.rl.batching import action_token_count, pack_microbatches
from swerl.rl.logprobs import action_logprobs, action_logprobs_and_entropy, sequence_action_logprobs
from swerl.rl.loss import clipped_objective, dapo_loss, masked_mean
from swerl.rl.rewards import RewardConfig, ScoredTrajectory, reward, score_trajectories, score_trajectory, turn_length_penalty

__all__ = [
    "BatchAdvantages", "RewardConfig", "ScoredTrajectory", "action_logprobs", "action_logprobs_and_entropy",
    "action_token_count", "batch_advantages", "clipped_objective", "dapo_loss", "group_advantages", "masked_mean",
    "pack_microbatches", "reward", "score_trajectories", "score_trajectory", "sequence_action_logprobs",
    "turn_length_penalty",
]
