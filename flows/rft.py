"""Flow: rejection fine-tuning. Sample with the starting policy, keep resolved runs, fine-tune
(``train_iteration`` with the RFT objective, under its own flow name)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from flows.train_iteration import train_iteration
from swerl.orchestration.objectives import RFTIteration
from swerl.orchestration.params import RFTParams, SamplerParams
from swerl.tracking.config import TrackingConfig
from swerl.orchestration.results import StageResult


@flow(name="rft", log_prints=True, **HOOKS)
def rft(tasks: Path, model: str, out: Path, repos: Path | None = None, policy_version: str = "0",
        rft: RFTParams = RFTParams(), sampler: SamplerParams = SamplerParams(), seed: int = 0,
        tracking: TrackingConfig = TrackingConfig(), parent_run_id: str | None = None, step: int = 1,
        container_label: str | None = None, stage: str = "rft") -> StageResult:
    """Rollouts of ``model`` on ``tasks`` -> resolved runs -> SFT on their replies -> a registered `candidate`.

    ``stage`` names the MLflow run and the new policy version: ``rft``, or ``warm-start``
    for supervised warm-up on demonstrations before the measured curve begins.
    """
    return train_iteration.fn(RFTIteration(rft=rft, stage=stage), tasks=tasks, model=model, out=out, repos=repos,
                              policy_version=policy_version, sampler=sampler, seed=seed, tracking=tracking,
                              parent_run_id=parent_run_id, step=step, container_label=container_label)
