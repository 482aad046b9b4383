"""Stages: rejection fine-tuning and one DAPO update, from stored trajectories to checkpoints.

Both write ``out/step-N`` after every optimiser step and ``out/final`` when done; rerunning
with the same input resumes (``swerl.train.run``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swerl.agent.trajectory import Trajectory
from swerl.rl.rewards import RewardConfig
from swerl.rl.rft import RFTConfig
from swerl.stages.config import changed, part
from swerl.stages.errors import NothingToTrainError, StageInputError
from swerl.train.config import LossConfig, TrainerConfig, TrainerSettings
from swerl.util.settings import SeedSettings

if TYPE_CHECKING:
    from swerl.train.proximal import ProximalPass


# The paper's presets: RFT at 5e-6, cosine, 10 warm-up steps (batch 64 there); DAPO at 1e-6, constant, batch 128.
RFT_TRAIN: dict[str, Any] = {"batch_size": 8, "optimizer": {"lr": 5e-6, "lr_schedule": "cosine", "warmup_steps": 10}}
DAPO_TRAIN: dict[str, Any] = {"batch_size": 128, "optimizer": {"lr": 1e-6, "lr_schedule": "constant"}}


class TrainSettings(TrainerSettings):
    """How a stage trains, whatever its data: the trainer (backend, optimiser), passes, batch size, checkpoints."""

    epochs: int = Field(1, ge=1, le=10_000, description="Passes over the stage's data.")
    batch_size: int = Field(8, ge=1, le=65_536, description="Sequences per optimiser step.")
    keep_last: int = Field(0, ge=0, description="Keep only the newest N step checkpoints (0: all).")
    save_every: int = Field(1, ge=1, le=1_000_000, description="Write a checkpoint every N steps and at the last "
                            "(a long supervised run need not write one per step).")
    target_kl: float | None = Field(None, gt=0.0, le=10.0, description="DAPO: end the update after the first epoch whose "
                                    "mean approx_kl (k3, against the policy that sampled) passes this, as PPO's target_kl "
                                    "does; more epochs over the same rollouts would drift off that policy. None: every "
                                    "epoch runs.")


class TrainCommon(SeedSettings):
    """What both objectives share: data, start, destination, and how to train; the seed seeds the trainer and the
    per-epoch shuffle."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Path] = Field(description="Trajectory stores or rollout run folders.")
    model: str = Field(description="Policy to start from: a model folder or hub name.")
    out: Path = Field(description="Run folder: step-N, metrics.jsonl, run.json, final; a rerun resumes it.")
    require_version: str | None = Field(None, max_length=256, description="The policy version the "
                                        "trajectories must record: any other is refused (with off_policy.max_staleness: "
                                        "the update's starting version, which staleness counts from). None: any version.")
    iteration: int = Field(0, ge=0, description="The RL iteration, recorded in checkpoints and metrics.")
    train: TrainSettings = Field(default_factory=TrainSettings, description="Backend, optimiser, passes, batch size, checkpoints.")


class RFTStage(TrainCommon, RFTConfig):
    """Rejection fine-tuning: which runs are kept (``RFTConfig``) and how they are trained on."""

    train: TrainSettings = Field(default_factory=lambda: TrainSettings.model_validate(RFT_TRAIN),
                                 description="Backend, optimiser, passes, batch size, checkpoints (default: the paper's RFT).")

    def selection(self) -> RFTConfig:
        """The RFTConfig part of these fields (which runs are kept, what is trained on)."""
        return part(self, RFTConfig)


class OffPolicyConfig(BaseModel):
    """Off-policy DAPO: train on data sampled by a policy a few versions behind the one the update starts from
    (an asynchronous pipeline samples the next iteration while this one trains), corrected by a truncated
    importance weight (``swerl.rl.loss``; its cap is ``loss.is_cap``)."""

    model_config = ConfigDict(extra="forbid")

    max_staleness: int = Field(0, ge=0, le=16, description="Most versions a trajectory (its oldest turn) may be behind the "
                               "update's start (`require_version`) to be trained on; the rest are left out and counted "
                               "(data/stale_dropped). 0: only the start's own data, as the paper (synchronous). In a "
                               "pipeline, above 0 also overlaps the stages: iteration k+1 samples while iteration k "
                               "trains, loading k's checkpoint when it lands (its data is then one version behind).")


class DAPOObjective(BaseModel):
    """What one DAPO update optimises: rewards, group baseline, which samples count, the clipped loss."""

    model_config = ConfigDict(extra="forbid")

    reward: RewardConfig = Field(default_factory=RewardConfig, description="Turn-length penalty and limit/error policies.")
    advantage: Literal["mean_std", "mean", "leave_one_out"] = Field(
        "mean_std", description="Group baseline: mean_std (the paper), mean (Dr. GRPO) or leave_one_out (RLOO).")
    drop_zero_advantage: bool = Field(True, description="Drop samples whose advantage is 0 (DAPO's dynamic sampling); "
                                      "False keeps them in the loss's normaliser (plain GRPO).")
    loss: LossConfig = Field(default_factory=LossConfig, description="Clip range (clip-higher) and token or sequence aggregation.")
    rewards_file: Path | None = Field(None, description="External grader: JSONL {trajectory_id, reward} replacing the computed "
                                      "rewards of the trajectories it names (ids are '<instance_id>/<sample_index>').")
    off_policy: OffPolicyConfig = Field(default_factory=OffPolicyConfig, description="How stale the data may be "
                                        "(0: synchronous).")


class DAPOStage(TrainCommon, DAPOObjective):
    """One DAPO update on one iteration's rollouts."""

    train: TrainSettings = Field(default_factory=lambda: TrainSettings.model_validate(DAPO_TRAIN),
                                 description="Backend, optimiser, passes, batch size, checkpoints (default: the paper's DAPO).")


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


def _read(paths: list[Path], policy_version: str | None, exact: bool, found: Sequence[Trajectory] | None = None):
    """The stage's trajectories (``found``: already read from ``paths`` by the caller), checked."""
    from swerl.train.data import DataError, check_trajectories, read_trajectories

    try:
        trajectories = list(found) if found is not None else read_trajectories(paths)
        check_trajectories(trajectories, policy_version, require_exact_ids=exact)
    except DataError as e:
        raise StageInputError(str(e)) from e
    return trajectories


def trainer_config(stage: TrainCommon, objective: str, total_steps: int, loss: LossConfig | None = None) -> TrainerConfig:
    """The trainer's config: the stage's settings, the objective, the run's step count (warm-up capped below it), its seed."""
    warmup = min(stage.train.optimizer.warmup_steps, max(total_steps - 1, 0))
    settings = part(stage.train, TrainerSettings).model_dump(exclude={"optimizer"})
    try:
        return TrainerConfig(**settings, optimizer=stage.train.optimizer.model_copy(update={"warmup_steps": warmup}),
                             objective=objective, total_steps=total_steps, seed=stage.seed, loss=loss or LossConfig())
    except ValidationError as e:
        raise StageInputError(f"invalid training settings: {e}") from e


def _train(stage: TrainCommon, rows, config: TrainerConfig, spec: dict, extra: dict[str, float],
           on_start: OnStart | None, on_step: OnStep | None, proximal: ProximalPass | None = None) -> TrainOutcome:
    from swerl.train import data
    from swerl.train.run import RunMismatchError, RunResult, train_run

    try:
        data.check_lengths(rows, config.max_tokens_per_microbatch)
    except data.DataError as e:
        raise StageInputError(str(e)) from e
    model = str(Path(stage.model).resolve()) if Path(stage.model).exists() else str(stage.model)
    t = stage.train
    spec = {**spec, "model": model, "batch_size": t.batch_size, "seed": stage.seed, "rows": len(rows),
            "data": data.fingerprint(rows, batch_size=t.batch_size, seed=stage.seed)}
    if t.target_kl is not None:  # only then: runs written before the option resume unchanged
        spec["target_kl"] = t.target_kl
    try:
        result: RunResult = train_run(
            stage.model, config, stage.out,
            lambda e: data.epoch_batches(proximal.rows() if proximal else rows, t.batch_size, stage.seed, e), t.epochs,
            data.steps_per_epoch(len(rows), t.batch_size), spec=spec, iteration=stage.iteration, extra_metrics=extra,
            keep_last=t.keep_last, save_every=t.save_every, on_start=on_start, on_step=on_step, target_kl=t.target_kl,
            before_training=proximal)
    except RunMismatchError as e:
        raise StageInputError(str(e)) from e
    if result.stopped_kl is not None:  # the update ended early: say where, beside the data figures
        extra = {**extra, "stopped_kl": result.stopped_kl}
    return TrainOutcome(out=result.out, final=result.final, steps=result.steps, new_steps=result.new_steps, rows=len(rows),
                        data=extra, metrics=result.metrics)


def rft_spec(stage: RFTStage) -> dict[str, Any]:
    """What an RFT run folder was trained with, beyond the data: a resume refuses other settings."""
    # the four keys every RFT run has recorded; any other selection setting only when changed
    return {"objective": "rft", "require_submitted": stage.require_submitted, "require_resolved": stage.require_resolved,
            "mask_format_errors": stage.mask_format_errors, "max_per_task": stage.max_per_task,
            **changed(stage.selection())}


def dapo_spec(stage: DAPOStage) -> dict[str, Any]:
    """What a DAPO run folder was trained with, beyond the data: a resume refuses other settings."""
    # the keys every DAPO run has recorded; any other loss setting (neg_prob_cap, kl_coef, ...) only when changed
    return {"objective": "dapo", "reward": stage.reward.model_dump(mode="json"), "advantage": stage.advantage,
            "eps_low": stage.loss.eps_low, "eps_high": stage.loss.eps_high, "drop_zero_advantage": stage.drop_zero_advantage,
            "loss_aggregation": stage.loss.loss_aggregation, **changed(stage.loss), **changed(stage.off_policy)}


def train_rft(stage: RFTStage, on_start: OnStart | None = None, on_step: OnStep | None = None,
              on_data: Callable[[str], None] | None = None, found: Sequence[Trajectory] | None = None) -> TrainOutcome:
    """Rejection fine-tuning on the resolved trajectories (minus mean log-prob of their replies); ``found``:
    the stage's trajectories when the caller has read them already."""
    from swerl.rl.rft import select_rft
    from swerl.train import data

    found = _read(stage.trajectories, stage.require_version, exact=False, found=found)
    examples, skipped = select_rft(found, stage.selection())
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda kv: -kv[1]))
    if not examples:
        raise NothingToTrainError(f"no resolved trajectory kept among {len(found)}: {reasons}")
    if on_data:
        on_data(f"kept {len(examples)} of {len(found)} trajectories" + (f"; skipped {reasons}" if reasons else ""))
    rows = data.rft_rows(examples)
    config = trainer_config(stage, "sft", stage.train.epochs * data.steps_per_epoch(len(rows), stage.train.batch_size))
    return _train(stage, rows, config, rft_spec(stage), {"kept": float(len(rows)), "trajectories": float(len(found))}, on_start, on_step)


def train_dapo(stage: DAPOStage, on_start: OnStart | None = None, on_step: OnStep | None = None,
               on_data: Callable[[str], None] | None = None, found: Sequence[Trajectory] | None = None) -> TrainOutcome:
    """One DAPO update: rewards -> group advantages -> zero-advantage samples dropped -> clipped policy gradient;
    ``found``: the stage's trajectories when the caller has read them already."""
    from swerl.train import data

    bound = stage.off_policy.max_staleness
    found = _read(stage.trajectories, None if bound else stage.require_version, exact=True, found=found)
    split = _within_staleness(stage, found) if bound else None
    found = split.kept if split else found
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
    config = trainer_config(stage, "dapo", stage.train.epochs * data.steps_per_epoch(len(d.rows), stage.train.batch_size),
                            stage.loss)
    rows, figures, proximal = d.rows, d.summary(), None
    if split is not None:
        proximal = _proximal(stage, rows, split.staleness)
        figures |= {"stale_dropped": float(len(split.dropped)), "staleness_mean": split.mean()}
        if on_data and split.dropped:
            on_data(f"{len(split.dropped)} trajectory(ies) more than {bound} version(s) behind {stage.require_version} left out")
    return _train(stage, rows, config, dapo_spec(stage), figures, on_start, on_step, proximal)


def _within_staleness(stage: DAPOStage, found: Sequence[Trajectory]):
    """The trajectories at most ``off_policy.max_staleness`` versions behind the update's start, and the rest."""
    from swerl.rl.staleness import StalenessError, within_bound

    if stage.require_version is None:
        raise StageInputError("off_policy.max_staleness needs the update's starting version (require_version) to measure "
                              "how far behind each trajectory is")
    try:
        return within_bound(found, stage.require_version, stage.off_policy.max_staleness)
    except StalenessError as e:
        raise StageInputError(str(e)) from e


def _proximal(stage: DAPOStage, rows: list, staleness: dict[str, int]):
    """The proximal pass of the stale rows (their tokens' log-probs under the update's starting model, computed by the
    update's trainer before its first step and kept in the run folder for a resume); None when every row is the
    start's own data, whose sampler was the start."""
    from swerl.train.proximal import ProximalPass

    stale = {r.example.trajectory_id for r in rows if staleness[r.example.trajectory_id] > 0}
    return ProximalPass(rows, stale, stage.out) if stale else None
