"""Stages: rejection fine-tuning and one DAPO update, from stored trajectories to checkpoints.

Both write ``out/step-N`` after every optimiser step and ``out/final`` when done; rerunning
with the same input resumes (``swerl.train.run``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerl.rl.rewards import RewardConfig
from swerl.rl.rft import RFTConfig
from swerl.stages.errors import NothingToTrainError, StageInputError
from swerl.train import TrainerConfig
from swerl.train.run import RunMismatchError, RunResult


class TrainCommon(BaseModel):
    """What both objectives share: data, start, destination, optimiser and backend."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Path] = Field(description="Trajectory stores or rollout run folders.")
    model: str = Field(description="Policy to start from: a model folder or hub name.")
    out: Path = Field(description="Run folder: step-N, metrics.jsonl, run.json, final; a rerun resumes it.")
    epochs: int = Field(1, ge=1, le=10_000, description="Passes over the data.")
    batch_size: int = Field(8, ge=1, le=65_536, description="Sequences per optimiser step.")
    lr: float = Field(5e-6, gt=0, le=1.0, description="Peak learning rate.")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="Decay to 0 at the last step, or none.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps (capped below the run's step count).")
    max_tokens_per_microbatch: int = Field(16384, ge=1, description="Padded tokens per forward pass.")
    backend: Literal["torch", "deepspeed"] = Field("torch", description="Trainer backend.")
    seed: int = Field(0, ge=0, description="Seeds the trainer and the per-epoch shuffle.")
    policy_version: str | None = Field(None, description="Refuse trajectories sampled by any other policy version.")
    device: str = Field("auto", description="Torch backend device: cpu, cuda, cuda:N or auto.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward.")
    keep_last: int = Field(0, ge=0, description="Keep only the newest N step checkpoints (0: all).")
    save_every: int = Field(1, ge=1, le=1_000_000, description="Write a checkpoint every N steps and at the last "
                            "(a long supervised run need not write one per step).")
    zero_stage: int = Field(3, ge=1, le=3, description="DeepSpeed ZeRO stage.")
    iteration: int = Field(0, ge=0, description="The RL iteration, recorded in checkpoints and metrics.")


class RFTStage(TrainCommon):
    lr_schedule: Literal["constant", "cosine", "linear"] = Field("cosine", description="The paper: cosine.")
    warmup_steps: int = Field(10, ge=0, description="The paper: 10 (capped below the step count).")
    require_submitted: bool = Field(False, description="Keep only resolved runs that ended with `submit`.")
    mask_format_errors: bool = Field(True, description="Format-error replies stay in context, out of the loss.")
    max_per_task: int | None = Field(None, ge=1, description="At most this many resolved runs per task.")
    require_resolved: bool = Field(True, description="Keep only resolved runs; False trains on every graded run (a warm start on noisy demonstrations).")

    def selection(self) -> RFTConfig:
        """The RFTConfig these fields describe (which runs are kept, what is trained on)."""
        return RFTConfig(require_submitted=self.require_submitted, require_resolved=self.require_resolved,
                         mask_format_errors=self.mask_format_errors, max_per_task=self.max_per_task)


class DAPOStage(TrainCommon):
    batch_size: int = Field(128, ge=1, le=65_536, description="Sequences per optimiser step (the paper: 128, then 256).")
    lr: float = Field(1e-6, gt=0, le=1.0, description="The paper: 1e-6.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Turn-length penalty and limit/error policies.")
    advantage: Literal["mean_std", "mean", "leave_one_out"] = Field("mean_std", description="Group baseline.")
    eps_low: float = Field(0.2, ge=0, le=1, description="Lower clip: 1 - eps_low.")
    eps_high: float = Field(0.3, ge=0, le=10, description="Upper clip (clip-higher): 1 + eps_high.")
    rewards_file: Path | None = Field(None, description="JSONL {trajectory_id, reward} replacing computed rewards.")
    drop_zero_advantage: bool = Field(True, description="Drop samples whose advantage is 0 (DAPO's dynamic sampling); "
                                      "False keeps them in the loss's normaliser (plain GRPO).")
    loss_aggregation: Literal["token", "sequence"] = Field("token", description="token: over the batch's action tokens "
                                                           "(DAPO); sequence: mean per sequence, then over sequences (GRPO).")


class TrainOutcome(BaseModel):
    """What a training stage did, plus the data figures the orchestrator logs."""

    out: Path
    final: Path | None
    steps: int
    new_steps: int
    rows: int
    data: dict[str, float] = Field(default_factory=dict, description="Data-side figures: kept counts, reward mean, ...")
    metrics: list[dict[str, Any]] = Field(default_factory=list, description="This call's per-step trainer metrics.")


OnStart = Callable[[int, int], None]
OnStep = Callable[[dict[str, Any]], None]


def _read(paths: list[Path], policy_version: str | None, exact: bool):
    from swerl.train.data import DataError, check_trajectories, read_trajectories

    try:
        trajectories = read_trajectories(paths)
        check_trajectories(trajectories, policy_version, require_exact_ids=exact)
    except DataError as e:
        raise StageInputError(str(e)) from e
    return trajectories


def trainer_config(stage: TrainCommon, objective: str, total_steps: int, **extra: Any) -> TrainerConfig:
    warmup = min(stage.warmup_steps, max(total_steps - 1, 0))
    try:
        return TrainerConfig(backend=stage.backend, objective=objective, lr=stage.lr, lr_schedule=stage.lr_schedule,
                             warmup_steps=warmup, total_steps=total_steps, seed=stage.seed, device=stage.device,
                             max_tokens_per_microbatch=stage.max_tokens_per_microbatch,
                             gradient_checkpointing=stage.gradient_checkpointing, zero_stage=stage.zero_stage, **extra)
    except ValidationError as e:
        raise StageInputError(f"invalid training settings: {e}") from e


def _train(stage: TrainCommon, rows, config: TrainerConfig, spec: dict, extra: dict[str, float],
           on_start: OnStart | None, on_step: OnStep | None) -> TrainOutcome:
    from swerl.train import data
    from swerl.train.run import train_run

    try:
        data.check_lengths(rows, config.max_tokens_per_microbatch)
    except data.DataError as e:
        raise StageInputError(str(e)) from e
    model = str(Path(stage.model).resolve()) if Path(stage.model).exists() else str(stage.model)
    spec = {**spec, "model": model, "batch_size": stage.batch_size, "seed": stage.seed, "rows": len(rows),
            "data": data.fingerprint(rows, batch_size=stage.batch_size, seed=stage.seed)}
    try:
        result: RunResult = train_run(
            stage.model, config, stage.out, lambda e: data.epoch_batches(rows, stage.batch_size, stage.seed, e), stage.epochs,
            data.steps_per_epoch(len(rows), stage.batch_size), spec=spec, iteration=stage.iteration, extra_metrics=extra,
            keep_last=stage.keep_last, save_every=stage.save_every, on_start=on_start, on_step=on_step)
    except RunMismatchError as e:
        raise StageInputError(str(e)) from e
    return TrainOutcome(out=result.out, final=result.final, steps=result.steps, new_steps=result.new_steps, rows=len(rows),
                        data=extra, metrics=result.metrics)


def train_rft(stage: RFTStage, on_start: OnStart | None = None, on_step: OnStep | None = None,
              on_data: Callable[[str], None] | None = None) -> TrainOutcome:
    """Rejection fine-tuning on the resolved trajectories (minus mean log-prob of their replies)."""
    from swerl.rl.rft import select_rft
    from swerl.train import data

    found = _read(stage.trajectories, stage.policy_version, exact=False)
    examples, skipped = select_rft(found, stage.selection())
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda kv: -kv[1]))
    if not examples:
        raise NothingToTrainError(f"no resolved trajectory kept among {len(found)}: {reasons}")
    if on_data:
        on_data(f"kept {len(examples)} of {len(found)} trajectories" + (f"; skipped {reasons}" if reasons else ""))
    rows = data.rft_rows(examples)
    config = trainer_config(stage, "sft", stage.epochs * data.steps_per_epoch(len(rows), stage.batch_size))
    spec = {"objective": "rft", "require_submitted": stage.require_submitted, "require_resolved": stage.require_resolved,
            "mask_format_errors": stage.mask_format_errors, "max_per_task": stage.max_per_task}
    return _train(stage, rows, config, spec, {"kept": float(len(rows)), "trajectories": float(len(found))}, on_start, on_step)


def train_dapo(stage: DAPOStage, on_start: OnStart | None = None, on_step: OnStep | None = None,
               on_data: Callable[[str], None] | None = None) -> TrainOutcome:
    """One DAPO update: rewards -> group advantages -> zero-advantage samples dropped -> clipped policy gradient."""
    from swerl.train import data

    found = _read(stage.trajectories, stage.policy_version, exact=True)
    try:
        overrides = data.read_reward_overrides(stage.rewards_file) if stage.rewards_file else None
        d = data.dapo_data(found, stage.reward, stage.advantage, overrides, stage.drop_zero_advantage)
    except (OSError, data.DataError) as e:
        raise StageInputError(str(e)) from e
    a = d.advantages
    if on_data:
        if overrides:
            on_data(f"{len(overrides) - len(d.unmatched_overrides)} reward(s) from {stage.rewards_file}"
                    + (f"; {len(d.unmatched_overrides)} name no trajectory here" if d.unmatched_overrides else ""))
        on_data(f"reward mean {d.reward_mean:.4g}; kept {len(d.rows)}/{a.n_total} ({d.kept_fraction:.1%}): "
                f"{a.n_zero_advantage} zero-advantage, {a.n_excluded} masked or dropped by policy"
                + (f", {d.no_action_tokens} without action tokens" if d.no_action_tokens else ""))
    if not d.rows:
        raise NothingToTrainError(
            f"nothing to train on among {a.n_total} trajectories: {a.n_zero_advantage} have zero advantage (every group's "
            f"rewards are equal), {a.n_excluded} are masked or dropped by the limit/error policies")
    config = trainer_config(stage, "dapo", stage.epochs * data.steps_per_epoch(len(d.rows), stage.batch_size),
                            eps_low=stage.eps_low, eps_high=stage.eps_high, loss_aggregation=stage.loss_aggregation)
    spec = {"objective": "dapo", "reward": stage.reward.model_dump(mode="json"), "advantage": stage.advantage,
            "eps_low": stage.eps_low, "eps_high": stage.eps_high, "drop_zero_advantage": stage.drop_zero_advantage,
            "loss_aggregation": stage.loss_aggregation}
    return _train(stage, d.rows, config, spec, d.summary(), on_start, on_step)
