"""`swerl train rft` and `swerl train dapo`: stored trajectories -> optimiser steps -> checkpoints.

Both write ``OUT/step-N`` (a Hugging Face model folder engines load, plus trainer state)
after every optimiser step, ``OUT/metrics.jsonl`` (a line per step), ``OUT/run.json`` (what
the run trains on) and, when done, ``OUT/final`` (a symlink to the last step). Rerunning
the same command resumes from the newest checkpoint; raising ``--epochs`` continues a
finished run. See ``swerl.train.run``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from swerl.cli.common import fail, console
from swerl.cli.options import field_option, validated
from swerl.cli.progress import bar
from swerl.rl.rewards import RewardConfig
from swerl.rl.rft import RFTConfig
from swerl.stages.train import DAPO_TRAIN, RFT_TRAIN, DAPOObjective, TrainCommon, TrainSettings
from swerl.train.config import DeepSpeedTrainerConfig, LossConfig, OptimizerConfig, TorchTrainerConfig


RFT = TrainSettings.model_validate(RFT_TRAIN)  # each command's defaults are its stage's preset
DAPO = TrainSettings.model_validate(DAPO_TRAIN)
TORCH_DEVICE = TorchTrainerConfig.model_fields["device"].description
ZERO_STAGE = DeepSpeedTrainerConfig.model_fields["zero_stage"].description

TrajOpt = typer.Option(..., "--trajectories", help="A trajectory store, or a `swerl rollout --out` run folder (its trajectories/); repeat for more.")
ModelOpt = typer.Option(..., "--model", help="Policy to start from: a model folder or hub name.")
OutOpt = typer.Option(..., "--out", help="Run folder: step-N checkpoints, metrics.jsonl, run.json, final; a rerun resumes it.")
MaxTokOpt = field_option(TrainSettings, "max_tokens_per_microbatch", "--max-tokens-per-microbatch")
BackendOpt = typer.Option("torch", "--backend", help="Trainer backend: 'torch' (one process) or 'deepspeed' (ZeRO over every "
                          "launched process).")
SeedOpt = field_option(TrainCommon, "seed", "--seed")
VersionOpt = field_option(TrainCommon, "require_version", "--require-version", "--policy-version")
DeviceOpt = field_option(TorchTrainerConfig, "device", "--device", help="Torch backend: " + TORCH_DEVICE)
CkptOpt = field_option(TrainSettings, "gradient_checkpointing", "--gradient-checkpointing")
KeepOpt = field_option(TrainSettings, "keep_last", "--keep-last")
SaveOpt = field_option(TrainSettings, "save_every", "--save-every")
ZeroOpt = field_option(DeepSpeedTrainerConfig, "zero_stage", "--zero-stage", help="DeepSpeed backend: " + ZERO_STAGE)


def _settings(preset: TrainSettings, **values) -> dict:
    """TrainSettings as a dict from the flat options: the optimiser's, and the backend's (``trainer``: only the
    fields the chosen backend has)."""
    optimizer = {name: values.pop(name) for name in ("lr", "lr_schedule", "warmup_steps")}
    backend = values.pop("backend")
    device, zero_stage = values.pop("device"), values.pop("zero_stage")
    trainer = {"backend": backend, **({"device": device} if backend == "torch" else {"zero_stage": zero_stage})}
    return {**values, "trainer": trainer, "optimizer": {**preset.optimizer.model_dump(), **optimizer}}


def _run_stage(fn, stage) -> None:
    from swerl.stages import StageInputError

    with contextlib.ExitStack() as stack:
        advance: list[Callable[[str], None]] = []

        def on_start(done: int, total: int) -> None:
            if done:
                console.print(f"resuming {stage.out} after step {done} of {total}")
            if done >= total:
                console.print(f"nothing to do: {stage.out} already has all {total} step(s)")
            advance.append(stack.enter_context(bar("training", max(total - done, 0))))

        def on_step(m: dict) -> None:
            advance[0](f"step {m['step']} loss {m['loss']:.4g} grad_norm {m['grad_norm']:.3g}")

        try:
            result = fn(stage, on_start=on_start, on_step=on_step, on_data=console.print)
        except StageInputError as e:
            fail(str(e))
    last = result.metrics[-1] if result.metrics else None
    tail = f"; last loss {last['loss']:.4g}" if last else ""
    console.print(f"{result.new_steps} new step(s), {result.steps} in all{tail}; checkpoints in {stage.out}"
                  + (f"; final: {result.final}" if result.final else ""))


def rft(
    trajectories: list[Path] = TrajOpt, model: str = ModelOpt, out: Path = OutOpt,
    epochs: int = field_option(TrainSettings, "epochs", "--epochs", default=RFT.epochs),
    lr: float = field_option(OptimizerConfig, "lr", "--lr", default=RFT.optimizer.lr),
    batch_size: int = field_option(TrainSettings, "batch_size", "--batch-size", default=RFT.batch_size),
    max_tokens_per_microbatch: int = MaxTokOpt, backend: str = BackendOpt, seed: int = SeedOpt,
    require_submitted: bool = field_option(RFTConfig, "require_submitted", "--require-submitted"),
    require_resolved: bool = field_option(RFTConfig, "require_resolved", "--require-resolved/--keep-unresolved"),
    mask_format_errors: bool = field_option(RFTConfig, "mask_format_errors", "--mask-format-errors/--no-mask-format-errors"),
    max_per_task: Optional[int] = field_option(RFTConfig, "max_per_task", "--max-per-task"),
    require_version: Optional[str] = VersionOpt,
    lr_schedule: str = field_option(OptimizerConfig, "lr_schedule", "--lr-schedule", default=RFT.optimizer.lr_schedule),
    warmup_steps: int = field_option(OptimizerConfig, "warmup_steps", "--warmup-steps", default=RFT.optimizer.warmup_steps),
    device: str = DeviceOpt, gradient_checkpointing: bool = CkptOpt, keep_last: int = KeepOpt, save_every: int = SaveOpt,
    zero_stage: int = ZeroOpt,
) -> None:
    """Rejection fine-tuning: train on the resolved trajectories' sampled tokens (minus mean log-prob)."""
    from swerl.stages.train import RFTStage, train_rft

    train = _settings(RFT, epochs=epochs, lr=lr, batch_size=batch_size, max_tokens_per_microbatch=max_tokens_per_microbatch,
                      backend=backend, lr_schedule=lr_schedule, warmup_steps=warmup_steps, device=device,
                      gradient_checkpointing=gradient_checkpointing, keep_last=keep_last, save_every=save_every,
                      zero_stage=zero_stage)
    _run_stage(train_rft, validated(
        RFTStage, "training", trajectories=trajectories, model=model, out=out, seed=seed, require_version=require_version,
        train=train, require_submitted=require_submitted, require_resolved=require_resolved,
        mask_format_errors=mask_format_errors, max_per_task=max_per_task))


def dapo(
    trajectories: list[Path] = TrajOpt, model: str = ModelOpt, out: Path = OutOpt,
    rewards: Optional[Path] = field_option(
        DAPOObjective, "rewards_file", "--rewards",
        help="JSONL of {\"trajectory_id\": ..., \"reward\": ...} lines (e.g. an external grader): each replaces that "
        "trajectory's computed reward R entirely (no length penalty added); an ungraded trajectory given a reward is used "
        "as a graded one."),
    eps_low: float = field_option(LossConfig, "eps_low", "--eps-low"),
    eps_high: float = field_option(LossConfig, "eps_high", "--eps-high"),
    neg_prob_cap: float = field_option(LossConfig, "neg_prob_cap", "--neg-prob-cap"),
    kl_coef: float = field_option(LossConfig, "kl_coef", "--kl-coef"),
    l_thr: int = field_option(RewardConfig, "l_thr", "--l-thr"),
    t_max: int = field_option(RewardConfig, "t_max", "--t-max"),
    length_penalty: bool = field_option(RewardConfig, "length_penalty", "--length-penalty/--no-length-penalty"),
    limit_policy: str = field_option(RewardConfig, "limit_policy", "--limit-policy"),
    error_policy: str = field_option(RewardConfig, "error_policy", "--error-policy"),
    advantage: str = field_option(DAPOObjective, "advantage", "--advantage"),
    keep_zero_advantage: bool = typer.Option(False, "--keep-zero-advantage", help="Keep zero-advantage samples in the loss's "
                                             "normaliser (plain GRPO; DAPO drops them: drop_zero_advantage)."),
    loss_aggregation: str = field_option(LossConfig, "loss_aggregation", "--loss-aggregation"),
    batch_size: int = field_option(TrainSettings, "batch_size", "--batch-size", default=DAPO.batch_size),
    epochs: int = field_option(TrainSettings, "epochs", "--epochs", default=DAPO.epochs),
    lr: float = field_option(OptimizerConfig, "lr", "--lr", default=DAPO.optimizer.lr),
    max_tokens_per_microbatch: int = MaxTokOpt, backend: str = BackendOpt, seed: int = SeedOpt,
    require_version: Optional[str] = VersionOpt,
    iteration: int = field_option(TrainCommon, "iteration", "--iteration"),
    lr_schedule: str = field_option(OptimizerConfig, "lr_schedule", "--lr-schedule", default=DAPO.optimizer.lr_schedule),
    warmup_steps: int = field_option(OptimizerConfig, "warmup_steps", "--warmup-steps", default=DAPO.optimizer.warmup_steps),
    device: str = DeviceOpt, gradient_checkpointing: bool = CkptOpt, keep_last: int = KeepOpt, save_every: int = SaveOpt,
    zero_stage: int = ZeroOpt,
) -> None:
    """One DAPO update: rewards -> group advantages -> zero-advantage samples dropped -> clipped policy gradient."""
    from swerl.stages.train import DAPOStage, train_dapo

    train = _settings(DAPO, epochs=epochs, lr=lr, batch_size=batch_size, max_tokens_per_microbatch=max_tokens_per_microbatch,
                      backend=backend, lr_schedule=lr_schedule, warmup_steps=warmup_steps, device=device,
                      gradient_checkpointing=gradient_checkpointing, keep_last=keep_last, save_every=save_every,
                      zero_stage=zero_stage)
    reward = dict(l_thr=l_thr, t_max=t_max, length_penalty=length_penalty, limit_policy=limit_policy, error_policy=error_policy)
    _run_stage(train_dapo, validated(
        DAPOStage, "training", trajectories=trajectories, model=model, out=out, seed=seed, require_version=require_version,
        iteration=iteration, train=train, rewards_file=rewards, reward=reward, advantage=advantage,
        drop_zero_advantage=not keep_zero_advantage,
        loss=dict(eps_low=eps_low, eps_high=eps_high, loss_aggregation=loss_aggregation, neg_prob_cap=neg_prob_cap,
                  kl_coef=kl_coef)))
