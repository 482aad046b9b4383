"""Staleness: a version's place in the pipeline, how far behind the update's start a trajectory is (its oldest
turn's version), and the split an off-policy update holds to: every trajectory counted, none silently lost."""

from __future__ import annotations

import pytest
from test_rft import traj  # tests/unit is on sys.path (pytest's prepend import mode)

from swerl.rl.staleness import StalenessError, staleness, version_index, within_bound


def sampled(iid: str, version: str, turn_versions: tuple[str, ...] = ()):
    t = traj(iid)
    t.policy_version = version
    for turn, v in zip(t.turns, turn_versions):
        turn.policy_version = v
    return t


def test_the_pipeline_s_versions_in_order_counted_in_dapo_updates():
    assert [version_index(v) for v in ("0", "warm-start", "rft", "dapo-1", "dapo-2", "dapo-10")] == [0, 0, 0, 1, 2, 10]


def test_dapo_s_first_update_is_one_version_after_its_start_with_or_without_rft():
    # a pipeline with RFT starts DAPO from rft; one without, from the starting policy (an ablation from an RFT
    # checkpoint): iteration 2 sampled by the start beside iteration 1's update is one version behind either way
    assert staleness(sampled("a", "rft"), "dapo-1") == staleness(sampled("a", "0"), "dapo-1") == 1
    assert staleness(sampled("a", "warm-start"), "dapo-1") == 1


@pytest.mark.parametrize("version", ["", "champion", "dapo-0", "dapo-x", "iter-1"])
def test_a_version_outside_the_pipeline_s_order_has_no_staleness(version):
    with pytest.raises(StalenessError, match="has no place in the pipeline's order"):
        version_index(version)


def test_a_trajectory_is_as_stale_as_its_oldest_turn():
    assert staleness(sampled("a", "dapo-1"), "dapo-2") == 1
    assert staleness(sampled("a", "dapo-2"), "dapo-2") == 0
    # a reload landed after its first turn: the first turn is dapo-1's, the rest dapo-2's
    assert staleness(sampled("a", "dapo-1", ("dapo-1", "dapo-2", "dapo-2")), "dapo-2") == 1
    assert staleness(sampled("a", "rft"), "dapo-2") == 2


def test_data_from_a_newer_policy_than_the_update_s_start_is_refused():
    with pytest.raises(StalenessError, match="sampled by a newer policy"):
        staleness(sampled("a", "dapo-3"), "dapo-2")


def test_the_bound_keeps_what_is_close_enough_and_counts_what_it_drops():
    data = [sampled("a", "dapo-2"), sampled("b", "dapo-1"), sampled("c", "rft"), sampled("d", "dapo-1", ("rft",))]
    split = within_bound(data, "dapo-2", max_staleness=1)
    assert [t.instance_id for t in split.kept] == ["a", "b"]
    assert [t.instance_id for t in split.dropped] == ["c", "d"]
    assert split.staleness == {"a/0": 0, "b/0": 1, "c/0": 2, "d/0": 2}
    assert split.mean() == 0.5
    synchronous = within_bound(data, "dapo-2", max_staleness=0)
    assert [t.instance_id for t in synchronous.kept] == ["a"] and synchronous.mean() == 0.0
