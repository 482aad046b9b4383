"""Pass@1 over runs with its standard error, and the unbiased Pass@k estimator."""

import math

import pytest

from swerl.agent.trajectory import ExitReason, Trajectory
from swerl.eval.metrics import mean_and_sem, mean_pass_at_k, pass_at_1_over_runs, pass_at_k
from swerl.eval.report import build_report


def test_pass_at_k_matches_the_binomial_formula():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 6, 5) == 1.0  # fewer than k failures: some draw always succeeds


def test_pass_at_k_is_not_the_naive_estimate():
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(4, 2, 2) != pytest.approx(1 - 0.5**2)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_mean_and_sem():
    mean, sem = mean_and_sem([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert sem == pytest.approx(0.2 / math.sqrt(3))
    assert mean_and_sem([0.5]) == (0.5, 0.0)


def test_pass_at_1_is_the_mean_over_runs_with_its_sem():
    outcomes = {"a": [True, True, False], "b": [False, True, False]}
    mean, sem, per_run = pass_at_1_over_runs(outcomes)
    assert per_run == [0.5, 1.0, 0.0]
    assert mean == pytest.approx(0.5)
    assert sem == pytest.approx(0.5 / math.sqrt(3))
    assert mean_pass_at_k(outcomes, 3) == 1.0
    assert mean_pass_at_k(outcomes, 1) == pytest.approx((2 / 3 + 1 / 3) / 2)


def test_unequal_run_counts_are_refused():
    with pytest.raises(ValueError, match="different numbers of runs"):
        pass_at_1_over_runs({"a": [True], "b": [True, False]})


def _traj(iid, k, resolved):
    return Trajectory(instance_id=iid, sample_index=k, trajectory_id=f"{iid}/{k}", policy_version="0",
                      exit_reason=ExitReason.submitted, resolved=resolved, num_turns=2)


def test_report_counts_ungraded_as_unresolved_and_names_missing_runs():
    trajs = [_traj("a", 0, True), _traj("a", 1, None), _traj("b", 0, False), _traj("b", 1, True)]
    report = build_report(trajs, runs=2)
    assert report.pass_at_1_per_run == [0.5, 0.5]
    assert report.ungraded == 1
    assert report.pass_at_k == {1: 0.5, 2: 1.0}
    with pytest.raises(ValueError, match="missing runs for 2 tasks"):
        build_report(trajs, runs=3)


def test_a_paired_rise_is_the_mean_change_per_task_with_its_sem_over_tasks():
    from swerl.eval.metrics import paired_difference

    before = {"a": [False, False], "b": [True, False], "c": [False, False], "d": [True, True]}
    after = {"a": [True, True], "b": [True, True], "c": [False, False], "d": [True, True]}
    mean, sem = paired_difference(before, after)
    # per-task changes 1.0, 0.5, 0, 0: mean 0.375, sample std 0.4787, over sqrt(4)
    assert mean == 0.375
    assert round(sem, 6) == round(math.sqrt(((0.625**2) + (0.125**2) + 2 * (0.375**2)) / 3 / 4), 6) == 0.239357


def test_a_rise_over_runs_combines_the_two_pass_at_1_sems():
    from swerl.eval.metrics import difference_over_runs

    before = {"a": [False, False], "b": [True, False], "c": [False, False], "d": [True, True]}
    after = {"a": [True, True], "b": [True, True], "c": [False, False], "d": [True, True]}
    rise, se = difference_over_runs(before, after)
    # before: runs 0.5 and 0.25 (mean 0.375, SEM 0.125); after: 0.75 and 0.75 (SEM 0)
    assert rise == 0.375
    assert se == 0.125


def test_a_rise_over_runs_needs_the_same_tasks_on_both_sides():
    from swerl.eval.metrics import difference_over_runs

    with pytest.raises(ValueError, match=r"different tasks, e.g. \['b'\]"):
        difference_over_runs({"a": [True], "b": [False]}, {"a": [True]})


def test_a_paired_rise_needs_the_same_tasks_on_both_sides():
    from swerl.eval.metrics import paired_difference

    with pytest.raises(ValueError, match=r"different tasks, e.g. \['b'\]"):
        paired_difference({"a": [True], "b": [False]}, {"a": [True]})


def test_a_difference_averaged_over_seeds_combines_their_independent_standard_errors():
    from swerl.eval.metrics import mean_over_seeds

    # three seeds: +6 (SE 3), +3 (SE 4), 0 (SE 0): mean +3, SE sqrt(9 + 16) / 3
    assert mean_over_seeds([(6.0, 3.0), (3.0, 4.0), (0.0, 0.0)]) == (3.0, 5.0 / 3)
    assert mean_over_seeds([(0.25, 0.5)]) == (0.25, 0.5)
    with pytest.raises(ValueError, match="no seeds"):
        mean_over_seeds([])


def test_pass_at_1_reads_with_its_error_and_one_run_says_it_has_none():
    from swerl.eval.report import pass_at_1_text

    assert pass_at_1_text(0.125, 0.021, 4) == "12.5% ± 2.1%"
    assert pass_at_1_text(0.2, 0.0, 1) == "20.0% (1 run, no SEM)"
