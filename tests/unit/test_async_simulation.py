"""The simulation of synchronous and bounded-staleness DAPO iterations (swerl.rl.async_simulation): worked
examples computed by hand, the facts any schedule must keep, and its refusals."""

from __future__ import annotations

import random

import pytest

from swerl.rl.async_simulation import ClusterShape, StageTimes, overlap_bound, simulate, sweep, update_seconds


def shape(slots: int = 2, graders: int | None = 2, iterations: int = 3, per_iteration: int = 4,
          **speedups: float) -> ClusterShape:
    return ClusterShape(sampler_slots=slots, grading_slots=graders, iterations=iterations,
                        trajectories_per_iteration=per_iteration, **speedups)


# 4 trajectories of 10 s on 2 slots, each graded for 1 s on a grader of its own, an update of 30 s, 3 iterations.
EVEN = StageTimes(sampling_s=[10.0] * 4, grading_s=[1.0] * 4, train_s=30.0)


def test_synchronous_iterations_are_sample_then_grade_then_train():
    # two waves of sampling, 0-10 and 10-20; the second wave's gradings end at 21, when the data is complete;
    # the update runs 21-51. Each iteration: 20 + 1 + 30 = 51 s; three: 153 s.
    r = simulate(EVEN, shape(), max_staleness=0)
    assert r.iteration_wall_s == [51.0, 51.0, 51.0] and r.total_wall_s == 153.0
    assert (r.mean_staleness, r.dropped) == (0.0, 0)
    # the trainer works 90 of 153 s; the two slots sample 12 x 10 = 120 of 2 x 153 slot-seconds
    assert (r.training_busy_s, r.trainer_idle_s) == (90.0, 63.0)
    assert (r.sampling_busy_s, r.sampler_idle_s) == (120.0, 186.0)
    assert (r.grading_busy_s, r.grading_idle_s) == (12.0, 2 * 153.0 - 12.0)


def test_one_version_of_staleness_samples_the_next_iteration_while_this_one_trains():
    # iteration 1 as above: data at 21, update 1 21-51. Iteration 2 starts at 21 on version 0 (one behind update 2's
    # start, version 1): sampled 21-41, data at 42. Iteration 3 would be two behind on version 0, so it waits for
    # version 1 (51): sampled 51-71, data at 72. Update 2 runs 51-81 (its data waited since 42), update 3 81-111.
    r = simulate(EVEN, shape(), max_staleness=1)
    assert r.iteration_wall_s == [51.0, 30.0, 30.0] and r.total_wall_s == 111.0
    assert r.trainer_idle_s == 21.0 and r.dropped == 0
    # iteration 1 at staleness 0, iteration 2 at 1 (version 0 for update 2), iteration 3 at 1 (version 1 for update 3)
    assert r.mean_staleness == pytest.approx(2 / 3)
    assert 153.0 / r.total_wall_s == pytest.approx(1.378, abs=1e-3)


def test_two_versions_start_the_third_iteration_earlier_but_the_trainer_bounds_the_run():
    # iteration 3 may start on version 0 when iteration 2's data is complete (42): its first wave 42-52 on version 0,
    # its second 52-62 on version 1 (landed at 51). Update 3 starts at 81 all the same: 111 s, as with one version.
    r = simulate(EVEN, shape(), max_staleness=2)
    assert r.total_wall_s == 111.0
    # staleness: iteration 1 0 (x4), iteration 2 1 (x4), iteration 3 2, 2, 1, 1 -> 10 / 12
    assert r.mean_staleness == pytest.approx(10 / 12) and r.dropped == 0


def test_grading_in_the_sampler_slot_holds_the_slot_as_swerls_runner_does():
    # each slot samples then grades: 0-11 and 11-22, the update 22-52; sync 3 x 52 = 156 s. With one version of
    # staleness iteration 2 runs 22-44, iteration 3 waits for version 1 (52) and runs 52-74; updates 52-82, 82-112.
    assert simulate(EVEN, shape(graders=None), 0).total_wall_s == 156.0
    r = simulate(EVEN, shape(graders=None), 1)
    assert r.total_wall_s == 112.0 and r.grading_idle_s == 0.0
    assert r.sampler_idle_s == 2 * 112.0 - 120.0 - 12.0  # the slots' grading is not idle time


def test_a_reload_delays_the_synchronous_iteration_and_pauses_the_trajectories_in_flight():
    # 2 trajectories of 10 s on 2 slots, no grading time, an update of 5 s, a reload of 2 s.
    times = StageTimes(sampling_s=[10.0, 10.0], grading_s=[0.0, 0.0], train_s=5.0, reload_s=2.0)
    # synchronous: 0-10, update 10-15, reload 15-17; 17-27, update 27-32, reload 32-34; 34-44, update 44-49
    sync = simulate(times, shape(per_iteration=2), 0)
    assert sync.iteration_wall_s == [15.0, 17.0, 17.0] and sync.reload_pause_s == 4.0
    # one version: iteration 2 starts at 10 on version 0, is paused by version 1's reload (15-17) and ends at 22;
    # update 2 22-27. Iteration 3 starts at 22 on version 1, is paused by version 2's reload (27-29), ends at 34;
    # update 3 34-39.
    r = simulate(times, shape(per_iteration=2), 1)
    assert r.iteration_wall_s == [15.0, 12.0, 12.0] and r.total_wall_s == 39.0
    assert r.sampling_busy_s == 2 * 10.0 + 4 * 12.0  # a paused trajectory holds its slot
    assert r.mean_staleness == pytest.approx(2 / 3) and r.dropped == 0


def test_with_one_iteration_nothing_can_overlap():
    one = shape(iterations=1)
    assert [r.total_wall_s for r in sweep(EVEN, one, [0, 1, 4])] == [51.0, 51.0, 51.0]


def random_times(rng: random.Random, n: int) -> StageTimes:
    """Durations with a long tail: most trajectories short, a few up to 30x longer."""
    return StageTimes(sampling_s=[rng.expovariate(1.0) * (30 if rng.random() < 0.05 else 1) for _ in range(n)],
                      grading_s=[rng.uniform(0.0, 0.5) for _ in range(n)], train_s=rng.uniform(0.5, 40.0))


@pytest.mark.parametrize("case", range(12))
def test_more_staleness_is_never_slower_when_nothing_is_dropped(case):
    rng = random.Random(case)
    times = random_times(rng, rng.randint(1, 30))
    s = shape(slots=rng.randint(1, 8), graders=rng.choice([None, 1, 3]), iterations=rng.randint(1, 6),
              per_iteration=rng.randint(1, 40), sample_speedup=rng.choice([1.0, 5.0]))
    results = sweep(times, s, [0, 1, 2, 3, 5], seed=case)
    assert all(r.dropped == 0 for r in results)
    walls = [r.total_wall_s for r in results]
    assert all(later <= earlier + 1e-9 for earlier, later in zip(walls, walls[1:])), walls
    assert all(r.mean_staleness <= r.max_staleness for r in results)


@pytest.mark.parametrize(("sample", "train"), [(10.0, 30.0), (30.0, 10.0), (20.0, 20.0), (5.0, 1.0)])
def test_the_speed_up_stays_under_the_overlap_bound_and_nears_it_in_a_steady_state(sample, train):
    # one wave of equal trajectories (no tail) on as many slots, no grading or reload: S and T exactly
    times = StageTimes(sampling_s=[sample] * 4, grading_s=[0.0] * 4, train_s=train)
    many = shape(slots=4, graders=1, iterations=60, per_iteration=4)
    sync, one = sweep(times, many, [0, 1])
    assert sync.wall_per_iteration_s == sample + train
    bound = overlap_bound(sample, train)
    speedup = sync.total_wall_s / one.total_wall_s
    assert speedup <= bound + 1e-9
    assert speedup >= 0.97 * bound  # 60 iterations: only the first one's unoverlapped phase is lost
    assert one.iteration_wall_s[-1] == max(sample, train)


def test_the_same_seed_gives_the_same_run_and_another_seed_other_draws():
    times = random_times(random.Random(7), 25)
    s = shape(slots=3, iterations=4, per_iteration=10)
    assert simulate(times, s, 1, seed=3) == simulate(times, s, 1, seed=3)
    assert simulate(times, s, 1, seed=3).total_wall_s != simulate(times, s, 1, seed=4).total_wall_s


def test_an_iteration_as_large_as_the_measurement_replays_every_measured_duration():
    times = StageTimes(sampling_s=[1.0, 2.0, 3.0, 50.0], grading_s=[0.0] * 4, train_s=0.0)
    for seed in range(5):  # the 50 s tail is in every iteration whatever the seed: 4 slots, each iteration 50 s
        r = simulate(times, shape(slots=4, iterations=3), 0, seed=seed)
        assert r.iteration_wall_s == [50.0, 50.0, 50.0] and r.sampling_busy_s == 3 * 56.0


def test_speed_ups_shorten_only_their_own_share():
    # 10 s of sampling of which 8 s generation: at 4x the policy's share takes 2 s, the sandbox's 2 s stays
    times = StageTimes(sampling_s=[10.0], generation_s=[8.0], grading_s=[0.0], train_s=30.0, measured_trajectories=1)
    r = simulate(times, shape(slots=1, iterations=1, per_iteration=1, sample_speedup=4.0, train_speedup=10.0), 0)
    assert r.total_wall_s == 4.0 + 3.0
    # training grows with the data: twice the trajectories of the measured update, twice its time
    assert update_seconds(times, shape(per_iteration=2, train_speedup=10.0)) == 6.0


def test_the_overlap_bound_is_two_when_balanced():
    assert overlap_bound(20.0, 20.0) == 2.0 and overlap_bound(30.0, 10.0) == pytest.approx(4 / 3)
    assert overlap_bound(30.0, 10.0, 2.0) == pytest.approx(42 / 30)  # the reload is on the synchronous path only
    with pytest.raises(ValueError, match="not both 0"):
        overlap_bound(0.0, 0.0)


def test_overlapping_the_tail_fills_the_slot_a_lone_last_trajectory_leaves_free():
    # 3 trajectories of 10 s on 2 slots, no grading time, an update of 1 s: each iteration's third trajectory runs
    # alone in its second wave. Synchronous: 20 + 1 s an iteration, 63 s. One version, waiting for the data: iteration
    # 2 samples 20-40 (update 1 20-21), iteration 3 40-60, updates end at 21, 41, 61.
    times = StageTimes(sampling_s=[10.0] * 3, grading_s=[0.0] * 3, train_s=1.0)
    s = shape(iterations=3, per_iteration=3)
    assert simulate(times, s, 0).total_wall_s == 63.0
    assert simulate(times, s, 1).total_wall_s == 61.0
    # overlapping the tail: iteration 1's third trajectory starts at 10, which releases iteration 2 into the other
    # slot at once (10-20); its other two run 20-30 on version 0 (version 1 lands at 21). Iteration 3 waits for
    # version 1 and a free slot: two run 30-40 on version 1, the last 40-50 on version 2. Data at 20, 30, 50;
    # updates end at 21, 31, 51.
    r = simulate(times, s, 1, overlap_tail=True)
    assert r.iteration_wall_s == [21.0, 10.0, 20.0] and r.total_wall_s == 51.0
    # staleness: iteration 1 0 0 0; iteration 2 1 1 1; iteration 3 1 1 0
    assert r.mean_staleness == pytest.approx(5 / 9) and r.dropped == 0
    assert simulate(times, s, 0, overlap_tail=True) == simulate(times, s, 0)  # b = 0 is synchronous either way


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"sampling_s": [], "grading_s": [1.0], "train_s": 1.0}, "sampling_s is empty"),
    ({"sampling_s": [1.0], "grading_s": [], "train_s": 1.0}, "grading_s is empty"),
    ({"sampling_s": [-1.0], "grading_s": [1.0], "train_s": 1.0}, "greater than or equal to 0"),
    ({"sampling_s": [1.0], "grading_s": [1.0], "train_s": -1.0}, "greater than or equal to 0"),
    ({"sampling_s": [1.0, 2.0], "generation_s": [1.0], "grading_s": [1.0], "train_s": 1.0}, "each is a share"),
    ({"sampling_s": [1.0], "generation_s": [2.0], "grading_s": [1.0], "train_s": 1.0}, "exceeds its sampling_s"),
    ({"sampling_s": [1.0], "grading_s": [1.0], "train_s": 1.0, "stage": 2}, "Extra inputs"),
])
def test_bad_stage_times_are_refused_saying_why(kwargs, words):
    with pytest.raises(ValueError, match=words):
        StageTimes(**kwargs)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"sampler_slots": 0}, "greater than or equal to 1"),
    ({"grading_slots": 0}, "greater than or equal to 1"),
    ({"sample_speedup": 0.0}, "greater than 0"),
    ({"iterations": 0}, "greater than or equal to 1"),
    ({"iterations": 10_000, "trajectories_per_iteration": 1_000}, "simulate fewer iterations"),
])
def test_bad_shapes_are_refused_saying_why(kwargs, words):
    given = {"sampler_slots": 2, "iterations": 2, "trajectories_per_iteration": 4, **kwargs}
    with pytest.raises(ValueError, match=words):
        ClusterShape(**given)


def test_a_negative_bound_is_refused():
    with pytest.raises(ValueError, match="max_staleness must be 0 or more"):
        simulate(EVEN, shape(), -1)
