"""Flow: one DAPO iteration. G samples per task from the current policy, rewards, group
advantages, zero-advantage groups dropped, one clipped policy-gradient update
(``train_iteration`` with the DAPO objective, under its own flow name)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from flows.train_iteration import train_iteration
from swerl.orchestration.objectives import DAPOIteration
from swerl.orchestration.params import DAPOParams, SamplerParams
from swerl.tracking.config import TrackingConfig
from swerl.orchestration.results import StageResult


@flow(name="dapo_iteration", log_prints=True, **HOOKS)
def dapo_iteration(tasks: Path, policy_path: str, policy_version: str, iteration: int, out: Path, repos: Path | None = None,
                   dapo: DAPOParams = DAPOParams(), sampler: SamplerParams = SamplerParams(), seed: int = 0,
                   tracking: TrackingConfig = TrackingConfig(), parent_run_id: str | None = None, step: int | None = None,
                   container_label: str | None = None) -> StageResult:
    """Iteration ``iteration``: rollouts of the policy, then one DAPO update -> a registered `candidate`."""
    return train_iteration.fn(DAPOIteration(dapo=dapo, iteration=iteration), tasks=tasks, model=policy_path, out=out,
                              repos=repos, policy_version=policy_version, sampler=sampler, seed=seed, tracking=tracking,
                              parent_run_id=parent_run_id, step=iteration + 1 if step is None else step,
                              container_label=container_label)
