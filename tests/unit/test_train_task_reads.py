"""The training tasks read their rollout once: the rollout's figures, RFT's selection and the
update all come from that one read, and the flow gets figures back, never trajectories."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from prefect.logging import disable_run_logger

from test_rft import traj  # tests/unit is on sys.path (pytest's prepend import mode)

from swerl.rl.rewards import RewardConfig
from swerl.rollout.store import TrajectoryStore
from swerl.stages.train import DAPOStage, RFTStage
from swerl.train import data
from tasks.train import train_dapo_task, train_rft_task


@pytest.fixture
def reads(monkeypatch):
    """How many times the trajectories are read from disk."""
    calls = []
    read = data.read_trajectories

    def counted(paths):
        calls.append(list(paths))
        return read(paths)

    monkeypatch.setattr(data, "read_trajectories", counted)
    return calls


def _store(tmp_path, runs):
    store = TrajectoryStore(tmp_path / "rollout" / "trajectories")
    for t in runs:
        t.grade_failure = None if t.resolved else "tests_failed"
        store.append(t)
    return store.directory


def test_rft_reads_once_and_returns_the_rollout_figures_and_the_selection(tmp_path, reads):
    store = _store(tmp_path, [traj("a", 0, resolved=False), traj("a", 1, resolved=False)])
    stage = RFTStage(trajectories=[store], model="none", out=tmp_path / "train")
    with disable_run_logger():
        result = train_rft_task.fn(stage, wall_s=2.0)
    assert reads == [[store]]
    assert (result.trained, result.reason) == (False, "no resolved trajectory kept among 2: 2 unresolved")
    assert result.selection.model_dump() == {"trajectories": 2, "kept": 0, "skipped": {"unresolved": 2}, "tasks_kept": 0}
    figures = result.rollout
    assert figures.trajectories == 2
    assert asdict(figures.behaviour) == {"trajectories": 2, "graded": 2, "resolved": 0, "exits": {"submitted": 2},
                                      "replies": 6, "no_command": 6, "cut": 0}
    m = figures.metrics
    assert (m["rollout/trajectories"], m["rollout/solved_fraction"], m["rollout/action_tokens"]) == (2.0, 0.0, 12.0)
    assert m["rollout/tokens_per_s"] == 6.0  # 12 action tokens over the rollout's 2 s
    assert (m["rollout/failure_tests_failed"], m["grading/tampered"]) == (2.0, 0.0)


def test_dapo_reads_once_and_scores_the_rollout_with_the_stage_s_rewards(tmp_path, reads):
    store = _store(tmp_path, [traj("a", 0, resolved=False), traj("a", 1, resolved=False)])
    stage = DAPOStage(trajectories=[store], model="none", out=tmp_path / "train", require_version="0",
                      reward=RewardConfig(l_thr=1, t_max=5))
    with disable_run_logger():
        result = train_dapo_task.fn(stage)
    assert reads == [[store]]
    assert result.trained is False and result.reason.startswith("nothing to train on among 2 trajectories")
    assert result.selection is None
    m = result.rollout.metrics
    assert m["rollout/mean_reward"] == -0.5  # (1 - 3) / 4: three turns past l_thr 1 in a window of 4
    assert m["rollout/groups_dropped_fraction"] == 1.0 and "rollout/tokens_per_s" not in m
