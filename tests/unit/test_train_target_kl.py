"""`train.target_kl`: a DAPO update ends after the first step whose approx_kl passes it (PPO's early
stop), takes the same steps up to there as a run without it, checkpoints that step as the run's
last, and a rerun finds the run finished."""

from __future__ import annotations

import json

import pytest
import torch

from swerl.train import TorchTrainerConfig, TrainBatch, TrainerConfig, step_dir
from swerl.train.run import read_metrics, train_run

EPOCHS, BATCHES = 2, 3


def _batches(vocab: int) -> list[TrainBatch]:
    """Replies whose sampling log-probs are those of a uniform policy: the tiny model starts near it,
    and each step takes it further away."""
    out = []
    for seed in range(BATCHES):
        g = torch.Generator().manual_seed(seed)
        ids, masks, olds = [], [], []
        for _ in range(4):
            length = int(torch.randint(16, 32, (1,), generator=g))
            mask = torch.zeros(length, dtype=torch.bool)
            mask[6:] = True
            ids.append(torch.randint(0, vocab, (length,), generator=g))
            masks.append(mask)
            olds.append(torch.where(mask, torch.full((length,), -float(torch.log(torch.tensor(float(vocab))))), 0.0))
        out.append(TrainBatch(ids, masks, olds, torch.tensor([1.0, -1.0, 0.5, -0.5])))
    return out


@pytest.fixture(scope="module")
def batches(tiny_model_dir) -> list[TrainBatch]:
    return _batches(json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"])


def _run(model, out, batches, target_kl=None):
    config = TrainerConfig(trainer=TorchTrainerConfig(device="cpu"), objective="dapo", total_steps=EPOCHS * BATCHES,
                           optimizer={"lr": 3e-3, "lr_schedule": "constant"})
    return train_run(model, config, out, lambda epoch: batches, EPOCHS, BATCHES, spec={"test": "target_kl"},
                     target_kl=target_kl)


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, batches, tmp_path_factory) -> list[dict]:
    result = _run(tiny_model_dir, tmp_path_factory.mktemp("full") / "run", batches)
    assert result.steps == EPOCHS * BATCHES and result.stopped_kl is None and result.final is not None
    return result.metrics


def test_the_update_ends_at_the_first_step_whose_approx_kl_passes_target_kl(tiny_model_dir, batches, uninterrupted, tmp_path):
    kls = [m["approx_kl"] for m in uninterrupted]
    target = kls[0]
    stop = next(i for i, kl in enumerate(kls) if kl > target) + 1  # the step that passes it
    assert 1 < stop < EPOCHS * BATCHES, kls  # a stop inside the run, not at its first step
    result = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    assert (result.steps, result.new_steps, result.stopped_kl) == (stop, stop, kls[stop - 1])
    # the same steps as the run without it, up to the one that stopped it
    assert [m["loss"] for m in result.metrics] == [m["loss"] for m in uninterrupted[:stop]]
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == list(range(1, stop + 1))
    assert result.final is not None and result.final.resolve() == step_dir(tmp_path / "run", stop).resolve()


def test_a_rerun_of_a_run_stopped_at_target_kl_finds_it_finished(tiny_model_dir, batches, uninterrupted, tmp_path):
    target = uninterrupted[0]["approx_kl"]
    first = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    again = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    assert (again.steps, again.new_steps, again.stopped_kl) == (first.steps, 0, first.stopped_kl)
    assert again.final is not None and again.final.resolve() == first.final.resolve()


def test_no_target_kl_runs_every_epoch(uninterrupted):
    assert [(m["epoch"], m["batch"]) for m in uninterrupted] == [(e, b) for e in range(EPOCHS) for b in range(BATCHES)]
