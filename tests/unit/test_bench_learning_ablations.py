"""The learning proof's GRPO-style ablations (bench/bench_learning.py): what each changes in a seed's run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from swerl.orchestration.params import PipelineParams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "bench" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def seed_run(tmp_path) -> PipelineParams:
    """A seed's run of the candidate recipe, its RFT policy written where the pipeline puts it."""
    import yaml

    data = yaml.safe_load((ROOT / "deployments" / "learning-cap.yaml").read_text())
    params = PipelineParams.model_validate({**data, "run_root": str(tmp_path)})
    (params.run_dir / "rft" / "train" / "final").mkdir(parents=True)
    return params


def test_grpo_is_deepseekmaths_update_with_its_kl_penalty_and_no_cap(bench, seed_run):
    run = bench.ablation(seed_run, "grpo")
    loss = run.dapo.loss
    assert (loss.eps_low, loss.eps_high, loss.loss_aggregation, loss.kl_coef, loss.neg_prob_cap) == (0.2, 0.2, "sequence", 0.04, 1.0)
    assert run.dapo.drop_zero_advantage is False


def test_grpo_cap_keeps_the_recipes_cap_so_only_dapos_own_parts_differ(bench, seed_run):
    run = bench.ablation(seed_run, "grpo-cap")
    loss = run.dapo.loss
    assert (loss.eps_low, loss.eps_high, loss.loss_aggregation, loss.kl_coef, loss.neg_prob_cap) == (0.2, 0.2, "sequence", 0.04, 0.5)
    assert run.dapo.drop_zero_advantage is False


@pytest.mark.parametrize("key", ["grpo", "grpo-cap"])
def test_an_ablation_starts_from_the_seeds_rft_policy_and_changes_nothing_else(bench, seed_run, key):
    run = bench.ablation(seed_run, key)
    assert run.name == f"learning-s0-ablation-{key}"
    assert run.model == str((seed_run.run_dir / "rft" / "train" / "final").resolve())
    assert run.warm_start is None and run.rft.enabled is False and run.eval.evaluate_start is False
    assert run.validate_runs == 0 and run.curriculum == seed_run.curriculum
    assert (run.dapo.iterations, run.dapo.group_size, run.dapo.train, run.dapo.reward) == (
        seed_run.dapo.iterations, seed_run.dapo.group_size, seed_run.dapo.train, seed_run.dapo.reward)
    assert run.sampler == seed_run.sampler and run.eval.runs == seed_run.eval.runs


def test_async_changes_the_schedule_alone_the_update_stays_the_recipes(bench, seed_run):
    run = bench.ablation(seed_run, "async")
    assert run.dapo.off_policy.max_staleness == 1 and seed_run.dapo.off_policy.max_staleness == 0
    assert run.dapo.loss == seed_run.dapo.loss and run.dapo.drop_zero_advantage == seed_run.dapo.drop_zero_advantage
    assert run.name == "learning-s0-ablation-async" and run.rft.enabled is False


def test_the_main_jobs_recipe_is_read_from_its_deployment(bench):
    data = bench.recipe(f"{ROOT / 'deployments' / 'prefect.yaml'}#pipeline")
    params = PipelineParams.model_validate(data)
    assert (params.name, params.model, params.eval.runs, params.dapo.iterations) == (
        "pipeline", "swerl/models/resources/tiny-warm-s0", 2, 2)
    with pytest.raises(SystemExit, match="no deployment named 'nightly'"):
        bench.recipe(f"{ROOT / 'deployments' / 'prefect.yaml'}#nightly")
