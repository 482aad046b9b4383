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

from swerl.cli import _fail, console
from swerl.cli.progress import bar

train_app = typer.Typer(no_args_is_help=True, help="Train the policy on stored trajectories: rft (rejection fine-tuning) or dapo (one RL update).")

TrajOpt = typer.Option(..., "--trajectories", help="A trajectory store, or a `swerl rollout --out` run folder (its trajectories/); repeat for more.")
ModelOpt = typer.Option(..., "--model", help="Policy to start from: a model folder or hub name.")
OutOpt = typer.Option(..., "--out", help="Run folder: step-N checkpoints, metrics.jsonl, run.json, final; a rerun resumes it.")
MaxTokOpt = typer.Option(16384, "--max-tokens-per-microbatch", min=1, help="Padded tokens per forward pass; must hold the longest sequence.")
BackendOpt = typer.Option("torch", "--backend", help="torch (one process) or deepspeed (ZeRO; launch with torchrun for several processes).")
SeedOpt = typer.Option(0, "--seed", min=0, help="Seeds the trainer and the (per-epoch) shuffle of the sequences.")
VersionOpt = typer.Option(None, "--policy-version", help="Refuse trajectories sampled by any other policy version (stale data).")
ScheduleOpt = typer.Option("constant", "--lr-schedule", help="constant, cosine or linear (decay to 0 at the run's last step).")
WarmupOpt = typer.Option(0, "--warmup-steps", min=0, help="Linear warm-up steps (capped below the run's step count).")
DeviceOpt = typer.Option("auto", "--device", help="Torch backend: cpu, cuda, cuda:N or auto.")
CkptOpt = typer.Option(False, "--gradient-checkpointing", help="Recompute activations in backward (less memory).")
KeepOpt = typer.Option(0, "--keep-last", min=0, help="Keep only the newest N step checkpoints (0: keep all).")
ZeroOpt = typer.Option(3, "--zero-stage", min=1, max=3, help="DeepSpeed ZeRO stage.")


def _stage(cls, **kw):
    from pydantic import ValidationError

    try:
        return cls(**kw)
    except ValidationError as e:
        errors = "; ".join(f"--{'-'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}" for err in e.errors())
        _fail(f"invalid training settings: {errors}")


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
            _fail(str(e))
    last = result.metrics[-1] if result.metrics else None
    tail = f"; last loss {last['loss']:.4g}" if last else ""
    console.print(f"{result.new_steps} new step(s), {result.steps} in all{tail}; checkpoints in {stage.out}"
                  + (f"; final: {result.final}" if result.final else ""))


@train_app.command("rft")
def rft(
    trajectories: list[Path] = TrajOpt, model: str = ModelOpt, out: Path = OutOpt,
    epochs: int = typer.Option(1, "--epochs", min=1, help="Passes over the kept trajectories (the paper: 1)."),
    lr: float = typer.Option(5e-6, "--lr", help="Peak learning rate (the paper: 5e-6)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Sequences per optimiser step (the paper: 64)."),
    max_tokens_per_microbatch: int = MaxTokOpt, backend: str = BackendOpt, seed: int = SeedOpt,
    require_submitted: bool = typer.Option(False, "--require-submitted", help="Keep only resolved runs that ended with `submit`."),
    mask_format_errors: bool = typer.Option(True, "--mask-format-errors/--no-mask-format-errors",
                                            help="Replies that caused a format error stay in context but out of the loss."),
    max_per_task: Optional[int] = typer.Option(None, "--max-per-task", min=1, help="At most this many resolved runs per task."),
    policy_version: Optional[str] = VersionOpt,
    lr_schedule: str = typer.Option("cosine", "--lr-schedule", help="constant, cosine (the paper) or linear, to 0 at the last step."),
    warmup_steps: int = typer.Option(10, "--warmup-steps", min=0, help="Linear warm-up steps (the paper: 10; capped below the step count)."),
    device: str = DeviceOpt, gradient_checkpointing: bool = CkptOpt, keep_last: int = KeepOpt, zero_stage: int = ZeroOpt,
) -> None:
    """Rejection fine-tuning: train on the resolved trajectories' sampled tokens (minus mean log-prob)."""
    from swerl.stages.train import RFTStage, train_rft

    for name, value, allowed in (("--backend", backend, ("torch", "deepspeed")), ("--lr-schedule", lr_schedule, ("constant", "cosine", "linear"))):
        if value not in allowed:
            _fail(f"{name} {value!r} is not one of {', '.join(allowed)}")
    _run_stage(train_rft, _stage(
        RFTStage, trajectories=trajectories, model=model, out=out, epochs=epochs, lr=lr, batch_size=batch_size,
        max_tokens_per_microbatch=max_tokens_per_microbatch, backend=backend, seed=seed, require_submitted=require_submitted,
        mask_format_errors=mask_format_errors, max_per_task=max_per_task, policy_version=policy_version, lr_schedule=lr_schedule,
        warmup_steps=warmup_steps, device=device, gradient_checkpointing=gradient_checkpointing, keep_last=keep_last,
        zero_stage=zero_stage))


@train_app.command("dapo")
def dapo(
    trajectories: list[Path] = TrajOpt, model: str = ModelOpt, out: Path = OutOpt,
    rewards: Optional[Path] = typer.Option(
        None, "--rewards", help="JSONL of {\"trajectory_id\": ..., \"reward\": ...} lines (e.g. an external grader): each replaces "
        "that trajectory's computed reward R entirely (no length penalty added); an ungraded trajectory given a reward is used "
        "as a graded one."),
    eps_low: float = typer.Option(0.2, "--eps-low", help="Lower clip: the ratio is clipped at 1 - eps_low."),
    eps_high: float = typer.Option(0.3, "--eps-high", help="Upper clip (clip-higher): 1 + eps_high (the paper: 0.3, then 0.26)."),
    l_thr: int = typer.Option(10, "--l-thr", min=0, help="Turn count from which the length penalty applies."),
    t_max: int = typer.Option(40, "--t-max", min=1, help="Turn budget: the length penalty reaches -1 there."),
    length_penalty: bool = typer.Option(True, "--length-penalty/--no-length-penalty", help="Add R_length to the 0/1 success."),
    limit_policy: str = typer.Option("keep", "--limit-policy", help="Runs that hit the turn/context/time limit: keep (the paper), mask or drop."),
    error_policy: str = typer.Option("drop", "--error-policy", help="Runs that ended in an infrastructure error or are ungraded: keep, mask or drop."),
    advantage: str = typer.Option("mean_std", "--advantage", help="mean_std (the paper), mean (Dr. GRPO) or leave_one_out (RLOO)."),
    keep_zero_advantage: bool = typer.Option(False, "--keep-zero-advantage", help="Keep zero-advantage samples in the loss's normaliser (plain GRPO; DAPO drops them)."),
    loss_aggregation: str = typer.Option("token", "--loss-aggregation", help="token (DAPO: over the batch's action tokens) or sequence (GRPO: mean per sequence)."),
    batch_size: int = typer.Option(128, "--batch-size", min=1, help="Sequences per optimiser step (the paper: 128, then 256)."),
    epochs: int = typer.Option(1, "--epochs", min=1, help="Passes over this iteration's rollouts (the paper: 1)."),
    lr: float = typer.Option(1e-6, "--lr", help="Learning rate (the paper: 1e-6)."),
    max_tokens_per_microbatch: int = MaxTokOpt, backend: str = BackendOpt, seed: int = SeedOpt,
    policy_version: Optional[str] = VersionOpt,
    iteration: int = typer.Option(0, "--iteration", min=0, help="The RL iteration, recorded in checkpoints and metrics."),
    lr_schedule: str = ScheduleOpt, warmup_steps: int = WarmupOpt, device: str = DeviceOpt,
    gradient_checkpointing: bool = CkptOpt, keep_last: int = KeepOpt, zero_stage: int = ZeroOpt,
) -> None:
    """One DAPO update: rewards -> group advantages -> zero-advantage samples dropped -> clipped policy gradient."""
    from pydantic import ValidationError

    from swerl.rl.rewards import RewardConfig
    from swerl.stages.train import DAPOStage, train_dapo

    for name, value, allowed in (("--limit-policy", limit_policy, ("keep", "mask", "drop")),
                                 ("--error-policy", error_policy, ("keep", "mask", "drop")),
                                 ("--advantage", advantage, ("mean_std", "mean", "leave_one_out")),
                                 ("--loss-aggregation", loss_aggregation, ("token", "sequence")),
                                 ("--backend", backend, ("torch", "deepspeed")),
                                 ("--lr-schedule", lr_schedule, ("constant", "cosine", "linear"))):
        if value not in allowed:
            _fail(f"{name} {value!r} is not one of {', '.join(allowed)}")
    try:
        reward_cfg = RewardConfig(l_thr=l_thr, t_max=t_max, length_penalty=length_penalty, limit_policy=limit_policy,
                                  error_policy=error_policy)
    except ValidationError as e:
        _fail(f"invalid reward settings: {e}")
    _run_stage(train_dapo, _stage(
        DAPOStage, trajectories=trajectories, model=model, out=out, rewards_file=rewards, eps_low=eps_low, eps_high=eps_high,
        reward=reward_cfg, advantage=advantage, drop_zero_advantage=not keep_zero_advantage, loss_aggregation=loss_aggregation,
        batch_size=batch_size, epochs=epochs, lr=lr,
        max_tokens_per_microbatch=max_tokens_per_microbatch, backend=backend, seed=seed, policy_version=policy_version,
        iteration=iteration, lr_schedule=lr_schedule, warmup_steps=warmup_steps, device=device,
        gradient_checkpointing=gradient_checkpointing, keep_last=keep_last, zero_stage=zero_stage))
