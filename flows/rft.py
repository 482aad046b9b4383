"""Flow: rejection fine-tuning. Sample with the starting policy, keep resolved runs, fine-tune."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from flows.rollout import rollout_stage, run_chunks
from swerl.orchestration.metrics import grading_metrics, prefixed, rollout_metrics, train_metrics
from swerl.orchestration.params import RFTParams, SamplerParams, TrackingParams
from swerl.orchestration.results import PolicyRef, StageResult
from swerl.rl.rft import RFTConfig
from swerl.stages.config import part
from swerl.stages.rollout import stored_trajectories
from swerl.stages.train import RFTStage
from tasks import tracking as tr
from tasks.train import select_rft_data, train_rft_task


@flow(name="rft", log_prints=True, **HOOKS)
def rft(tasks: Path, model: str, out: Path, repos: Path | None = None, policy_version: str = "0",
        rft: RFTParams = RFTParams(), sampler: SamplerParams = SamplerParams(), seed: int = 0,
        tracking: TrackingParams = TrackingParams(), parent_run_id: str | None = None, step: int = 1,
        container_label: str | None = None, stage: str = "rft") -> StageResult:
    """Rollouts of ``model`` on ``tasks`` -> resolved runs -> SFT on their replies -> a registered `candidate`.

    ``stage`` names the MLflow run and the new policy version: ``rft``, or ``warm-start``
    for supervised warm-up on demonstrations before the measured curve begins.
    """
    sampler = rft.sampler or sampler
    run_id = tr.stage_run(tracking, parent_run_id, stage, params={"samples": rft.samples, "engine": sampler.engine,
                                                                 "lr": rft.train.optimizer.lr, "epochs": rft.train.epochs})
    sampling = rollout_stage(tasks=tasks, repos=repos, model=model, out=out / "rollout", samples=rft.samples, seed=seed,
                             policy_version=policy_version, sampler=sampler, container_label=container_label)
    rolled = run_chunks(sampling, sampler.chunk_size, sampler.chunk_timeout_s, dask_address=sampler.dask_address)
    trajectories = stored_trajectories(Path(rolled["store"]))
    metrics = prefixed("rollout", rollout_metrics(trajectories, wall_s=rolled["wall_s"]))
    metrics.update(prefixed("grading", grading_metrics(trajectories)))
    data = f"{stage}-trajectories"
    trained_on = tr.log_training_inputs(tracking, run_id, tasks, Path(rolled["store"]), data, len(trajectories), model,
                                        parent_run_id)
    t = rft.train
    train_stage = RFTStage(trajectories=[Path(rolled["store"])], model=model, out=out / "train", seed=seed, train=t.settings(),
                           **part(rft, RFTConfig).model_dump())
    selected = select_rft_data(train_stage)
    metrics.update({"rft/kept": float(selected["kept"]), "rft/tasks_kept": float(selected["tasks_kept"])})
    outcome = train_rft_task.with_options(timeout_seconds=t.timeout_s)(train_stage)
    if outcome["trained"]:
        metrics.update(prefixed("train", train_metrics(outcome["step_metrics"])))
        registered = tr.register_trained_checkpoint(tracking, run_id, Path(outcome["final"]), name=stage,
                                                    policy_version=stage, step=step,
                                                    metrics={k: v for k, v in metrics.items() if k.startswith("train/")},
                                                    trained_on=trained_on, metrics_dataset=data)
        policy = PolicyRef.of(outcome["final"], stage, registered)
    else:
        print(f"{stage} trained nothing, the policy carries forward: {outcome['reason']}")
        policy = PolicyRef.of(model, policy_version)
    metrics["train/trained"] = 1.0 if outcome["trained"] else 0.0
    tr.log_metrics(tracking, run_id, metrics, step=step)
    tr.finish_run(tracking, run_id, summary={"policy": policy.model_dump(), "selection": selected, "reason": outcome["reason"]})
    return StageResult(policy=policy, metrics=metrics, run_id=run_id, trained=outcome["trained"], reason=outcome["reason"])
