"""Where a training iteration's wall time went (``IterationTimes``), with worked numbers."""

from __future__ import annotations

import pytest

from swerl.orchestration.results import IterationTimes

# 10 trajectories' slot-seconds: 60 s of agents, 20 s of sandboxes' start and removal, 20 s waiting for verdicts
ROLLOUT = {"rollout/agent_s": 60.0, "rollout/sandbox_s": 20.0, "rollout/grading_s": 20.0}


def test_grading_takes_the_rollouts_wall_time_in_the_share_its_slots_spent_on_verdicts():
    times = IterationTimes.of(ROLLOUT, sampling_s=50.0, training_s=30.0, waiting_s=50.0)
    assert (times.sampling_s, times.grading_s, times.training_s, times.waiting_s, times.hidden_s) == (50.0, 10.0, 30.0, 50.0, 0.0)


def test_a_rollout_sampled_beside_the_update_before_hides_what_its_update_did_not_wait_for():
    times = IterationTimes.of(ROLLOUT, sampling_s=50.0, training_s=30.0, waiting_s=12.5)
    assert (times.waiting_s, times.hidden_s) == (12.5, 37.5)


def test_waiting_never_exceeds_the_sampling_and_an_ungraded_rollout_spent_nothing_on_grading():
    times = IterationTimes.of({"rollout/agent_s": 5.0}, sampling_s=4.0, training_s=1.0, waiting_s=9.0)
    assert (times.grading_s, times.waiting_s, times.hidden_s) == (0.0, 4.0, 0.0)
    assert IterationTimes.of({}, sampling_s=0.0, training_s=0.0, waiting_s=0.0).grading_s == 0.0


def test_the_split_goes_to_mlflow_under_time():
    times = IterationTimes.of(ROLLOUT, sampling_s=50.0, training_s=30.0, waiting_s=12.5)
    assert times.metrics() == pytest.approx({"time/sampling_s": 50.0, "time/grading_s": 10.0, "time/training_s": 30.0,
                                             "time/waiting_s": 12.5, "time/hidden_s": 37.5})
