"""Rewards, as in the paper's RL loop: ``R = success (0/1) + R_length``.

``R_length`` is counted in TURNS: 0 below ``L_thr``, then ``(L_thr - turns) / (T_max - L_thr)``,
which falls linearly to -1 at the turn budget ``T_max``. With L_thr 10 and T_max 40: 5 turns
-> 0, 10 turns -> 0, 25 turns -> -0.5, and a success at 40 turns -> 1 - 1 = 0.

Which trajectories are trained on is decided here too, one of three uses each:

* ``keep``: in its group's baseline and in the loss;
* ``mask``: in its group's baseline, out of the loss;
* ``drop``: in neither.

The paper keeps runs that hit the context or turn limit ("dropping them hides looping
behaviour, which then grows"); infrastructure failures are not the policy's fault and
are dropped by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.agent.trajectory import ExitReason, Trajectory

Use = Literal["keep", "mask", "drop"]

# Budgets the policy spends by its own choices: turns, context, and wall-clock time (a
# policy that runs slow commands or loops spends the deadline like it spends turns).
LIMIT_EXITS = frozenset({ExitReason.max_turns, ExitReason.context_exceeded, ExitReason.timeout})


class RewardConfig(BaseModel):
    """The reward and which trajectories the update may use."""

    model_config = ConfigDict(extra="forbid")

    l_thr: int = Field(10, ge=0, description="L_thr: the turn count from which the length penalty applies.")
    t_max: int = Field(40, ge=1, description="T_max: the turn budget; the length penalty reaches -1 there.")
    length_penalty: bool = Field(True, description="Add R_length to the reward; off gives the bare 0/1 success.")
    limit_policy: Use = Field("keep", description="Use of runs that hit the turn, context or time limit (the paper keeps them).")
    error_policy: Use = Field(
        "drop", description="Use of runs that ended in an infrastructure error or could not be graded; "
        "'keep' or 'mask' scores them as unresolved.",
    )

    @model_validator(mode="after")
    def _penalty_window(self) -> RewardConfig:
        if self.t_max <= self.l_thr:
            raise ValueError(f"t_max ({self.t_max}) must exceed l_thr ({self.l_thr}): the penalty divides by t_max - l_thr")
        return self


def check_turn_window(max_turns: int, reward: RewardConfig) -> None:
    """Refuse a length penalty that does not fit the agent's turn limit (ValueError naming the fields and the fix).

    T_max is the turn budget: below ``max_turns`` a long success would score under 0 (R_length < -1 past T_max).
    An L_thr at or above ``max_turns`` is a penalty no run can reach: R_length is 0 for every trajectory, which
    the config must say (``length_penalty: false``) rather than hide.
    """
    if not reward.length_penalty:
        return
    if reward.t_max < max_turns:
        raise ValueError(f"dapo.reward.t_max ({reward.t_max}) is below sampler.agent.max_turns ({max_turns}): past turn "
                         f"{reward.t_max} R_length falls below -1 and a success scores under 0; set dapo.reward.t_max to "
                         f"{max_turns} (the turn budget) or lower sampler.agent.max_turns")
    if reward.l_thr >= max_turns:
        raise ValueError(f"dapo.reward.l_thr ({reward.l_thr}) is not below sampler.agent.max_turns ({max_turns}): no run "
                         "reaches the length penalty, so R_length is 0 for every trajectory; set dapo.reward.length_penalty "
                         f"to false to say so, or lower dapo.reward.l_thr below {max_turns}")


def turn_length_penalty(turns: int, l_thr: int, t_max: int) -> float:
    """R_length: 0 if ``turns < l_thr`` else ``(l_thr - turns) / (t_max - l_thr)``."""
    if turns < 0:
        raise ValueError(f"turns must be >= 0, got {turns}")
    if t_max <= l_thr:
        raise ValueError(f"t_max ({t_max}) must exceed l_thr ({l_thr})")
    if turns < l_thr:
        return 0.0
    return (l_thr - turns) / (t_max - l_thr)


def reward(success: bool, turns: int, cfg: RewardConfig) -> float:
    """R = success (0/1) + R_length (R_length only when ``cfg.length_penalty``)."""
    r_success = 1.0 if success else 0.0
    r_length = turn_length_penalty(turns, cfg.l_thr, cfg.t_max) if cfg.length_penalty else 0.0
    return r_success + r_length


@dataclass(frozen=True)
class ScoredTrajectory:
    """One trajectory's reward and use. ``reward`` is None when the trajectory is dropped."""

    trajectory_id: str
    instance_id: str
    reward: float | None
    use: Use
    reason: str | None  # why it is masked, dropped, or kept on a limit exit; None for an ordinary run


def score_trajectory(traj: Trajectory, cfg: RewardConfig) -> ScoredTrajectory:
    """Reward and use of one graded trajectory."""
    if traj.infra_failed:  # the sandbox never let the policy act, or grading gave no verdict: never the policy's
        use, reason = "drop", "infra_error"
    elif traj.exit_reason is ExitReason.error:
        use, reason = cfg.error_policy, "error"
    elif traj.resolved is None:  # grading hit an infrastructure error, or it was never graded
        use, reason = cfg.error_policy, "ungraded"
    elif traj.exit_reason in LIMIT_EXITS:
        use, reason = cfg.limit_policy, traj.exit_reason.value
    else:
        use, reason = "keep", None
    r = None if use == "drop" else reward(bool(traj.resolved), traj.num_turns, cfg)
    return ScoredTrajectory(traj.trajectory_id, traj.instance_id, r, use, reason)


def score_trajectories(trajectories: Sequence[Trajectory], cfg: RewardConfig) -> list[ScoredTrajectory]:
    """``score_trajectory`` over a batch, in order."""
    return [score_trajectory(t, cfg) for t in trajectories]
