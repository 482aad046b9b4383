"""What a pipeline records in MLflow, over a ``Tracker``: runs, metrics, lineage, checkpoints,
the registry's ``candidate`` and ``champion`` aliases. No Prefect here; callers pass its ids.

Lineage is kept in MLflow's own links so the UI can follow it both ways: a training run has
the task set, the images and its trajectories as dataset inputs and its starting policy as
a model input; its checkpoint is its logged model output, carrying the digests it was
trained on; an evaluation run has the evaluated policy as a model input and logs its scores
on that model, linked to the evaluation task set, and on its registered version.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swerl.tracking.keys import TAG_STEP
from swerl.tracking.lineage import file_digest, tree_digest

PASS_AT_1_TAG = "swerl.pass_at_1"
POLICY_VERSION_TAG = "swerl.policy_version"
EVAL_RUN_TAG = "swerl.eval_run_id"
# what a stage shares from its pipeline's run: the images it runs in
SHARED_CONTEXTS = ("environment",)


def log_task_set(tracker: Any, run_id: str, tasks_file: Path, *, name: str, context: str) -> str:
    """The task set as an MLflow dataset input (digest of its canonical records)."""
    from swerl.stages.images import load_task_file
    from swerl.tracking.lineage import tasks_digest

    tasks = load_task_file(tasks_file)
    digest = tasks_digest(tasks)
    tracker.log_dataset(run_id, name=name, source=str(Path(tasks_file).resolve()), digest=digest, context=context,
                        profile={"tasks": len(tasks)})
    return digest


def log_manifest(tracker: Any, run_id: str, manifest: Path) -> str:
    """The image manifest (task -> image tag) as a dataset input, and as an artifact."""
    digest = file_digest(manifest)
    tracker.log_dataset(run_id, name="images", source=str(Path(manifest).resolve()), digest=digest, context="environment")
    tracker.log_artifact(run_id, Path(manifest), "lineage")
    return digest


def log_trajectories(tracker: Any, run_id: str, store: Path, *, name: str, context: str, count: int) -> str:
    """A rollout's Parquet parts as a dataset input (digest over the part files)."""
    digest = tree_digest(store, "*.parquet")
    tracker.log_dataset(run_id, name=name, source=str(Path(store).resolve()), digest=digest, context=context,
                        profile={"trajectories": count})
    return digest


def log_training_inputs(tracker: Any, run_id: str, *, tasks: Path, trajectories: Path, trajectories_name: str,
                        count: int, start_model: str, parent_run_id: str | None = None) -> dict[str, str]:
    """What a training run learns from, as its inputs: the task set, the images (shared from the
    pipeline's run when there is one), the trajectories it sampled and trains on, and the policy
    it started from (a model input). Returns dataset name -> digest, for ``log_checkpoint``."""
    digests = {"tasks": log_task_set(tracker, run_id, tasks, name="tasks", context="training")}
    if parent_run_id:
        digests.update(tracker.share_datasets(run_id, parent_run_id, contexts=SHARED_CONTEXTS))
    digests[trajectories_name] = log_trajectories(tracker, run_id, trajectories, name=trajectories_name,
                                                  context="training", count=count)
    tracker.log_model_input(run_id, tracker.reference_model(start_model))
    return digests


def log_checkpoint(tracker: Any, run_id: str, checkpoint: Path, *, name: str, policy_version: str, step: int,
                   metrics: Mapping[str, float] | None = None, trained_on: Mapping[str, str] | None = None,
                   metrics_dataset: str | None = None) -> dict[str, str]:
    """Log the checkpoint as an MLflow logged model, register it, and point ``candidate`` at it.

    ``trained_on`` (dataset name -> digest, the run's dataset inputs) becomes the model's
    ``trained_on.<name>`` params; ``metrics`` are linked to dataset ``metrics_dataset``, one of
    them (the trajectories the loss was measured on), so the model's page lists it."""
    trained_on = dict(trained_on or {})
    dataset = (metrics_dataset, trained_on[metrics_dataset]) if metrics_dataset else None
    model_id = tracker.log_checkpoint(run_id, Path(checkpoint), name=name, step=step, metrics=metrics,
                                      tags={POLICY_VERSION_TAG: policy_version}, dataset=dataset,
                                      params={f"trained_on.{key}": digest for key, digest in trained_on.items()})
    version = tracker.register(model_id, aliases=("candidate",), tags={POLICY_VERSION_TAG: policy_version})
    return {"model_id": model_id, "version": version}


def resolve_policy(tracker: Any, model: str) -> tuple[str, str, str | None, int | None]:
    """``model`` as (checkpoint path or name, policy version, registered version, the pipeline step its
    checkpoint was made at: a registered version's ``swerl.step``, where a later evaluation of it belongs
    on the curve).

    ``champion``/``candidate``/``alias:NAME`` and ``version:N`` name the registry; anything
    else is a folder or hub name used as is (no version, no step).
    """
    ref = model
    if model in ("champion", "candidate"):
        ref = f"alias:{model}"
    if ref.startswith("alias:") or ref.startswith("version:"):
        key = ref.split(":", 1)[1]
        version = tracker.alias_version(key) if ref.startswith("alias:") else key
        path = tracker.checkpoint_for(key)
        mv = tracker.client.get_model_version(tracker.config.registered_model, version)
        step = mv.tags.get(TAG_STEP)
        return str(path), mv.tags.get(POLICY_VERSION_TAG, f"v{version}"), version, int(step) if step else None
    return model, "0", None, None


def policy_model(tracker: Any, path: str, registered_version: str | None) -> str:
    """The logged model of a policy: its registered version's, else the one standing for the
    folder or name (``Tracker.reference_model``: found by digest or name, created when missing)."""
    if registered_version and (model_id := tracker.model_of_version(registered_version)):
        return model_id
    return tracker.reference_model(path)


def link_policy(tracker: Any, run_id: str, path: str, registered_version: str | None) -> str:
    """Record the policy a run evaluates as the run's model input; returns its model id."""
    model_id = policy_model(tracker, path, registered_version)
    tracker.log_model_input(run_id, model_id)
    return model_id


def log_evaluation(tracker: Any, run_id: str, model_id: str, metrics: Mapping[str, float], *, step: int | None,
                   dataset: tuple[str, str], registered_version: str | None, pass_at_1: float) -> None:
    """An evaluation's metrics on its run and on the evaluated logged model, linked to
    ``dataset`` (name, digest of the evaluation task set, a dataset input of the run); Pass@1
    and the run on the registered version, when the policy is one (the latest evaluation wins)."""
    tracker.log_model_metrics(run_id, model_id, metrics, step=step, dataset=dataset)
    if registered_version:
        tracker.set_version_tags(registered_version, {PASS_AT_1_TAG: f"{pass_at_1:.6f}", EVAL_RUN_TAG: run_id})


def champion_state(tracker: Any) -> tuple[str | None, float | None]:
    """The registered version ``champion`` names and the Pass@1 recorded on it (None where there is none)."""
    version = tracker.alias_version("champion")
    if version is None:
        return None, None
    best = tracker.client.get_model_version(tracker.config.registered_model, version).tags.get(PASS_AT_1_TAG)
    return version, float(best) if best is not None else None


def promote_if_better(tracker: Any, version: str, pass_at_1: float, force: bool = False) -> bool:
    """Record Pass@1 on the registered version; move ``champion`` here when it strictly beats the
    champion's (or there is none), or when ``force`` (a deliberate roll-back). A tie keeps the
    champion: a version that is no better is not worth a move. Returns whether it moved."""
    tracker.client.set_model_version_tag(tracker.config.registered_model, version, PASS_AT_1_TAG, f"{pass_at_1:.6f}")
    current, best = champion_state(tracker)
    # compared at the tag's precision, so a rounding difference is no improvement
    if current is not None and current != version and not force and best is not None and round(pass_at_1, 6) <= best:
        return False
    tracker.set_alias("champion", version)
    return True
