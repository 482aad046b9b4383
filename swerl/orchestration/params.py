"""Flow parameters: pydantic models that the Prefect UI renders as forms.

Every path is relative to the working directory of the flow run (the repository root for
the shipped deployments). The defaults are the embedded default: the demo tasks, the tiny
model, local Docker, MLflow on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.curriculum.config import CurriculumConfig
from swerl.grading.grader import GradingConfig
from swerl.models.tiny import TinyModelConfig
from swerl.orchestration.fanout import FanOutParams
from swerl.rl.rewards import check_turn_window
from swerl.rl.rft import RFTConfig
from swerl.stages.config import part
from swerl.rollout.sampler import SamplerConfig
from swerl.tracking.config import TrackingConfig
from swerl.stages.train import DAPO_TRAIN, RFT_TRAIN, DAPOObjective, TrainSettings

TASK_FILE = "Task file: .jsonl, .json, .parquet or a saved dataset folder"


class SamplerParams(SamplerConfig, FanOutParams):
    """How a stage samples its policy (engine, agent, sampling, sandboxes), and how the flow splits its rollouts
    and where the chunks run."""

    chunk_size: int | None = Field(None, ge=1, description="Tasks per rollout task run (None: one chunk); chunks run in "
                                   "parallel on a distributed task runner.")
    chunk_timeout_s: float = Field(6 * 3600, ge=60, description="Prefect timeout of one rollout chunk.")

    def config(self) -> SamplerConfig:
        """The stage's part: these settings without the flow's chunking."""
        return part(self, SamplerConfig)


class TrainParams(TrainSettings):
    """How a training stage trains, and the Prefect timeout of its task."""

    timeout_s: float = Field(24 * 3600, ge=60, description="Prefect timeout of the training task.")

    def settings(self) -> TrainSettings:
        """The stage's part: these settings without the Prefect timeout."""
        return part(self, TrainSettings)


def _train_params(preset: dict[str, Any], **changes: Any):
    """A default factory: TrainParams of a stage's preset (``RFT_TRAIN``, ``DAPO_TRAIN``) with ``changes``."""
    return lambda: TrainParams.model_validate({**preset, **changes})


class RFTParams(RFTConfig):
    """Rejection fine-tuning: sample, keep the resolved runs (``RFTConfig``), fine-tune on them."""

    enabled: bool = Field(True, description="Run the RFT stage.")
    sampler: SamplerParams | None = Field(None, description="Engine and limits of the RFT rollouts (None: the pipeline's). "
                                          "The paper samples the starting model; engine `scripted` replays gold patches "
                                          "instead (demonstrations, for a starting model that solves nothing).")
    samples: int = Field(4, ge=1, le=1024, description="Trajectories per task for the RFT data.")
    train: TrainParams = Field(default_factory=_train_params(RFT_TRAIN), description="How to train (default: the paper's RFT).")


class WarmStartParams(BaseModel):
    """Supervised warm-up on demonstrations (scripted gold-patch replays) of a separate task set,
    before the measured curve starts: it turns a random policy into a weak one."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path | None = Field(None, description="Warm-up task file, disjoint from training and held-out tasks "
                               "(None: the generated curriculum's warm-up split).")
    samples: int = Field(1, ge=1, le=1024, description="Demonstrations per task.")
    sampler: SamplerParams = Field(default_factory=lambda: SamplerParams(engine="scripted"), description="The demonstrator.")
    grade: bool = Field(True, description="Grade the demonstrations. A noisy demonstrator's runs (`demo_give_up` > 0) are "
                        "trained on whatever their verdict, so false skips a grading sandbox per gold replay (the learning "
                        "proof's seed 2: 3.9 min of demonstrations against 4.7 graded); the summary then says they were not graded. With `demo_give_up` 0 "
                        "only resolved runs are kept, which needs the verdicts: false is refused there.")
    train: TrainParams = Field(default_factory=_train_params({"optimizer": {"lr": 1e-3}}, epochs=4),
                               description="How to train; the epoch count is the early stop.")

    @model_validator(mode="after")
    def _verdicts_when_only_resolved_runs_count(self) -> WarmStartParams:
        if not self.grade and self.sampler.demo_give_up == 0:
            raise ValueError("warm_start.grade false needs a noisy demonstrator (sampler.demo_give_up > 0): with every "
                             "demonstration replaying its gold patch only the resolved ones are trained on, which needs "
                             "their verdicts; set grade true or demo_give_up above 0")
        return self


class DAPOParams(DAPOObjective):
    """The RL iterations: G samples per task, rewards, group advantages, clipped update (``DAPOObjective``)."""

    iterations: int = Field(2, ge=0, le=10_000, description="DAPO iterations after RFT.")
    samples: int = Field(4, ge=2, le=1024, description="Trajectories per task (G; the paper: 10).")
    train: TrainParams = Field(default_factory=_train_params(DAPO_TRAIN), description="How to train (default: the paper's DAPO).")


class EvalParams(BaseModel):
    """Pass@1 over k runs on the evaluation tasks."""

    model_config = ConfigDict(extra="forbid")

    runs: int = Field(2, ge=1, le=1024, description="Independent runs per task (k; the paper: 10).")
    evaluate_start: bool = Field(True, description="Evaluate the starting policy too (the curve's first point).")
    every_iteration: bool = Field(True, description="Evaluate after every DAPO iteration; False: after the last one only "
                                  "(the curve is start, RFT, last iteration; one evaluation saved per other iteration).")
    promote: bool = Field(True, description="Move the `champion` alias to an evaluated checkpoint whose Pass@1 is strictly "
                          "better than the champion's (a tie keeps the champion).")


class PipelineParams(BaseModel):
    """The whole loop: images, RFT, N DAPO iterations, each evaluated. A rerun with the same
    name resumes from the last finished stage."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", description="Pipeline id: run folder and MLflow parent run.")
    run_root: Path = Field(Path("runs/pipelines"), description="Run folders live in RUN_ROOT/NAME.")
    tasks: Path | None = Field(None, description=f"Training {TASK_FILE.lower()} (default: the embedded demo tasks).")
    eval_tasks: Path | None = Field(None, description="Held-out task file for evaluation (default: the training tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM) for image builds.")
    model: str | None = Field(None, description="Starting policy folder or hub name (default: the tiny model, created).")
    tiny_model: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Size and seed of the tiny model "
                                        "created when `model` is not given.")
    curriculum: CurriculumConfig | None = Field(None, description="Generate the tasks (swerl.curriculum): train, held-out "
                                                "(evaluation) and warm-up splits; `tasks`/`eval_tasks` must then be unset.")
    validate_runs: int = Field(1, ge=0, le=100, description="Gold-patch runs per task when validating the task set (0: skip).")
    validate_sets: list[Literal["train", "eval", "warm"]] = Field(
        ["train", "eval", "warm"], description="Which task sets are validated (when validate_runs > 0). The held-out "
        "set keeps the measure on tasks that can be solved; a training task whose tests miss the bug would reward any "
        "edit, so leave `train` out only for a generator known to make valid tasks (the curriculum's: "
        "tests/integration/test_curriculum_tasks.py); a warm-up demonstration replays the gold patch and is graded anyway.")
    warm_start: WarmStartParams | None = Field(None, description="Supervised warm-up of the starting model before the "
                                               "start's evaluation (None: start from the model as it is).")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base seed of sampling and training.")
    sampler: SamplerParams = Field(default_factory=SamplerParams, description="How the policy is sampled: engine, agent "
                                   "limits, sampling, sandboxes.")
    rft: RFTParams = Field(default_factory=RFTParams, description="Rejection fine-tuning after the start's evaluation.")
    dapo: DAPOParams = Field(default_factory=DAPOParams, description="The DAPO iterations after RFT.")
    eval: EvalParams = Field(default_factory=EvalParams, description="How each stage's policy is evaluated.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="Where MLflow records the runs.")

    @property
    def run_dir(self) -> Path:
        return self.run_root / self.name

    @property
    def run_name(self) -> str:
        """The Prefect flow run's name."""
        return f"pipeline-{self.name}"

    @model_validator(mode="after")
    def _turn_window(self) -> "PipelineParams":
        if self.dapo.iterations:  # DAPO samples with the pipeline's sampler
            check_turn_window(self.sampler.agent.max_turns, self.dapo.reward)
        return self

    @model_validator(mode="after")
    def _task_sources(self) -> "PipelineParams":
        if self.curriculum is not None and (self.tasks is not None or self.eval_tasks is not None):
            raise ValueError("give either curriculum or tasks/eval_tasks, not both")
        if self.warm_start is not None and self.warm_start.tasks is None and self.curriculum is None:
            raise ValueError("warm_start.tasks is required unless a curriculum provides the warm-up split")
        return self


class EvaluateParams(BaseModel):
    """Evaluate one policy: a folder, a hub name, or a registered alias/version (`champion`)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("champion", description="Model folder, hub name, or `alias:NAME` / `version:N` of the registered "
                       "model; a bare `champion` or `candidate` means the alias.")
    tasks: Path | None = Field(None, description=f"{TASK_FILE} (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(Path("runs/evaluations"), description="Each evaluation writes `OUT/<label>-<date>/`.")
    runs: int = Field(2, ge=1, le=1024, description="Independent runs per task (k).")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base sampling seed.")
    sampler: SamplerParams = Field(default_factory=SamplerParams, description="Engine and limits of the evaluation's rollouts.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="Where MLflow records the run; the "
                                     "registry that `champion`/`candidate` name.")
    promote: bool = Field(False, description="Move `champion` here when Pass@1 is strictly better than the champion's.")
    force_promote: bool = Field(False, description="With `promote`: move `champion` here whatever the Pass@1 (a "
                                "deliberate roll-back or re-baseline).")


class BuildImagesParams(BaseModel):
    """Images for a task set (default: the embedded demo tasks)."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path | None = Field(None, description=f"{TASK_FILE} (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM); default: the host's bundle.")
    manifest: Path = Field(Path("runs/images.json"), description="Where the task -> image map is written.")
    concurrency: int = Field(2, ge=1, le=64, description="Builds at once.")
    validate_runs: int = Field(0, ge=0, le=100, description="Also validate every task: gold patch N times (0: no).")


class RolloutParams(BaseModel):
    """A rollout of one policy on a task set: G samples per task, graded, to Parquet."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Model folder, hub name, or a registry alias (`champion`, `alias:NAME`, `version:N`).")
    tasks: Path | None = Field(None, description=f"{TASK_FILE} (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(description="Run folder: trajectories/*.parquet and summary.json; a rerun resumes it.")
    samples: int = Field(1, ge=1, le=1024, description="Trajectories per task (G).")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base sampling seed.")
    policy_version: str | None = Field(None, description="Recorded on every trajectory (default: the registry's or '0').")
    grade: bool = Field(True, description="Grade each trajectory in a fresh sandbox.")
    sampler: SamplerParams = Field(default_factory=SamplerParams, description="Engine and limits of the rollouts.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="The registry that `champion`/`candidate` name.")


class GradeParams(FanOutParams):
    """Grade SWE-bench predictions (instance_id, model_name_or_path, model_patch), each in a fresh sandbox."""

    model_config = ConfigDict(extra="forbid")

    predictions: Path = Field(description="Predictions JSONL.")
    tasks: Path | None = Field(None, description=f"{TASK_FILE} (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(description="Results JSONL: one line per prediction.")
    chunk_size: int = Field(50, ge=1, le=100_000, description="Predictions per grading task run.")
    concurrency: int = Field(2, ge=1, le=256, description="Sandboxes at once per chunk.")
    grading: GradingConfig = Field(default_factory=GradingConfig, description="How each prediction is graded: the "
                                   "tests' time limit, canaries, test user, tripwire, the sandboxes' limits.")
    skip_invalid: bool = Field(False, description="Grade the valid predictions and only report bad lines (missing "
                               "instance_id or model_patch, unknown instance); otherwise the run fails after grading them.")
