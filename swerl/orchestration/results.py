"""What one pipeline stage hands the next: typed results instead of dicts.

The Prefect tasks hand their flows these models too (``TrackedRun``, ``ChunkResult``,
``TrainingRun``, ...): a flow reads attributes, never a dict's string keys.

The training flows return a ``StageResult``, evaluations an ``EvalResult``; both carry the
``PolicyRef`` of the policy the stage produced (or carried forward). The ledger stores them
as JSON and reads them back as these models, so a resumed pipeline gets the same objects.
Their JSON keys are those of the dicts the flows returned before these models, so a ledger
written then reads as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swerl.eval.report import EvalReport
from swerl.orchestration.summary import Behaviour
from swerl.stages.images import ImagesReady
from swerl.stages.rollout import RolloutResult


class PolicyRef(BaseModel):
    """One policy: where its weights are, the version its trajectories record, and its registry entry."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="Model folder or hub name the engines load.")
    policy_version: str = Field(description="The version recorded on every trajectory it samples ('0', 'rft', 'dapo-2').")
    model_id: str | None = Field(None, description="MLflow logged model of the checkpoint (None: not logged).")
    registered_version: str | None = Field(None, description="Version in the model registry (None: not registered).")

    @classmethod
    def of(cls, path: str, version: str, registered: Mapping[str, str] | None = None) -> PolicyRef:
        """The policy at ``path``; ``registered`` is what registering it returned ({"model_id", "version"})."""
        registered = registered or {}
        return cls(path=str(path), policy_version=version, model_id=registered.get("model_id"),
                   registered_version=registered.get("version"))

    def check_registered(self, registered_path: str, store: str | None) -> None:
        """Refuse a registry whose version of this policy names another checkpoint (RuntimeError naming both).

        A resumed run reads its policies from the ledger, and evaluates them by registry version:
        against another MLflow store (another ``tracking_uri``, a reset database) that number names
        whatever that store registered first, and the run would score the wrong weights without a word;
        after the run folder moved, it names the folder where the weights were.
        """
        if os.path.realpath(registered_path) != os.path.realpath(self.path):
            raise RuntimeError(
                f"policy {self.policy_version!r} of this run is {self.path}, registered as version {self.registered_version}; "
                f"version {self.registered_version} in the tracking store {store or '(default)'} is {registered_path}: "
                "the run folder moved, or the run was started against another MLflow store. Point tracking.tracking_uri (or "
                "MLFLOW_TRACKING_URI) back at that store and the folder back where it was, or start the run again in a new run folder")

    def model_arg(self) -> str:
        """What an evaluation is told to load: the registry version when there is one (lineage), else the path."""
        return f"version:{self.registered_version}" if self.registered_version else self.path


class SampledIteration(BaseModel):
    """A training iteration's rollouts, made: its MLflow run and where the trajectories are (an asynchronous pipeline
    samples iteration k+1 while iteration k trains, and records this when the rollouts end)."""

    run_id: str | None = Field(None, description="The iteration's MLflow run, opened when its sampling started.")
    rolled: ChunkedRollout
    policy_version: str = Field(description="The policy its rollouts started with (newer ones may have been loaded "
                                "while they ran: each turn records its own).")
    trains_from: str | None = Field(None, description="The version its update was planned to start from (the "
                                    "trajectories' staleness counts from it).")
    seconds: float | None = Field(None, ge=0, description="Wall time of the sampling (set by the pipeline).")


class IterationTimes(BaseModel):
    """Where a training iteration's time went, in wall seconds."""

    sampling_s: float = Field(ge=0, description="Its rollout, from the first sandbox to the last verdict.")
    grading_s: float = Field(ge=0, description="The rollout's wall time in the share its sandbox slots spent waiting "
                             "for verdicts (the rollout's ``grading_s`` over its ``agent_s + sandbox_s + grading_s``, "
                             "summed over trajectories).")
    training_s: float = Field(ge=0, description="The update.")
    waiting_s: float = Field(ge=0, description="The update waiting for its data: all of the rollout when synchronous, "
                             "what was left of it when it was sampled beside the update before.")

    @property
    def hidden_s(self) -> float:
        """The sampling that ran beside other work (the update and evaluation before)."""
        return max(0.0, self.sampling_s - self.waiting_s)

    @classmethod
    def of(cls, rollout: dict[str, float], sampling_s: float, training_s: float, waiting_s: float) -> IterationTimes:
        """From the rollout's ``rollout/`` figures (the slot-seconds summed over its trajectories) and the wall times."""
        busy = sum(rollout.get(f"rollout/{k}", 0.0) for k in ("agent_s", "sandbox_s", "grading_s"))
        share = rollout.get("rollout/grading_s", 0.0) / busy if busy else 0.0
        return cls(sampling_s=sampling_s, grading_s=sampling_s * share, training_s=training_s,
                   waiting_s=min(waiting_s, sampling_s))

    def metrics(self) -> dict[str, float]:
        """As ``time/`` figures for MLflow."""
        return {f"time/{k}": v for k, v in {**self.model_dump(), "hidden_s": self.hidden_s}.items()}


class StageResult(BaseModel):
    """A training stage (warm-start, RFT, a DAPO iteration): the policy after it and what it measured."""

    policy: PolicyRef = Field(description="The trained checkpoint, or the starting policy carried forward.")
    metrics: dict[str, float] = Field(default_factory=dict, description="rollout/, grading/, rft/ or data/, train/ figures.")
    run_id: str | None = Field(None, description="The stage's MLflow run.")
    trained: bool = Field(description="False: nothing to train on, the policy carried forward.")
    reason: str | None = Field(None, description="Why nothing was trained.")
    behaviour: Behaviour | None = Field(None, description="What the policy did in the stage's rollout (None: a "
                                        "ledger written before it was recorded; the summary then reads the rollout).")
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")
    ran_on: list[str] = Field(default_factory=list, description="Where its rollout chunks ran: `dask:<worker>` on a Dask "
                              "cluster, else `<host>:<pid>` (sorted, each once).")
    sampled_by: dict[str, int] = Field(default_factory=dict, description="Its trajectories per policy version that "
                                       "sampled their first turn: which policy each finished piece came from.")
    times: IterationTimes | None = Field(None, description="Where its wall time went (None: a ledger written before "
                                         "it was recorded).")


class EvalResult(BaseModel):
    """An evaluation stage: Pass@1 and friends of one policy."""

    policy: PolicyRef = Field(description="The evaluated policy.")
    metrics: dict[str, float] = Field(default_factory=dict, description="eval/ figures (eval/pass_at_1, ...).")
    run_id: str | None = Field(None, description="The evaluation's MLflow run.")
    promoted: bool | None = Field(None, description="Whether `champion` moved here (None: promotion off).")
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")


# --- what the tasks hand their flows -------------------------------------------------------------


class TrackedRun(BaseModel):
    """An MLflow run a flow opened: its id, its page (None on a database backend), its experiment."""

    run_id: str
    url: str | None = None
    experiment_id: str


class Lineage(BaseModel):
    """The digests of the datasets a run was given as inputs (None: not given)."""

    tasks: str | None = None
    images: str | None = None
    trajectories: str | None = None


class ResolvedPolicy(BaseModel):
    """What a model argument (a folder, a hub id, ``champion``, ``version:N``) names in the registry."""

    path: str = Field(description="The folder or hub id the engines load.")
    policy_version: str = Field(description="The version its trajectories record.")
    registered_version: str | None = Field(None, description="Its registry version (None: not registered).")
    step: int | None = Field(None, description="The pipeline step its checkpoint was made at (None: unknown).")


class PipelineInputs(BaseModel):
    """The pipeline's task files and starting model, materialised (the demo's, the curriculum's, or the user's)."""

    tasks: Path
    eval_tasks: Path
    repos: Path | None = None
    warm_tasks: Path | None = None
    model: str
    reaped: int = Field(0, ge=0, description="Sandboxes of a killed earlier attempt removed before the run.")


class ChunkResult(RolloutResult):
    """One rollout chunk: the stage's result and where the chunk ran (`dask:<worker>` or `<host>:<pid>`)."""

    ran_on: str | None = None


class ChunkedRollout(BaseModel):
    """A rollout's chunks together: one store, the counts summed, the slowest chunk's wall time."""

    store: Path
    produced: int
    skipped: int
    wall_s: float
    ran_on: list[str | None] = Field(default_factory=list)

    @classmethod
    def of(cls, chunks: list[ChunkResult]) -> ChunkedRollout:
        return cls(store=chunks[0].store, produced=sum(c.summary.produced for c in chunks),
                   skipped=sum(c.summary.skipped for c in chunks), wall_s=max(c.summary.wall_s for c in chunks),
                   ran_on=[c.ran_on for c in chunks])


class EvalRun(BaseModel):
    """An evaluation's rollout: the report, the trajectories' store, the wall time, the written ``eval.json``."""

    report: EvalReport
    store: Path
    wall_s: float
    eval_json: Path


class Evaluation(BaseModel):
    """What the evaluate flow hands its caller (a pipeline tabulates it)."""

    report: EvalReport
    metrics: dict[str, float]
    run_id: str
    out: Path
    promoted: bool | None = None
    checkpoint: str
    model_id: str | None = None


class RolloutFigures(BaseModel):
    """What a training flow logs about its rollout: the count, rollout/ and grading/ metrics, the behaviour."""

    trajectories: int
    metrics: dict[str, float]
    behaviour: Behaviour
    sampled_by: dict[str, int] = Field(default_factory=dict, description="Trajectories per policy version that sampled "
                                       "their first turn (an asynchronous rollout spans a reload: later turns may be newer).")


class RFTSelection(BaseModel):
    """Which trajectories RFT keeps, and why the others are left out."""

    trajectories: int
    kept: int
    skipped: dict[str, int]
    tasks_kept: int


class TrainingRun(BaseModel):
    """A training task's outcome, with the figures of the rollout it read (and RFT's selection)."""

    trained: bool
    reason: str | None = Field(None, description="Why nothing was trained (no learning signal).")
    final: Path | None = None
    steps: int = 0
    new_steps: int = 0
    rows: int = 0
    data: dict[str, float] = Field(default_factory=dict)
    step_metrics: list[dict[str, Any]] = Field(default_factory=list, description="Every step's trainer metrics, "
                                                 "those of a crashed attempt this run resumed included.")
    rollout: RolloutFigures
    selection: RFTSelection | None = None


class GradedChunk(BaseModel):
    """One grading task's predictions: where the results are, how many resolved, which hit the infrastructure."""

    out: Path
    resolved: int
    total: int
    infra_errors: list[str] = Field(default_factory=list)


class GradeRun(BaseModel):
    """The grade flow's predictions: the merged results file and how many resolved."""

    out: Path
    resolved: int
    total: int


class ValidationSummary(BaseModel):
    """A task set's validation: how many tasks are valid, which are not, where the report is."""

    valid: int
    total: int
    invalid: list[str] = Field(default_factory=list)
    report: Path
    cached: int = Field(0, description="Tasks whose verdict came from the validation cache.")


class ImagesBuilt(ImagesReady):
    """The build_images flow: the manifest, the images ready (and reused), the validation when asked."""

    validation: ValidationSummary | None = None


class ImageSet(ImagesReady):
    """One task set's images in a pipeline: the manifest, the images ready and reused."""

    cache_hit: bool = Field(False, description="Prefect's cache answered: every image was reused.")


class ValidatedSet(ValidationSummary):
    """One task set's validation in a pipeline, with the task file of its valid tasks."""

    tasks: Path


class ImagesOutcome(BaseModel):
    """The pipeline's images stage: one entry per task set it samples (its ledger entry)."""

    train: ImageSet
    eval: ImageSet | None = None
    warm: ImageSet | None = None
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")


class ValidationOutcome(BaseModel):
    """The pipeline's validation stage: one entry per validated task set (its ledger entry)."""

    train: ValidatedSet | None = None
    eval: ValidatedSet | None = None
    warm: ValidatedSet | None = None
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")


class PipelineSummary(BaseModel):
    """What a pipeline run hands back (and writes as ``summary.json``)."""

    name: str
    run_dir: Path
    mlflow_run_id: str
    mlflow_url: str | None = None
    final_policy: PolicyRef
    stages: list[dict[str, Any]] = Field(description="The per-stage table's rows (stage, step, policy, figures, seconds).")
    plot: str | None = Field(None, description="The Pass@1 curve's PNG (None: fewer than two points).")
    summary: list[str] = Field(description="What the run did, in words.")
