"""Roll out a chunk of a task set, and evaluate a policy; both resume what their folder holds."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.orchestration.fanout import where_am_i
from swerl.orchestration.results import ChunkResult, EvalRun
from swerl.stages.rollout import RolloutResult, RolloutStage, run_eval, run_rollout
from tasks.common import TAG_GPU, TAG_SANDBOX, retry_on_infrastructure


def _logger_callbacks(label: str):
    from prefect.logging import get_run_logger

    log = get_run_logger()
    counter = {"done": 0, "total": 0}

    def start(n: int) -> None:
        counter["total"] = n
        log.info("%s: %d trajectories to produce", label, n)

    def done(t) -> None:
        counter["done"] += 1
        mark = {True: "resolved", False: "unresolved", None: "ungraded"}[t.resolved]
        log.info("%s %d/%d: %s %s %s", label, counter["done"], counter["total"], t.trajectory_id, t.exit_reason.value, mark)

    return start, done


@task(name="rollout-chunk", tags=[TAG_SANDBOX, TAG_GPU], retries=2, retry_delay_seconds=15,
      retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def rollout_chunk(stage: RolloutStage, chunk: int = 0) -> ChunkResult:
    """Every (task, sample) of ``stage`` not yet stored in ``stage.out``; a retry resumes the chunk."""
    start, done = _logger_callbacks(f"chunk {chunk}")
    result: RolloutResult = run_rollout(stage, on_done=done, on_start=start)
    return ChunkResult(**dict(result), ran_on=where_am_i())


@task(name="evaluate-policy", tags=[TAG_SANDBOX, TAG_GPU], retries=2, retry_delay_seconds=15,
      retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def evaluate_task(stage: RolloutStage) -> EvalRun:
    """``stage.samples`` graded runs per task, then Pass@1 (mean ± SEM over runs) and Pass@k."""
    start, done = _logger_callbacks("eval")
    report, result = run_eval(stage, on_done=done, on_start=start)
    return EvalRun(report=report, store=result.store, wall_s=result.summary.wall_s, eval_json=Path(stage.out) / "eval.json")
