"""`train.target_kl`: a DAPO update ends after the first epoch whose mean approx_kl passes it (PPO's
early stop), takes the same steps up to there as a run without it, checkpoints that epoch's last
step as the run's last, resumes a crashed epoch with its approx_kl so far, and a rerun finds the
run finished."""

from __future__ import annotations

import json

import pytest
import torch

from swerl.train import TorchTrainerConfig, TrainBatch, TrainerConfig, step_dir
from swerl.train.run import read_metrics, train_run

EPOCHS, BATCHES = 3, 3


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


def _run(model, out, batches, target_kl=None, on_step=None):
    config = TrainerConfig(trainer=TorchTrainerConfig(device="cpu"), objective="dapo", total_steps=EPOCHS * BATCHES,
                           optimizer={"lr": 3e-3, "lr_schedule": "constant"})
    return train_run(model, config, out, lambda epoch: batches, EPOCHS, BATCHES, spec={"test": "target_kl"},
                     target_kl=target_kl, on_step=on_step)


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, batches, tmp_path_factory) -> list[dict]:
    result = _run(tiny_model_dir, tmp_path_factory.mktemp("full") / "run", batches)
    assert result.steps == EPOCHS * BATCHES and result.stopped_kl is None and result.final is not None
    return result.metrics


def _epoch_means(metrics: list[dict]) -> list[float]:
    return [sum(m["approx_kl"] for m in metrics if m["epoch"] == e) / BATCHES for e in range(EPOCHS)]


@pytest.fixture(scope="module")
def stop(uninterrupted) -> tuple[float, int]:
    """A target_kl the first epoch stays under and a later one, not the last, passes; the step it ends at."""
    means = _epoch_means(uninterrupted)
    target = means[0]
    epoch = next(e for e, kl in enumerate(means) if kl > target)
    assert 0 < epoch < EPOCHS - 1, means  # a stop inside the run
    return target, (epoch + 1) * BATCHES


def test_the_update_ends_after_the_first_epoch_whose_mean_approx_kl_passes_target_kl(tiny_model_dir, batches,
                                                                                        uninterrupted, stop, tmp_path):
    target, steps = stop
    result = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    assert (result.steps, result.new_steps) == (steps, steps)
    assert result.stopped_kl == pytest.approx(_epoch_means(uninterrupted)[steps // BATCHES - 1], rel=1e-12)
    # the same steps as the run without it, up to the end of the epoch that stopped it
    assert [m["loss"] for m in result.metrics] == [m["loss"] for m in uninterrupted[:steps]]
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == list(range(1, steps + 1))
    assert result.final is not None and result.final.resolve() == step_dir(tmp_path / "run", steps).resolve()


def test_a_run_crashed_inside_an_epoch_resumes_with_that_epoch_s_approx_kl_so_far(tiny_model_dir, batches, stop,
                                                                                  uninterrupted, tmp_path):
    target, steps = stop

    def crash(record):
        if record["step"] == steps - 1:  # inside the epoch that stops the run, after its checkpoint
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target, on_step=crash)
    resumed = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    assert (resumed.steps, resumed.new_steps) == (steps, 1)
    assert resumed.stopped_kl == pytest.approx(_epoch_means(uninterrupted)[steps // BATCHES - 1], rel=1e-12)


def test_a_rerun_of_a_run_stopped_at_target_kl_finds_it_finished(tiny_model_dir, batches, stop, tmp_path):
    target, steps = stop
    first = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    again = _run(tiny_model_dir, tmp_path / "run", batches, target_kl=target)
    assert (again.steps, again.new_steps, again.stopped_kl) == (steps, 0, first.stopped_kl)
    assert again.final is not None and again.final.resolve() == first.final.resolve()


def test_no_target_kl_runs_every_epoch(uninterrupted):
    assert [(m["epoch"], m["batch"]) for m in uninterrupted] == [(e, b) for e in range(EPOCHS) for b in range(BATCHES)]


def test_the_position_after_a_step_inside_an_epoch_carries_its_approx_kl_only_under_target_kl():
    from swerl.train.run import _Cursor, _position_after_step

    cursor = _Cursor(epoch=1, next_batch=0)
    assert _position_after_step(cursor, 0.5, 3, EPOCHS, None) == ({"epoch": 1, "next_batch": 1}, None)
    cursor.next_batch = 1
    assert _position_after_step(cursor, None, 3, EPOCHS, 9.0) == (
        {"epoch": 1, "next_batch": 2, "kl_sum": 0.5, "kl_steps": 1}, None)  # a step without approx_kl counts for nothing


def test_the_last_step_of_an_epoch_stops_the_run_when_the_epoch_s_mean_approx_kl_passes_target_kl():
    from swerl.train.run import _Cursor, _position_after_step

    cursor = _Cursor(epoch=0, next_batch=2, kl_sum=0.1, kl_steps=2)
    assert _position_after_step(cursor, 0.4, 3, EPOCHS, 0.1) == ({"epoch": EPOCHS, "next_batch": 0, "stopped_kl": 0.5 / 3},
                                                                 0.5 / 3)
    assert (cursor.kl_sum, cursor.kl_steps) == (0.0, 0)  # the next epoch is measured afresh
    below = _Cursor(epoch=0, next_batch=2, kl_sum=0.1, kl_steps=2)
    assert _position_after_step(below, 0.4, 3, EPOCHS, 1.0) == ({"epoch": 1, "next_batch": 0}, None)
    last = _Cursor(epoch=EPOCHS - 1, next_batch=2, kl_sum=0.1, kl_steps=2)  # the last epoch ends the run anyway
    assert _position_after_step(last, 0.4, 3, EPOCHS, 0.1) == ({"epoch": EPOCHS, "next_batch": 0}, None)
