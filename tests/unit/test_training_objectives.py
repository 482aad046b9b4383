"""The training iteration's objective: everything in which an RFT stage and a DAPO iteration
differ, as one tagged union the shared training flow is driven by."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from swerl.orchestration.objectives import DAPOIteration, Objective, RFTIteration
from swerl.orchestration.params import DAPOParams, RFTParams, SamplerParams
from swerl.stages.train import DAPOStage, RFTStage


def test_the_kind_tag_picks_the_objective_and_an_unknown_kind_is_refused_naming_both():
    adapter = TypeAdapter(Objective)
    assert isinstance(adapter.validate_python({"kind": "rft"}), RFTIteration)
    assert adapter.validate_python({"kind": "dapo", "iteration": 3}) == DAPOIteration(iteration=3)
    with pytest.raises(ValidationError, match=r"'rft', 'dapo'"):
        adapter.validate_python({"kind": "ppo"})


def test_rft_names_its_run_and_version_by_its_stage_and_samples_with_its_own_sampler():
    scripted = SamplerParams(engine="scripted")
    warm = RFTIteration(rft=RFTParams(attempts=2, sampler=scripted), stage="warm-start")
    assert (warm.name, warm.new_version, warm.samples, warm.seed_of(7), warm.reward) == ("warm-start", "warm-start", 2, 7, None)
    assert warm.sampler_of(SamplerParams()) is scripted
    assert RFTIteration().sampler_of(scripted) is scripted
    assert warm.run_params(scripted, "0") == {"samples": 2, "engine": "scripted", "lr": 5e-6, "epochs": 1}


def test_dapo_names_its_run_and_version_by_iteration_and_reseeds_each_iteration():
    it = DAPOIteration(dapo=DAPOParams(group_size=6), iteration=2)
    assert (it.name, it.new_version, it.samples, it.seed_of(3)) == ("iter-2", "dapo-2", 6, 2003)
    assert it.reward == it.dapo.reward
    assert it.run_params(SamplerParams(), "rft") == {"iteration": 2, "samples": 6, "eps_low": 0.2, "eps_high": 0.3, "lr": 1e-6,
                                                     "advantage": "mean_std", "start_policy": "rft"}


def test_each_objective_builds_its_training_stage_from_the_rollout_store(tmp_path):
    store = tmp_path / "rollout" / "trajectories"
    rft = RFTIteration(rft=RFTParams(require_resolved=False)).stage_config(store, "m", tmp_path / "train", 5, "0")
    assert isinstance(rft, RFTStage)
    assert (rft.trajectories, rft.model, rft.seed, rft.require_version, rft.require_resolved) == ([store], "m", 5, None, False)
    assert rft.train.optimizer.lr == 5e-6  # the paper's RFT preset
    dapo = DAPOIteration(iteration=1).stage_config(store, "m", Path("out"), 1001, "rft")
    assert isinstance(dapo, DAPOStage)
    assert (dapo.require_version, dapo.iteration, dapo.advantage, dapo.train.batch_size) == ("rft", 1, "mean_std", 128)


def test_dapo_refuses_a_reward_window_below_the_turn_limit_and_rft_checks_nothing():
    it = DAPOIteration(dapo=DAPOParams(reward={"l_thr": 1, "t_max": 5}))
    with pytest.raises(ValueError, match=r"^dapo\.reward\.t_max \(5\) is below sampler\.agent\.max_turns \(40\)"):
        it.check(SamplerParams(agent={"max_turns": 40}))
    RFTIteration().check(SamplerParams(agent={"max_turns": 40}))
