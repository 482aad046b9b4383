"""Flow: one DAPO iteration. G samples per task from the current policy, rewards, group
advantages, zero-advantage groups dropped, one clipped policy-gradient update."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from flows.rollout import rollout_stage, run_chunks
from swerl.orchestration.metrics import grading_metrics, prefixed, rollout_metrics, train_metrics
from swerl.orchestration.params import DAPOParams, SamplerParams, TrackingParams
from swerl.orchestration.results import PolicyRef, StageResult
from swerl.rl.rewards import check_turn_window
from swerl.stages.config import part
from swerl.stages.rollout import stored_trajectories
from swerl.stages.train import DAPOObjective, DAPOStage
from tasks import tracking as tr
from tasks.train import train_dapo_task


@flow(name="dapo_iteration", log_prints=True, **HOOKS)
def dapo_iteration(tasks: Path, policy_path: str, policy_version: str, iteration: int, out: Path, repos: Path | None = None,
                   dapo: DAPOParams = DAPOParams(), sampler: SamplerParams = SamplerParams(), seed: int = 0,
                   tracking: TrackingParams = TrackingParams(), parent_run_id: str | None = None, step: int | None = None,
                   container_label: str | None = None) -> StageResult:
    """Iteration ``iteration``: rollouts of the policy, then one DAPO update -> a registered `candidate`."""
    check_turn_window(sampler.agent.max_turns, dapo.reward)  # before any rollout
    step = iteration + 1 if step is None else step
    name = f"iter-{iteration}"
    run_id = tr.stage_run(tracking, parent_run_id, name, params={"iteration": iteration, "samples": dapo.samples,
                                                                "eps_low": dapo.loss.eps_low, "eps_high": dapo.loss.eps_high,
                                                                "lr": dapo.train.optimizer.lr, "advantage": dapo.advantage,
                                                                "start_policy": policy_version})
    # each iteration samples afresh, also when the previous one left the policy unchanged
    it_seed = seed + 1000 * iteration
    stage = rollout_stage(tasks=tasks, repos=repos, model=policy_path, out=out / "rollout", samples=dapo.samples, seed=it_seed,
                          policy_version=policy_version, sampler=sampler, container_label=container_label)
    rolled = run_chunks(stage, sampler.chunk_size, sampler.chunk_timeout_s, dask_address=sampler.dask_address)
    trajectories = stored_trajectories(Path(rolled["store"]))
    metrics = prefixed("rollout", rollout_metrics(trajectories, dapo.reward, wall_s=rolled["wall_s"]))
    metrics.update(prefixed("grading", grading_metrics(trajectories)))
    data = f"{name}-trajectories"
    trained_on = tr.log_training_inputs(tracking, run_id, tasks, Path(rolled["store"]), data, len(trajectories), policy_path,
                                        parent_run_id)
    t = dapo.train
    train_stage = DAPOStage(trajectories=[Path(rolled["store"])], model=policy_path, out=out / "train", seed=it_seed,
                            train=t.settings(), policy_version=policy_version, iteration=iteration,
                            **dict(part(dapo, DAPOObjective)))
    outcome = train_dapo_task.with_options(timeout_seconds=t.timeout_s)(train_stage)
    new_version = f"dapo-{iteration}"
    if outcome["trained"]:
        metrics.update(prefixed("train", train_metrics(outcome["step_metrics"])))
        metrics.update(prefixed("data", outcome["data"]))
        registered = tr.register_trained_checkpoint(tracking, run_id, Path(outcome["final"]), name=name,
                                                    policy_version=new_version, step=step,
                                                    metrics={k: v for k, v in metrics.items() if k.startswith("train/")},
                                                    trained_on=trained_on, metrics_dataset=data)
        policy = PolicyRef.of(outcome["final"], new_version, registered)
    else:
        print(f"iteration {iteration} trained nothing, the policy carries forward: {outcome['reason']}")
        policy = PolicyRef.of(policy_path, policy_version)
    metrics["train/trained"] = 1.0 if outcome["trained"] else 0.0
    tr.log_metrics(tracking, run_id, metrics, step=step)
    tr.finish_run(tracking, run_id, summary={"policy": policy.model_dump(), "reason": outcome["reason"]})
    return StageResult(policy=policy, metrics=metrics, run_id=run_id, trained=outcome["trained"], reason=outcome["reason"])
