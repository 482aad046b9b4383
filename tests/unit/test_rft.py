"""RFT keeps resolved runs and trains on their sampled tokens, format-error replies masked."""

import pytest

from swerl.agent.trajectory import ExitReason, Trajectory, Turn
from swerl.rl.rft import RFTConfig, reply_spans, select_rft, training_example


def traj(iid="a", k=0, resolved=True, reason=ExitReason.submitted, format_error_turn=None, exact=True):
    # prompt [1,2]; turn 0: reply [10,11] + suffix [20]; turn 1: reply [12,13,14] + suffix [21,22]; turn 2: reply [15]
    turns = [Turn(index=0, reply="a", n_action_tokens=2, n_observation_tokens=1),
             Turn(index=1, reply="b", n_action_tokens=3, n_observation_tokens=2),
             Turn(index=2, reply="c", n_action_tokens=1)]
    if format_error_turn is not None:
        turns[format_error_turn].format_error = "no command found"
    return Trajectory(
        instance_id=iid, sample_index=k, trajectory_id=f"{iid}/{k}", policy_version="0", prompt_ids=[1, 2],
        response_ids=[10, 11, 20, 12, 13, 14, 21, 22, 15], action_mask=[1, 1, 0, 1, 1, 1, 0, 0, 1],
        logprobs=[-0.1, -0.2, 0.0, -0.3, -0.4, -0.5, 0.0, 0.0, -0.6], turns=turns, exit_reason=reason,
        resolved=resolved, exact_ids=exact, num_turns=3,
    )


def test_reply_spans_follow_the_turn_token_counts():
    assert reply_spans(traj()) == [(0, 2), (3, 6), (8, 9)]


def test_inconsistent_turn_counts_are_an_error():
    t = traj()
    t.turns[0].n_observation_tokens = 5
    with pytest.raises(ValueError, match="sum to 13, the response has 9"):
        reply_spans(t)


def test_the_example_is_the_stored_ids_with_the_prompt_masked():
    ex = training_example(traj())
    assert ex.input_ids == [1, 2, 10, 11, 20, 12, 13, 14, 21, 22, 15]
    assert ex.action_mask == [0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1]
    assert ex.old_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, -0.3, -0.4, -0.5, 0.0, 0.0, -0.6]


def test_a_format_error_reply_stays_in_context_but_leaves_the_loss():
    ex = training_example(traj(format_error_turn=1))
    assert ex.input_ids == [1, 2, 10, 11, 20, 12, 13, 14, 21, 22, 15]
    assert ex.action_mask == [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1]
    assert ex.old_logprobs[5:8] == [0.0, 0.0, 0.0]
    assert training_example(traj(format_error_turn=1), mask_format_errors=False).action_mask[5:8] == [1, 1, 1]


def test_selection_keeps_resolved_runs_and_counts_the_rest():
    runs = [traj("a", 0), traj("a", 1, resolved=False), traj("b", 0, resolved=None), traj("b", 1, reason=ExitReason.max_turns),
            traj("c", 0, exact=False), traj("c", 1), traj("c", 2)]
    kept, why = select_rft(runs, RFTConfig(max_per_task=1))
    assert [e.trajectory_id for e in kept] == ["a/0", "b/1", "c/1"]
    assert why == {"unresolved": 1, "ungraded": 1, "re-tokenized ids": 1, "task quota reached": 1}
    kept, why = select_rft(runs, RFTConfig(require_submitted=True, require_exact_ids=False))
    assert [e.trajectory_id for e in kept] == ["a/0", "c/0", "c/1", "c/2"]
    assert why["not submitted (max_turns)"] == 1


def test_a_warm_start_on_noisy_demonstrations_keeps_the_unresolved_ones_but_never_the_ungraded():
    runs = [traj("a", 0), traj("a", 1, resolved=False), traj("b", 0, resolved=None)]
    kept, why = select_rft(runs, RFTConfig(require_resolved=False))
    assert [e.trajectory_id for e in kept] == ["a/0", "a/1"]
    assert why == {"ungraded": 1}


def test_ungraded_demonstrations_are_kept_only_when_asked_and_never_after_an_infrastructure_failure():
    runs = [traj("a", 0, resolved=None), traj("b", 0, resolved=None, reason=ExitReason.infra_error)]
    kept, why = select_rft(runs, RFTConfig(require_resolved=False, require_graded=False))
    assert [e.trajectory_id for e in kept] == ["a/0"] and why == {"ungraded": 1}
    assert select_rft(runs, RFTConfig(require_graded=False))[0] == []  # rejection sampling needs verdicts
