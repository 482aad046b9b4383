"""Group-relative advantages, as in the paper's modified DAPO: one scalar per trajectory.

``A = (R - mean_group(R)) / (std_group(R) + eps)``, the group being the G samples of one
task. The std is the SAMPLE std (ddof=1, divisor G-1): the DAPO reference implementation
runs verl's ``compute_grpo_outcome_advantage``, which takes ``torch.std`` (unbiased by
default), as does TRL's GRPO trainer; matching them keeps learning rates and clip ranges
comparable. For the paper's G = 10 the two conventions differ by a factor sqrt(10/9).

Samples with zero advantage carry no gradient and are dropped, not re-sampled (the paper's
variant of DAPO's dynamic sampling); the fraction kept is reported.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from swerl.rl.rewards import ScoredTrajectory

Mode = Literal["mean_std", "mean", "leave_one_out"]


def _mean_std(rewards: Sequence[float], eps: float) -> list[float]:
    g = len(rewards)
    mean = math.fsum(rewards) / g
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (g - 1))  # ddof=1, as torch.std
    return [(r - mean) / (std + eps) for r in rewards]


def _mean(rewards: Sequence[float], eps: float) -> list[float]:
    mean = math.fsum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def _leave_one_out(rewards: Sequence[float], eps: float) -> list[float]:
    g, total = len(rewards), math.fsum(rewards)
    return [r - (total - r) / (g - 1) for r in rewards]


ESTIMATORS: dict[str, Callable[[Sequence[float], float], list[float]]] = {
    "mean_std": _mean_std,  # (R - mean) / (std + eps): the paper
    "mean": _mean,  # R - mean: no std division (Dr. GRPO)
    "leave_one_out": _leave_one_out,  # R_i - mean of the others (RLOO)
}


def group_advantages(rewards: Sequence[float], eps: float = 1e-6, mode: Mode = "mean_std") -> list[float]:
    """Advantages of one group of rewards.

    A group whose rewards are all equal, or of a single sample, has no baseline to compare
    against and gets exactly 0.0 everywhere (verl gives a lone sample A = R instead).
    """
    if mode not in ESTIMATORS:
        raise ValueError(f"unknown advantage mode {mode!r}; choose one of {sorted(ESTIMATORS)}")
    if not rewards:
        raise ValueError("an empty group has no advantages")
    if len(rewards) == 1 or max(rewards) == min(rewards):
        return [0.0] * len(rewards)
    return ESTIMATORS[mode](rewards, eps)


@dataclass(frozen=True)
class BatchAdvantages:
    """Advantages of a batch, and which trajectories the update trains on."""

    advantages: list[float]  # one per input trajectory; 0.0 for masked and dropped ones
    kept: list[int]  # indices trained on: use 'keep' and |A| >= min_abs
    n_total: int  # trajectories in the batch
    n_excluded: int  # masked or dropped by their reward use
    n_zero_advantage: int  # usable but |A| < min_abs, so dropped

    @property
    def kept_fraction(self) -> float:
        """Share of the batch's trajectories that reach the loss."""
        return len(self.kept) / self.n_total if self.n_total else 0.0


def batch_advantages(scored: Sequence[ScoredTrajectory], eps: float = 1e-6, mode: Mode = "mean_std",
                     min_abs: float = 1e-6) -> BatchAdvantages:
    """Group by ``instance_id``, compute advantages per group, drop zero-advantage samples.

    Dropped trajectories are left out of their group's statistics; masked ones count in
    them but are not trained on.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(scored):
        if s.use != "drop":
            groups[s.instance_id].append(i)
    advantages = [0.0] * len(scored)
    for members in groups.values():
        for i, a in zip(members, group_advantages([scored[i].reward for i in members], eps, mode)):
            advantages[i] = a if scored[i].use == "keep" else 0.0
    usable = [i for i, s in enumerate(scored) if s.use == "keep"]
    kept = [i for i in usable if abs(advantages[i]) >= min_abs]
    return BatchAdvantages(advantages, kept, len(scored), len(scored) - len(usable), len(usable) - len(kept))
