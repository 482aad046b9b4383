"""Flow: one training iteration, RFT or DAPO. Sample the policy, measure the rollouts, train on
them with the iteration's objective, register the checkpoint (or carry the policy forward)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from flows.rollout import rollout_stage, run_chunks
from swerl.orchestration.metrics import prefixed, train_metrics
from swerl.orchestration.objectives import Objective, RFTIteration
from swerl.envs.images import ImageSettings
from swerl.orchestration.params import SamplerParams
from swerl.tracking.config import TrackingConfig
from swerl.rollout.store import TrajectoryStore
from swerl.orchestration.results import IterationTimes, PolicyRef, SampledIteration, StageResult
from tasks import tracking as tr
from tasks.train import train_dapo_task, train_rft_task


def _sample(objective: Objective, tasks: Path, model: str, out: Path, repos: Path | None, policy_version: str,
            sampler: SamplerParams, images: ImageSettings, seed: int, tracking: TrackingConfig, parent_run_id: str | None,
            container_label: str | None, follow: Path | None = None, trains_from: str | None = None) -> SampledIteration:
    """The iteration's MLflow run and its rollouts of ``model`` (their images built or found with ``images``);
    ``follow``: the pipeline's policy feed, whose newer checkpoints the rollout loads as they land (``trains_from``:
    the version its update starts from)."""
    sampler = objective.sampler_of(sampler)
    objective.check(sampler)  # before any rollout
    run_id = tr.stage_run(tracking, parent_run_id, objective.name, params=objective.run_params(sampler, policy_version))
    sampling = rollout_stage(tasks=tasks, repos=repos, model=model, out=out / "rollout", samples=objective.samples,
                             seed=objective.seed_of(seed), policy_version=policy_version, sampler=sampler,
                             images=images, container_label=container_label, grade=objective.grade, follow=follow,
                             trains_from=trains_from)
    rolled = run_chunks(sampling, sampler.chunk_size, sampler.chunk_timeout_s, dask_address=sampler.dask_address)
    return SampledIteration(run_id=run_id, rolled=rolled, policy_version=policy_version, trains_from=trains_from)


def _recount_staleness(name: str, sampled: SampledIteration, policy_version: str) -> None:
    """When the iteration before trained nothing, this update starts from ``policy_version``, not the version its
    rollouts were told: their stored staleness is counted again from here."""
    if sampled.trains_from in (None, policy_version):
        return
    restamped = TrajectoryStore(sampled.rolled.store).restamp_staleness(policy_version)
    print(f"{name} starts from {policy_version}, not {sampled.trains_from} as planned when its rollouts began: "
          f"{restamped} trajectories' staleness counted again from {policy_version}")


@flow(name="sample_iteration", log_prints=True, **HOOKS)
def sample_iteration(objective: Objective, tasks: Path, model: str, out: Path, repos: Path | None = None,
                     policy_version: str = "0", sampler: SamplerParams = SamplerParams(),
                     images: ImageSettings = ImageSettings(), seed: int = 0,
                     tracking: TrackingConfig = TrackingConfig(), parent_run_id: str | None = None,
                     container_label: str | None = None, follow: Path | None = None,
                     trains_from: str | None = None) -> SampledIteration:
    """The rollouts of a training iteration alone: an asynchronous pipeline samples iteration k+1 with it while
    iteration k trains, loading each checkpoint announced on ``follow`` as it lands."""
    return _sample(objective, tasks, model, out, repos, policy_version, sampler, images, seed, tracking, parent_run_id,
                   container_label, follow, trains_from)


@flow(name="train_iteration", log_prints=True, **HOOKS)
def train_iteration(objective: Objective, tasks: Path, model: str, out: Path, repos: Path | None = None,
                    policy_version: str = "0", sampler: SamplerParams = SamplerParams(),
                    images: ImageSettings = ImageSettings(), seed: int = 0,
                    tracking: TrackingConfig = TrackingConfig(), parent_run_id: str | None = None, step: int = 1,
                    container_label: str | None = None, sampled: SampledIteration | None = None,
                    waited_s: float | None = None) -> StageResult:
    """Rollouts of ``model`` on ``tasks`` -> the objective's update -> a registered `candidate`.

    The MLflow run and the new policy version are named by the objective (`rft`, `warm-start`,
    `iter-k` / `dapo-k`); with nothing to train on, the starting policy carries forward. ``sampled``: the
    iteration's rollouts made already (an asynchronous pipeline's, sampled while the previous iteration trained),
    ``waited_s``: how long the pipeline waited for them to end.
    """
    if sampled is None:
        t0 = time.monotonic()
        sampled = _sample(objective, tasks, model, out, repos, policy_version, sampler, images, seed, tracking,
                          parent_run_id, container_label)
        sampled = sampled.model_copy(update={"seconds": time.monotonic() - t0})
        waited_s = sampled.seconds
    name, run_id, rolled = objective.name, sampled.run_id, sampled.rolled
    _recount_staleness(name, sampled, policy_version)
    seed = objective.seed_of(seed)
    train_stage = objective.stage_config(rolled.store, model, out / "train", seed, policy_version)
    task = train_rft_task if isinstance(objective, RFTIteration) else train_dapo_task
    # the task reads the rollout once: its figures and the selection come back with the update, not the trajectories
    t0 = time.monotonic()
    outcome = task.with_options(timeout_seconds=objective.train.timeout_s)(train_stage, wall_s=rolled.wall_s)
    metrics = dict(outcome.rollout.metrics)
    sampling_s = sampled.seconds if sampled.seconds is not None else rolled.wall_s
    times = IterationTimes.of(metrics, sampling_s, time.monotonic() - t0, sampling_s if waited_s is None else waited_s)
    metrics.update(times.metrics())
    summary = {}
    if outcome.selection is not None:
        metrics.update({"rft/kept": float(outcome.selection.kept), "rft/tasks_kept": float(outcome.selection.tasks_kept)})
        summary["selection"] = outcome.selection.model_dump()
    data = f"{name}-trajectories"
    trained_on = tr.log_training_inputs(tracking, run_id, tasks, rolled.store, data, outcome.rollout.trajectories, model,
                                        parent_run_id)
    if outcome.trained:
        metrics.update(prefixed("train", train_metrics(outcome.step_metrics)))
        if not isinstance(objective, RFTIteration):
            metrics.update(prefixed("data", outcome.data))
        registered = tr.register_trained_checkpoint(tracking, run_id, outcome.final, name=name,
                                                    policy_version=objective.new_version, step=step,
                                                    metrics={k: v for k, v in metrics.items() if k.startswith("train/")},
                                                    trained_on=trained_on, metrics_dataset=data)
        policy = PolicyRef.of(str(outcome.final), objective.new_version, registered)
    else:
        print(f"{name} trained nothing, the policy carries forward: {outcome.reason}")
        policy = PolicyRef.of(model, policy_version)
    metrics["train/trained"] = 1.0 if outcome.trained else 0.0
    tr.log_metrics(tracking, run_id, metrics, step=step)
    ran_on = sorted({where for where in rolled.ran_on if where})
    tr.finish_run(tracking, run_id, summary={"policy": policy.model_dump(), **summary, "reason": outcome.reason,
                                             "ran_on": ran_on})
    return StageResult(policy=policy, metrics=metrics, run_id=run_id, trained=outcome.trained, reason=outcome.reason,
                       behaviour=outcome.rollout.behaviour, ran_on=ran_on,
                       sampled_by=outcome.rollout.sampled_by, times=times)
