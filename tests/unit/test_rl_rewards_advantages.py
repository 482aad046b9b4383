"""Rewards (success + turn-length penalty), which trajectories are used, and group advantages."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from swerl.agent.trajectory import ExitReason, Trajectory
from swerl.rl.advantages import batch_advantages, group_advantages
from swerl.rl.rewards import RewardConfig, ScoredTrajectory, reward, score_trajectories, turn_length_penalty


def traj(instance: str, sample: int, exit_reason: str = "submitted", resolved: bool | None = False, turns: int = 5) -> Trajectory:
    return Trajectory(instance_id=instance, sample_index=sample, trajectory_id=f"{instance}/{sample}", policy_version="v0",
                      exit_reason=ExitReason(exit_reason), resolved=resolved, num_turns=turns)


# --- rewards -----------------------------------------------------------------------------


@pytest.mark.parametrize(("turns", "penalty"), [
    (5, 0.0),  # below L_thr = 10
    (10, 0.0),  # at L_thr: (10 - 10) / 30
    (25, -0.5),  # (10 - 25) / (40 - 10)
    (40, -1.0),  # the whole budget spent
])
def test_turn_length_penalty_worked_examples(turns, penalty):
    assert turn_length_penalty(turns, l_thr=10, t_max=40) == penalty


def test_reward_is_success_plus_length_penalty():
    cfg = RewardConfig()
    assert reward(True, 5, cfg) == 1.0
    assert reward(False, 25, cfg) == -0.5
    assert reward(True, 40, cfg) == 0.0  # 1 + (10 - 40) / 30
    assert reward(True, 25, RewardConfig(t_max=80)) == 1.0 + (10 - 25) / 70


def test_length_penalty_off_gives_bare_success():
    assert reward(True, 40, RewardConfig(length_penalty=False)) == 1.0
    assert reward(False, 40, RewardConfig(length_penalty=False)) == 0.0


def test_reward_config_rejects_unknown_fields_and_an_empty_penalty_window():
    with pytest.raises(ValidationError, match="extra"):
        RewardConfig(l_threshold=10)
    with pytest.raises(ValidationError, match="t_max \\(10\\) must exceed l_thr \\(10\\)"):
        RewardConfig(l_thr=10, t_max=10)
    with pytest.raises(ValueError, match="turns must be >= 0"):
        turn_length_penalty(-1, 10, 40)


def test_limit_exits_are_kept_by_default_with_their_reason():
    scored = score_trajectories([traj("a", 0, "max_turns", False, 40), traj("a", 1, "context_exceeded", True, 25),
                                 traj("a", 2, "timeout", False, 3), traj("a", 3, "submitted", True, 5)], RewardConfig())
    assert [(s.reward, s.use, s.reason) for s in scored] == [
        (-1.0, "keep", "max_turns"), (0.5, "keep", "context_exceeded"), (0.0, "keep", "timeout"), (1.0, "keep", None)]


def test_limit_policy_mask_keeps_the_reward_and_drop_removes_it():
    runs = [traj("a", 0, "max_turns", False, 40), traj("a", 1, "format_errors", False, 4)]
    masked = score_trajectories(runs, RewardConfig(limit_policy="mask"))
    assert [(s.reward, s.use) for s in masked] == [(-1.0, "mask"), (0.0, "keep")]  # format errors are the policy's
    dropped = score_trajectories(runs, RewardConfig(limit_policy="drop"))
    assert [(s.reward, s.use, s.reason) for s in dropped] == [(None, "drop", "max_turns"), (0.0, "keep", None)]


def test_error_exits_and_ungraded_runs_are_excluded_by_default():
    scored = score_trajectories([traj("a", 0, "error", None, 2), traj("a", 1, "submitted", None, 6)], RewardConfig())
    assert [(s.reward, s.use, s.reason) for s in scored] == [(None, "drop", "error"), (None, "drop", "ungraded")]
    kept = score_trajectories([traj("a", 0, "error", None, 12)], RewardConfig(error_policy="keep"))
    assert (kept[0].reward, kept[0].use) == ((10 - 12) / 30, "keep")  # scored as unresolved


def test_infrastructure_failures_are_dropped_whatever_the_error_policy():
    never_started = traj("a", 0, "infra_error", None, 0)
    no_verdict = traj("a", 1, "submitted", None, 6).model_copy(update={"grade_failure": "infra_error"})
    for cfg in (RewardConfig(), RewardConfig(error_policy="keep")):
        scored = score_trajectories([never_started, no_verdict], cfg)
        assert [(s.reward, s.use, s.reason) for s in scored] == [(None, "drop", "infra_error")] * 2


# --- advantages ----------------------------------------------------------------------------


def test_group_of_two_successes_two_failures_mean_std():
    # mean 0.5; sample std (ddof=1) sqrt((4 x 0.25) / 3) = 0.57735; A = +-0.5 / (0.57735 + 1e-6) = +-0.866025
    a = group_advantages([1, 0, 0, 1])
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert a == pytest.approx([expected, -expected, -expected, expected], rel=1e-12)
    assert a[0] == pytest.approx(0.8660239, abs=1e-7)


def test_group_of_two_successes_two_failures_mean_and_leave_one_out():
    assert group_advantages([1, 0, 0, 1], mode="mean") == [0.5, -0.5, -0.5, 0.5]
    # a success against the others' mean 1/3: 2/3; a failure against 2/3: -2/3
    assert group_advantages([1, 0, 0, 1], mode="leave_one_out") == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3], rel=1e-15)


@pytest.mark.parametrize("mode", ["mean_std", "mean", "leave_one_out"])
def test_all_equal_or_lone_groups_have_exactly_zero_advantage(mode):
    assert group_advantages([0.3] * 10, mode=mode) == [0.0] * 10
    assert group_advantages([1.0], mode=mode) == [0.0]


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown advantage mode 'median'"):
        group_advantages([1, 0], mode="median")


def scored(instance: str, r: float | None, use: str = "keep") -> ScoredTrajectory:
    return ScoredTrajectory(f"{instance}/x", instance, r, use, None)


def test_batch_groups_by_instance_and_drops_zero_advantage_samples():
    batch = [scored("a", 1.0), scored("b", 0.0), scored("a", 0.0), scored("b", 0.0), scored("a", 0.0), scored("a", 1.0)]
    result = batch_advantages(batch, mode="mean")
    assert result.advantages == [0.5, 0.0, -0.5, 0.0, -0.5, 0.5]
    assert result.kept == [0, 2, 4, 5]  # group b is all-equal: no signal
    assert (result.n_total, result.n_excluded, result.n_zero_advantage) == (6, 0, 2)
    assert result.kept_fraction == 4 / 6


def test_masked_runs_count_in_the_baseline_but_dropped_runs_do_not():
    # group a: rewards 1, 0, and a masked -1 -> mean 0: the success gets 1, the failure 0 (itself dropped)
    batch = [scored("a", 1.0), scored("a", 0.0), scored("a", -1.0, "mask"), scored("a", None, "drop")]
    result = batch_advantages(batch, mode="mean")
    assert result.advantages == [1.0, 0.0, 0.0, 0.0]
    assert result.kept == [0]
    assert (result.n_excluded, result.n_zero_advantage, result.kept_fraction) == (2, 1, 0.25)
