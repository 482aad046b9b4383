"""The pipeline's policy stages as data: one typed list, in order, that the pipeline flow walks.

`stage_plan(params)` says which stages a pipeline runs (warm-start?, start-policy, eval-start,
rft, eval-rft, iter-k, eval-iter-k, ...), each with what it needs: a training stage its
objective, flow name, MLflow step and task set; an evaluation the table row it closes. The
flow runs each stage the ledger has not recorded, with one loop.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from swerl.orchestration.objectives import DAPOIteration, Objective, RFTIteration
from swerl.orchestration.params import PipelineParams, RFTParams


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The ledger's key, the subflow run's and the MLflow child run's name.")


class StartStep(_Step):
    """Register the starting policy (a model folder) so its evaluation links to a registry version."""

    kind: Literal["start"] = "start"


class TrainStep(_Step):
    """A training stage: rollouts of the current policy, the objective's update."""

    kind: Literal["train"] = "train"
    objective: Objective = Field(description="RFT (also the warm start) or one DAPO iteration.")
    flow: Literal["rft", "dapo_iteration"] = Field(description="The Prefect flow name its subflow run has.")
    step: int = Field(ge=0, description="MLflow step of its metrics: 0 the warm start, 1 RFT, 1 + k DAPO iteration k.")
    task_set: Literal["train", "warm"] = Field("train", description="Which task file it samples.")
    engine: str = Field(description="The engine its rollouts sample with (for the summary's words).")
    on_parent: bool = Field(True, description="Also log its metrics on the pipeline's run (not the warm start's: "
                            "the curve starts after it).")
    must_train: bool = Field(False, description="Fail the pipeline when it trains nothing (the warm start).")


class EvalStep(_Step):
    """An evaluation of the current policy; it closes one row of the per-stage table."""

    kind: Literal["eval"] = "eval"
    step: int = Field(ge=0, description="MLflow step of its metrics (that of the stage it evaluates).")
    row: str = Field(description="The table row it closes: start, rft, iter-k.")
    after: str | None = Field(None, description="The training stage whose figures join the row (None: the start).")


PlanStep = Union[StartStep, TrainStep, EvalStep]


def stage_plan(params: PipelineParams) -> list[PlanStep]:
    """The policy stages of ``params``' pipeline, in the order they run."""
    plan: list[PlanStep] = []
    if params.warm_start is not None:
        warm = params.warm_start
        # a noisy demonstrator's unfixed runs are the point of it: imitate them too
        objective = RFTIteration(stage="warm-start", rft=RFTParams(attempts=warm.samples, sampler=warm.sampler, train=warm.train,
                                                                   require_resolved=warm.sampler.give_up == 0,
                                                                   require_graded=warm.grade),
                                 grade=warm.grade)
        plan.append(TrainStep(name="warm-start", objective=objective, flow="rft", step=0, task_set="warm",
                              engine=warm.sampler.engine.kind, on_parent=False, must_train=True))
    if params.eval.evaluate_start:
        if params.warm_start is None:
            plan.append(StartStep(name="start-policy"))
        plan.append(EvalStep(name="eval-start", step=0, row="start"))
    if params.rft.enabled:
        objective = RFTIteration(rft=params.rft)
        plan += [TrainStep(name="rft", objective=objective, flow="rft", step=1, engine=objective.sampler_of(params.sampler).engine.kind),
                 EvalStep(name="eval-rft", step=1, row="rft", after="rft")]
    last = params.dapo.iterations
    for k in range(1, last + 1):
        plan.append(TrainStep(name=f"iter-{k}", objective=DAPOIteration(dapo=params.dapo, iteration=k), flow="dapo_iteration",
                              step=1 + k, engine=params.sampler.engine.kind))
        if params.eval.every_iteration or k == last:
            plan.append(EvalStep(name=f"eval-iter-{k}", step=1 + k, row=f"iter-{k}", after=f"iter-{k}"))
    return plan
