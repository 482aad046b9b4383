"""MLflow bookkeeping as Prefect tasks: runs tied to flow runs, metrics, lineage, registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.orchestration import recording
from swerl.orchestration.results import Lineage, ResolvedPolicy, TrackedRun
from swerl.tracking.config import TrackingConfig
from tasks.common import retry_on_tracking_failure, tracker

_RETRY = dict(retries=3, retry_delay_seconds=5, retry_condition_fn=retry_on_tracking_failure, cache_policy=NO_CACHE)


def prefect_tags() -> dict[str, str]:
    """Tags tying an MLflow run to the Prefect flow run that wrote it (empty outside a flow run)."""
    from prefect.runtime import deployment, flow_run

    tags = {"prefect.flow_run_id": flow_run.id, "prefect.flow_run_name": flow_run.name, "prefect.flow_name": flow_run.flow_name,
            "prefect.flow_run_url": flow_run.ui_url, "prefect.deployment_id": deployment.id,
            "prefect.root_flow_run_id": flow_run.root_flow_run_id}
    return {k: str(v) for k, v in tags.items() if v}


@task(name="mlflow-pipeline-run", **_RETRY)
def pipeline_run(tracking: TrackingConfig, pipeline_id: str, params: dict[str, Any]) -> TrackedRun:
    """Get or create the pipeline's parent run (one per pipeline id, whatever the reruns)."""
    t = tracker(tracking)
    run_id = t.pipeline_run(pipeline_id, name=f"pipeline {pipeline_id}", params=params, tags=prefect_tags())
    return TrackedRun(run_id=run_id, url=t.run_url(run_id), experiment_id=t.experiment_id)


@task(name="mlflow-stage-run", **_RETRY)
def stage_run(tracking: TrackingConfig, parent_run_id: str | None, stage: str, params: dict[str, Any] | None = None,
              standalone_id: str | None = None) -> str:
    """Get or create the stage's child run; without a parent, a top-level run keyed by
    ``standalone_id`` (one per standalone flow run's output, e.g. each nightly evaluation), whose
    ``swerl.kind`` says what it is (``evaluation``; ``standalone`` for another stage run alone)."""
    t = tracker(tracking)
    kind = stage.split("-", 1)[0]
    tags = {**prefect_tags(), "swerl.stage_kind": kind}
    if parent_run_id:
        return t.stage_run(parent_run_id, stage, params=params, tags=tags)
    return t.pipeline_run(standalone_id or stage, name=standalone_id or stage, params=params, tags=tags,
                          kind="evaluation" if kind == "evaluate" else "standalone")


@task(name="mlflow-log-metrics", **_RETRY)
def log_metrics(tracking: TrackingConfig, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
    tracker(tracking).log_metrics(run_id, metrics, step=step)


@task(name="mlflow-log-lineage", **_RETRY)
def log_lineage(tracking: TrackingConfig, run_id: str, *, tasks: Path | None = None, tasks_name: str = "tasks",
                tasks_context: str = "training", manifest: Path | None = None, trajectories: Path | None = None,
                trajectories_name: str = "trajectories", trajectories_context: str = "training", count: int = 0) -> Lineage:
    """Dataset inputs: the task set's digest, the image manifest, a rollout's trajectories."""
    t = tracker(tracking)
    out = Lineage()
    if tasks is not None:
        out.tasks = recording.log_task_set(t, run_id, tasks, name=tasks_name, context=tasks_context)
    if manifest is not None and Path(manifest).is_file():
        out.images = recording.log_manifest(t, run_id, manifest)
    if trajectories is not None and Path(trajectories).is_dir():
        out.trajectories = recording.log_trajectories(t, run_id, trajectories, name=trajectories_name,
                                                    context=trajectories_context, count=count)
    return out


@task(name="register-checkpoint", **_RETRY)
def register_checkpoint(tracking: TrackingConfig, run_id: str, checkpoint: Path, name: str, policy_version: str,
                        step: int, metrics: dict[str, float] | None = None) -> dict[str, str]:
    """Log the checkpoint as an MLflow logged model, register it, move ``candidate`` to it."""
    return recording.log_checkpoint(tracker(tracking), run_id, checkpoint, name=name, policy_version=policy_version,
                                    step=step, metrics=metrics)


@task(name="mlflow-log-training-inputs", **_RETRY)
def log_training_inputs(tracking: TrackingConfig, run_id: str, tasks: Path, trajectories: Path, trajectories_name: str,
                        count: int, start_model: str, parent_run_id: str | None) -> dict[str, str]:
    """Task set, images, trajectories (dataset inputs) and start policy (model input) of a training run."""
    return recording.log_training_inputs(tracker(tracking), run_id, tasks=tasks, trajectories=trajectories,
                                         trajectories_name=trajectories_name, count=count, start_model=start_model,
                                         parent_run_id=parent_run_id)


@task(name="register-trained-checkpoint", **_RETRY)
def register_trained_checkpoint(tracking: TrackingConfig, run_id: str, checkpoint: Path, name: str, policy_version: str,
                                step: int, metrics: dict[str, float], trained_on: dict[str, str],
                                metrics_dataset: str) -> dict[str, str]:
    """The checkpoint as the run's logged model (trained-on digests, metrics on the trajectories), registered."""
    return recording.log_checkpoint(tracker(tracking), run_id, checkpoint, name=name, policy_version=policy_version,
                                    step=step, metrics=metrics, trained_on=trained_on, metrics_dataset=metrics_dataset)


@task(name="resolve-policy", **_RETRY)
def resolve_policy(tracking: TrackingConfig, model: str) -> ResolvedPolicy:
    path, version, registered, step = recording.resolve_policy(tracker(tracking), model)
    return ResolvedPolicy(path=path, policy_version=version, registered_version=registered, step=step)


@task(name="mlflow-link-policy", **_RETRY)
def link_policy(tracking: TrackingConfig, run_id: str, path: str, registered_version: str | None) -> str:
    """The evaluated policy as the run's model input (a folder or hub name gets a logged model)."""
    return recording.link_policy(tracker(tracking), run_id, path, registered_version)


@task(name="mlflow-log-evaluation", **_RETRY)
def log_evaluation(tracking: TrackingConfig, run_id: str, model_id: str, metrics: dict[str, float], step: int | None,
                   dataset: tuple[str, str], registered_version: str | None, pass_at_1: float) -> None:
    """The scores on the run and on the evaluated model (linked to the task set), Pass@1 on its version."""
    recording.log_evaluation(tracker(tracking), run_id, model_id, metrics, step=step, dataset=dataset,
                             registered_version=registered_version, pass_at_1=pass_at_1)


@task(name="mlflow-champion", **_RETRY)
def champion_state(tracking: TrackingConfig) -> tuple[str | None, float | None]:
    return recording.champion_state(tracker(tracking))


@task(name="promote-champion", **_RETRY)
def promote(tracking: TrackingConfig, version: str, pass_at_1: float, force: bool = False) -> bool:
    return recording.promote_if_better(tracker(tracking), version, pass_at_1, force=force)


@task(name="mlflow-finish-run", **_RETRY)
def finish_run(tracking: TrackingConfig, run_id: str, status: str = "FINISHED", summary: dict[str, Any] | None = None) -> None:
    t = tracker(tracking)
    if summary is not None:
        t.log_dict(run_id, summary, "summary.json")
    t.finish(run_id, status)
