"""Select RFT data, train RFT, train one DAPO update; each resumes from its newest checkpoint."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.stages.errors import NothingToTrainError
from swerl.stages.train import DAPOStage, RFTStage, train_dapo, train_rft
from swerl.train.run import read_metrics
from tasks.common import TAG_GPU, retry_on_infrastructure


def _callbacks():
    from prefect.logging import get_run_logger

    log = get_run_logger()

    def on_start(done: int, total: int) -> None:
        log.info("training: %d of %d step(s) already done", done, total)

    def on_step(m: dict[str, Any]) -> None:
        log.info("step %d loss %.4g grad_norm %.3g tokens/s %.0f", m["step"], m["loss"], m["grad_norm"], m.get("tokens_per_s", 0.0))

    return dict(on_start=on_start, on_step=on_step, on_data=log.info)


def _outcome(fn, stage) -> dict[str, Any]:
    try:
        result = fn(stage, **_callbacks())
    except NothingToTrainError as e:
        # no learning signal is an outcome, not a failure: the policy carries forward
        return {"trained": False, "reason": str(e), "final": None, "steps": 0, "data": {}, "step_metrics": []}
    return {"trained": True, "reason": None, "final": str(result.final) if result.final else None, "steps": result.steps,
            "new_steps": result.new_steps, "rows": result.rows, "data": result.data,
            # every step of the run, including those a crashed attempt took before this one resumed
            "step_metrics": read_metrics(stage.out)}


@task(name="select-rft-data", cache_policy=NO_CACHE)
def select_rft_data(stage: RFTStage) -> dict[str, Any]:
    """Which trajectories RFT keeps, and why the others are left out (recorded before training)."""
    from swerl.rl.rft import select_rft
    from swerl.train.data import read_trajectories

    found = read_trajectories(stage.trajectories)
    kept, skipped = select_rft(found, stage.selection())
    return {"trajectories": len(found), "kept": len(kept), "skipped": skipped, "tasks_kept": len({e.instance_id for e in kept})}


@task(name="train-rft", tags=[TAG_GPU], retries=1, retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def train_rft_task(stage: RFTStage) -> dict[str, Any]:
    """Rejection fine-tuning into ``stage.out`` (a retry or rerun resumes from the newest step)."""
    return _outcome(train_rft, stage)


@task(name="train-dapo", tags=[TAG_GPU], retries=1, retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def train_dapo_task(stage: DAPOStage) -> dict[str, Any]:
    """One DAPO update into ``stage.out`` (a retry or rerun resumes from the newest step)."""
    return _outcome(train_dapo, stage)
