"""What a pipeline records in MLflow, over a ``Tracker``: runs, metrics, lineage, checkpoints,
the registry's ``candidate`` and ``champion`` aliases. No Prefect here; callers pass its ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swerl.tracking.lineage import file_digest, tree_digest

PASS_AT_1_TAG = "swerl.pass_at_1"
POLICY_VERSION_TAG = "swerl.policy_version"


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


def log_checkpoint(tracker: Any, run_id: str, checkpoint: Path, *, name: str, policy_version: str, step: int,
                   metrics: Mapping[str, float] | None = None) -> dict[str, str]:
    """Log the checkpoint as an MLflow logged model, register it, and point ``candidate`` at it."""
    model_id = tracker.log_checkpoint(run_id, Path(checkpoint), name=name, step=step, metrics=metrics,
                                      tags={POLICY_VERSION_TAG: policy_version})
    version = tracker.register(model_id, aliases=("candidate",), tags={POLICY_VERSION_TAG: policy_version})
    return {"model_id": model_id, "version": version}


def resolve_policy(tracker: Any, model: str) -> tuple[str, str, str | None]:
    """``model`` as (checkpoint path or name, policy version, registered version).

    ``champion``/``candidate``/``alias:NAME`` and ``version:N`` name the registry; anything
    else is a folder or hub name used as is.
    """
    ref = model
    if model in ("champion", "candidate"):
        ref = f"alias:{model}"
    if ref.startswith("alias:") or ref.startswith("version:"):
        key = ref.split(":", 1)[1]
        version = tracker.alias_version(key) if ref.startswith("alias:") else key
        path = tracker.checkpoint_for(key)
        mv = tracker.client.get_model_version(tracker.config.registered_model, version)
        return str(path), mv.tags.get(POLICY_VERSION_TAG, f"v{version}"), version
    return model, "0", None


def promote_if_better(tracker: Any, version: str, pass_at_1: float) -> bool:
    """Record Pass@1 on the registered version; move ``champion`` here when it matches or beats
    the champion's (or there is none). Returns whether it moved."""
    name = tracker.config.registered_model
    tracker.client.set_model_version_tag(name, version, PASS_AT_1_TAG, f"{pass_at_1:.6f}")
    current = tracker.alias_version("champion")
    if current is not None and current != version:
        best = tracker.client.get_model_version(name, current).tags.get(PASS_AT_1_TAG)
        if best is not None and float(best) > pass_at_1:
            return False
    tracker.set_alias("champion", version)
    return True


def metric_table(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Rows for a Prefect table artifact: one per stage, the chosen keys, numbers rounded."""
    table = []
    for row in rows:
        table.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k in keys})
    return table
