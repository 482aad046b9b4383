"""Rejection fine-tuning data, the paper's first stage: the resolved trajectories, as trained.

A kept trajectory is trained on exactly the tokens its policy sampled (the stored ids, no
re-rendering), except the replies that caused a format error: those stay in the context
(the next turn's observation refers to them) but leave the loss, so the model does not
learn to make them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from swerl.agent.trajectory import ExitReason, Trajectory


class RFTConfig(BaseModel):
    """Which trajectories RFT keeps and what it trains on (the paper's settings as defaults)."""

    model_config = ConfigDict(extra="forbid")

    require_submitted: bool = Field(False, description="Keep only runs that ended with `submit` (resolved runs that hit a limit are kept otherwise).")
    require_resolved: bool = Field(True, description="Keep only resolved runs (rejection sampling); False trains on every "
                                   "graded run, as a warm start does on a noisy demonstrator's.")
    require_graded: bool = Field(True, description="Keep only runs with a verdict. False (with require_resolved false) also "
                                 "keeps runs of a rollout that did not grade, as a warm start on ungraded demonstrations "
                                 "does; a run whose sandbox or grading failed is left out all the same.")
    mask_format_errors: bool = Field(True, description="Replies that caused a format error stay in context but out of the loss.")
    max_per_task: int | None = Field(None, ge=1, description="Keep at most this many resolved runs per task (first by sample index).")
    require_exact_ids: bool = Field(True, description="Refuse runs whose ids were re-tokenized from text by an HTTP engine.")


@dataclass(frozen=True)
class TrainExample:
    """One sequence for the trainer: ids, the tokens the loss sees, the sampler's log-probs."""

    trajectory_id: str
    instance_id: str
    input_ids: list[int]
    action_mask: list[int]  # over input_ids; 0 on the prompt
    old_logprobs: list[float]  # over input_ids; 0 where action_mask is 0


def reply_spans(traj: Trajectory) -> list[tuple[int, int]]:
    """[start, end) of each turn's reply inside ``response_ids``, from the per-turn token counts."""
    spans, pos = [], 0
    for turn in traj.turns:
        spans.append((pos, pos + turn.n_action_tokens))
        pos += turn.n_action_tokens + turn.n_observation_tokens
    if pos != len(traj.response_ids):
        raise ValueError(f"{traj.trajectory_id}: turn token counts sum to {pos}, the response has {len(traj.response_ids)} ids")
    return spans


def training_example(traj: Trajectory, mask_format_errors: bool = True) -> TrainExample:
    """The trajectory's ids with its action mask, format-error replies masked out when asked."""
    mask = list(traj.action_mask)
    if mask_format_errors:
        for turn, (start, end) in zip(traj.turns, reply_spans(traj)):
            if turn.format_error is not None:
                mask[start:end] = [0] * (end - start)
    prompt = len(traj.prompt_ids)
    logprobs = [lp if m else 0.0 for lp, m in zip(traj.logprobs, mask)]
    return TrainExample(traj.trajectory_id, traj.instance_id, traj.ids, [0] * prompt + mask, [0.0] * prompt + logprobs)


def select_rft(trajectories: Sequence[Trajectory], config: RFTConfig | None = None) -> tuple[list[TrainExample], dict[str, int]]:
    """The RFT set and a count of why the others were left out."""
    config = config or RFTConfig()
    kept: list[TrainExample] = []
    why: dict[str, int] = {}
    per_task: dict[str, int] = {}

    def skip(reason: str) -> None:
        why[reason] = why.get(reason, 0) + 1

    for t in sorted(trajectories, key=lambda t: (t.instance_id, t.sample_index)):
        if t.infra_failed or (t.resolved is None and (config.require_graded or config.require_resolved)):
            skip("ungraded")
        elif not t.resolved and config.require_resolved:
            skip("unresolved")
        elif config.require_submitted and t.exit_reason is not ExitReason.submitted:
            skip(f"not submitted ({t.exit_reason.value})")
        elif config.require_exact_ids and not t.exact_ids:
            skip("re-tokenized ids")
        elif config.max_per_task is not None and per_task.get(t.instance_id, 0) >= config.max_per_task:
            skip("task quota reached")
        else:
            example = training_example(t, config.mask_format_errors)
            if not any(example.action_mask):
                skip("no trainable tokens")
                continue
            kept.append(example)
            per_task[t.instance_id] = per_task.get(t.instance_id, 0) + 1
    return kept, why
