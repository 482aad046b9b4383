"""A training run: epochs of optimiser steps over fixed rows, a checkpoint after every step.

Layout of ``out``::

    out/run.json          what the run trains on (data fingerprint, batch size, seed, ...)
    out/step-000001/ ...  a checkpoint after each optimiser step (HF model folder + trainer_state,
                          whose data_position is {"epoch", "next_batch"}: where to go on)
    out/final             symlink to the last step's checkpoint, once every epoch is done
    out/metrics.jsonl     one line per optimiser step: the trainer's metrics, epoch, batch,
                          and the caller's batch-level metrics

Rerunning with the same data and settings resumes from the newest ``step-N`` and skips the
batches already trained on (the order is a pure function of seed and epoch), so a resumed run
takes the same steps as an uninterrupted one; raising the epoch count continues a finished
run. A metrics line is written before its checkpoint and lines past the resumed checkpoint
are removed on resume, so the file has exactly one line per step whatever a crash hit.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swerl.train import Trainer, TrainBatch, TrainerConfig, latest_checkpoint, make_trainer, step_dir
from swerl.train.checkpoint import read_state, step_checkpoints

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
FINAL = "final"


class RunMismatchError(ValueError):
    """``out`` holds a run of other data or settings; resuming it would not continue it."""


@dataclass
class RunResult:
    """What ``train_run`` did."""

    out: Path
    steps: int  # optimiser steps of the whole run so far
    new_steps: int  # taken by this call
    resumed_from: Path | None
    final: Path | None  # out/final once every epoch is done (or the run stopped at target_kl)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # this call's steps
    stopped_kl: float | None = None  # the approx_kl that ended the run before its last epoch


def _check_run(out: Path, spec: Mapping[str, Any], write: bool) -> None:
    """Write ``run.json``, or compare it with an existing one (the epoch count may change)."""
    path = out / RUN_FILE
    if path.is_file() and latest_checkpoint(out) is not None:
        before = json.loads(path.read_text(encoding="utf-8"))
        differ = sorted(k for k in set(before) | set(spec) if k != "epochs" and before.get(k) != spec.get(k))
        if differ:
            detail = "; ".join(f"{k}: {before.get(k)!r} then, {spec.get(k)!r} now" for k in differ)
            raise RunMismatchError(f"{out} holds a run with other data or settings ({detail}); "
                                   f"rerun with the same arguments to resume it, or choose a new --out")
    if write:
        path.write_text(json.dumps(dict(spec), indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_metrics(out: Path) -> list[dict[str, Any]]:
    path = Path(out) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _truncate_metrics(out: Path, step: int) -> None:
    """Keep the lines of steps up to ``step`` (a crash may have left one for an unsaved step)."""
    path = out / METRICS_FILE
    if path.is_file():
        kept = [m for m in read_metrics(out) if m.get("step", 0) <= step]
        path.write_text("".join(json.dumps(m) + "\n" for m in kept), encoding="utf-8")


def _link_final(out: Path, target: Path) -> Path:
    """Point ``out/final`` at ``target`` (relative symlink, replaced atomically)."""
    link, tmp = out / FINAL, out / f".{FINAL}.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target.name, target_is_directory=True)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    os.replace(tmp, link)
    return link


def _prune(out: Path, keep_last: int) -> None:
    """Remove all but the ``keep_last`` newest step checkpoints (0 keeps all)."""
    if keep_last <= 0:
        return
    for p in step_checkpoints(out)[:-keep_last]:
        shutil.rmtree(p)


@dataclass
class _Cursor:
    """Where the run is in its data, and the current epoch's approx_kl so far (for target_kl)."""

    epoch: int = 0
    next_batch: int = 0
    kl_sum: float = 0.0
    kl_steps: int = 0


@dataclass
class _Plan:
    """What ``train_run`` was asked for, as its steps need it."""

    out: Path
    epochs: int
    total: int
    writer: bool
    iteration: int
    extra_metrics: Mapping[str, float] | None
    keep_last: int
    save_every: int
    on_step: Callable[[dict[str, Any]], None] | None
    target_kl: float | None
    before_training: Callable[[Trainer], None] | None = None


def _resume_cursor(resumed: Path | None, epochs: int) -> tuple[_Cursor, int, float | None]:
    """``(cursor, steps done, stopped_kl)`` of the checkpoint ``resumed``; the run's start when there is none."""
    if resumed is None:
        return _Cursor(), 0, None
    state = read_state(resumed)
    position = state["data_position"]
    cursor = _Cursor(int(position.get("epoch", 0)), int(position.get("next_batch", 0)))
    done = int(state["step"])
    stopped_kl = position.get("stopped_kl")
    if stopped_kl is not None:  # ended at target_kl: finished, whatever the epoch count
        cursor.epoch = epochs
    # the epoch's approx_kl so far is kept in the position, so target_kl sees the whole epoch across a resume
    cursor.kl_sum, cursor.kl_steps = float(position.get("kl_sum", 0.0)), int(position.get("kl_steps", 0))
    return cursor, done, stopped_kl


def _position_after_step(cursor: _Cursor, approx_kl: Any, epoch_len: int, epochs: int,
                         target_kl: float | None) -> tuple[dict[str, Any], float | None]:
    """Count the step at ``cursor`` into its epoch's approx_kl; return the data position to checkpoint after
    it, and the epoch's mean approx_kl when that ends the run at ``target_kl`` (else None)."""
    if approx_kl is not None:
        cursor.kl_sum, cursor.kl_steps = cursor.kl_sum + float(approx_kl), cursor.kl_steps + 1
    position: dict[str, Any] = {"epoch": cursor.epoch, "next_batch": cursor.next_batch + 1}
    if target_kl is not None:
        position.update(kl_sum=cursor.kl_sum, kl_steps=cursor.kl_steps)
    stopped_kl = None
    if cursor.next_batch + 1 == epoch_len:
        position = {"epoch": cursor.epoch + 1, "next_batch": 0}
        # one step's approx_kl is noisy (a batch can hold a few far-off sequences); an epoch's mean is not
        mean_kl = cursor.kl_sum / cursor.kl_steps if cursor.kl_steps else None
        if target_kl is not None and mean_kl is not None and mean_kl > target_kl and cursor.epoch + 1 < epochs:
            stopped_kl = mean_kl
            position = {"epoch": epochs, "next_batch": 0, "stopped_kl": mean_kl}
        cursor.kl_sum, cursor.kl_steps = 0.0, 0
    return position, stopped_kl


def _take_step(trainer: Trainer, batch: TrainBatch, epoch_len: int, cursor: _Cursor, plan: _Plan, result: RunResult) -> None:
    """One optimiser step on ``batch``: its metrics line, its checkpoint when one is due, ``on_step``."""
    metrics = trainer.train_step(batch)
    position, stopped_kl = _position_after_step(cursor, metrics.get("approx_kl"), epoch_len, plan.epochs, plan.target_kl)
    if stopped_kl is not None:
        result.stopped_kl = stopped_kl
    record = {**metrics, **(plan.extra_metrics or {}), "step": trainer.step, "epoch": cursor.epoch,
              "batch": cursor.next_batch, "sequences": len(batch), "iteration": plan.iteration, "time": time.time()}
    if plan.writer:
        with (plan.out / METRICS_FILE).open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    if trainer.step % plan.save_every == 0 or trainer.step >= plan.total or result.stopped_kl is not None:
        trainer.save(step_dir(plan.out, trainer.step), iteration=plan.iteration, data_position=position)
        if plan.writer:
            _prune(plan.out, plan.keep_last)
    result.metrics.append(record)
    result.new_steps += 1
    if plan.on_step:
        plan.on_step(record)


def _train_epochs(model: str | Path, config: TrainerConfig, resumed: Path | None, batches: Callable[[int], list[TrainBatch]],
                  cursor: _Cursor, plan: _Plan, result: RunResult) -> None:
    """Train from ``cursor`` to the last epoch (or the target_kl stop) in one trainer, closed on the way out."""
    trainer = make_trainer(model, config)
    try:
        if plan.before_training is not None:  # the trainer holds the run's starting weights until the load below
            plan.before_training(trainer)
        if resumed is not None:
            trainer.load(resumed)
        if plan.writer:  # lines of steps after the last checkpoint (or before the first) are redone
            _truncate_metrics(plan.out, trainer.step)
        while cursor.epoch < plan.epochs:
            epoch_rows = batches(cursor.epoch)
            while cursor.next_batch < len(epoch_rows):
                _take_step(trainer, epoch_rows[cursor.next_batch], len(epoch_rows), cursor, plan, result)
                cursor.next_batch += 1
            cursor.epoch, cursor.next_batch = (plan.epochs if result.stopped_kl is not None else cursor.epoch + 1), 0
        result.steps = trainer.step
    finally:
        trainer.close()


def train_run(model: str | Path, config: TrainerConfig, out: Path, batches: Callable[[int], list[TrainBatch]],
              epochs: int, steps_per_epoch: int, *, spec: Mapping[str, Any], iteration: int = 0,
              extra_metrics: Mapping[str, float] | None = None, keep_last: int = 0, save_every: int = 1,
              on_start: Callable[[int, int], None] | None = None,
              on_step: Callable[[dict[str, Any]], None] | None = None, target_kl: float | None = None,
              before_training: Callable[[Trainer], None] | None = None) -> RunResult:
    """Train ``epochs`` epochs of ``batches(epoch)`` (``steps_per_epoch`` each) from ``model``
    into ``out``, resuming what is there. Only the first process (RANK 0) writes the files.

    ``spec`` describes the data and settings (JSON); a resume refuses an ``out`` whose
    ``run.json`` differs in anything but ``epochs``. ``on_start(steps_done, steps_total)``
    runs before training, ``on_step(metrics)`` after each step. A checkpoint is written every
    ``save_every`` steps and at the last; a crash loses at most the steps since the last one
    (their metrics lines are dropped on resume and the steps redone).

    ``target_kl``: the run ends after the first epoch whose mean ``approx_kl`` passes it (PPO's
    early stop: more passes over the same samples drift off the policy that drew them). That
    epoch's last step is checkpointed as the run's last, its position says so, and a rerun finds
    the run finished.

    ``before_training(trainer)``: called on every process with the trainer on ``model``'s weights, before a resumed
    checkpoint is loaded and before the first step (the proximal pass of off-policy data).
    """
    if save_every < 1:
        raise ValueError(f"save_every must be at least 1, got {save_every}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = epochs * steps_per_epoch
    writer = first_process()
    _check_run(out, {**spec, "epochs": epochs, "steps_per_epoch": steps_per_epoch}, writer)
    resumed = latest_checkpoint(out)
    cursor, done, stopped_kl = _resume_cursor(resumed, epochs)
    if on_start:
        on_start(done, total)
    result = RunResult(out, done, 0, resumed, None, stopped_kl=stopped_kl)
    if cursor.epoch < epochs:
        plan = _Plan(out, epochs, total, writer, iteration, extra_metrics, keep_last, save_every, on_step, target_kl,
                     before_training)
        _train_epochs(model, config, resumed, batches, cursor, plan, result)
    last = latest_checkpoint(out)
    if last is not None and (result.steps >= total or result.stopped_kl is not None):
        result.final = _link_final(out, last) if writer else out / FINAL
    return result


def first_process() -> bool:
    """Whether this process writes a run's files (RANK 0, or no launcher)."""
    return int(os.environ.get("RANK", "0")) == 0
