"""Train RFT, train one DAPO update; each reads its rollout once and resumes from its newest checkpoint."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.orchestration.results import RFTSelection, RolloutFigures, TrainingRun
from swerl.stages.errors import NothingToTrainError, StageInputError
from swerl.stages.train import DAPOStage, RFTStage, train_dapo, train_rft
from swerl.train.run import read_metrics
from tasks.common import TAG_GPU, retry_on_infrastructure


def _callbacks():
    from prefect.logging import get_run_logger

    log = get_run_logger()

    def on_start(done: int, total: int) -> None:
        log.info("training: %d of %d step(s) already done", done, total)

    def on_step(m: dict[str, Any]) -> None:
        kl = f" approx_kl {m['approx_kl']:.3g}" if "approx_kl" in m else ""
        log.info("step %d loss %.4g grad_norm %.3g%s tokens/s %.0f", m["step"], m["loss"], m["grad_norm"], kl,
                 m.get("tokens_per_s", 0.0))

    return dict(on_start=on_start, on_step=on_step, on_data=log.info)


def _read_once(stage: RFTStage | DAPOStage) -> list:
    """The stage's trajectories, read once for its figures, its selection and its update."""
    from swerl.train.data import DataError, read_trajectories

    try:
        return read_trajectories(stage.trajectories)
    except DataError as e:
        raise StageInputError(str(e)) from e


def _rollout_figures(found: list, reward, wall_s: float | None) -> RolloutFigures:
    """What the flow logs about the rollout: the count, rollout/ and grading/ metrics, the policy's behaviour."""
    from swerl.orchestration.metrics import grading_metrics, prefixed, rollout_metrics
    from swerl.orchestration.summary import behaviour_of

    metrics = prefixed("rollout", rollout_metrics(found, reward, wall_s=wall_s))
    metrics.update(prefixed("grading", grading_metrics(found)))
    return RolloutFigures(trajectories=len(found), metrics=metrics, behaviour=behaviour_of(found),
                          sampled_by=dict(sorted(Counter(t.policy_version for t in found).items())))


def _outcome(fn, stage, found: list, **figures: Any) -> TrainingRun:
    try:
        result = fn(stage, **_callbacks(), found=found)
    except NothingToTrainError as e:
        # no learning signal is an outcome, not a failure: the policy carries forward
        return TrainingRun(trained=False, reason=str(e), **figures)
    if "stopped_kl" in result.data:
        from prefect.logging import get_run_logger

        get_run_logger().info("the update ended at step %d: its last epoch's mean approx_kl %.3g passed train.target_kl %g", result.steps,
                              result.data["stopped_kl"], stage.train.target_kl)
    return TrainingRun(trained=True, final=result.final, steps=result.steps, new_steps=result.new_steps, rows=result.rows,
                       data=result.data, step_metrics=read_metrics(stage.out), **figures)


def rft_selection(found: list, stage: RFTStage) -> RFTSelection:
    """Which trajectories RFT keeps, and why the others are left out."""
    from swerl.rl.rft import select_rft

    kept, skipped = select_rft(found, stage.selection())
    return RFTSelection(trajectories=len(found), kept=len(kept), skipped=skipped, tasks_kept=len({e.instance_id for e in kept}))


@task(name="train-rft", tags=[TAG_GPU], retries=1, retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def train_rft_task(stage: RFTStage, wall_s: float | None = None) -> TrainingRun:
    """Rejection fine-tuning into ``stage.out`` (a retry or rerun resumes from the newest step). The rollout is
    read once, here: the result carries its figures (``rollout``; ``wall_s``: the rollout's wall time, for
    tokens/s) and the selection (``selection``) beside the training outcome."""
    found = _read_once(stage)
    return _outcome(train_rft, stage, found, rollout=_rollout_figures(found, None, wall_s),
                    selection=rft_selection(found, stage))


@task(name="train-dapo", tags=[TAG_GPU], retries=1, retry_condition_fn=retry_on_infrastructure, cache_policy=NO_CACHE)
def train_dapo_task(stage: DAPOStage, wall_s: float | None = None) -> TrainingRun:
    """One DAPO update into ``stage.out`` (a retry or rerun resumes from the newest step); the rollout is read
    once, here, and its figures (``rollout``) scored with the stage's rewards come back with the outcome."""
    found = _read_once(stage)
    figures = _rollout_figures(found, stage.reward, wall_s)
    bound = stage.off_policy.max_staleness
    if "rollout/staleness_mean" in figures.metrics:  # the update leaves out what its bound does not allow
        figures.metrics["rollout/stale_dropped"] = float(sum(1 for t in found if (t.staleness or 0) > bound))
    return _outcome(train_dapo, stage, found, rollout=figures)
