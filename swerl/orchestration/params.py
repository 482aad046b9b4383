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
from swerl.data.loaders import SkipInvalidSettings
from swerl.envs.images import ImageSettings
from swerl.envs.repos import MirrorSettings
from swerl.grading.grader import GradingConfig, GradingSandboxesSettings
from swerl.grading.validate import ValidationSettings
from swerl.models.tiny import TinyModelConfig
from swerl.orchestration.fanout import FanOutParams
from swerl.rl.rewards import check_turn_window
from swerl.rl.rft import RFTConfig
from swerl.stages.config import part
from swerl.rollout.runner import GradeSettings, PolicyVersionSettings, RolloutSettings, SamplesSettings
from swerl.rollout.sampler import SamplerConfig
from swerl.stages.images import ImageBuildSettings
from swerl.tracking.config import TrackingConfig
from swerl.stages.train import DAPO_TRAIN, RFT_TRAIN, DAPOObjective, TrainSettings
from swerl.util.settings import SeedSettings



class TaskFileSettings(BaseModel):
    """The task file a form names."""

    tasks: Path | None = Field(None, description="Task file: .jsonl, .json, .parquet or a saved dataset folder. None: the "
                               "embedded demo tasks, or for a pipeline with a curriculum, its split.")


class PolicySettings(BaseModel):
    """The policy a form starts from or scores."""

    model: str | None = Field(None, description="A model folder, a hub id, or a registered alias (`champion`, "
                              "`alias:NAME`, `version:N`; a bare `champion` or `candidate` means the alias). None: the "
                              "form's default: a pipeline creates the tiny model, an evaluation scores `champion`.")


class EvalSettings(BaseModel):
    """How an evaluation measures Pass@1, and whether a better policy becomes the champion."""

    runs: int = Field(2, ge=1, le=1024, description="Independent runs per task (k; the paper: 10).")
    promote: bool = Field(True, description="Move the `champion` alias to an evaluated registered checkpoint whose Pass@1 "
                          "is strictly better than the champion's (a tie keeps the champion).")


class SamplerParams(SamplerConfig, FanOutParams):
    """How a stage samples its policy (engine, agent, sampling, sandboxes), and how the flow splits its rollouts
    and where the chunks run."""

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
    attempts: int = Field(4, ge=1, le=1024, description="Trajectories per task for the RFT data (more attempts: more "
                          "chances of a resolved run).")
    train: TrainParams = Field(default_factory=_train_params(RFT_TRAIN), description="How to train (default: the paper's RFT).")


class WarmStartParams(GradeSettings, SamplesSettings, TaskFileSettings):
    """Supervised warm-up on demonstrations (scripted gold-patch replays) of a separate task set,
    before the measured curve starts: it turns a random policy into a weak one.

    ``tasks``: the warm-up task file, disjoint from training and held-out tasks (None: the generated curriculum's
    warm-up split; required without a curriculum). ``samples``: demonstrations per task. ``grade``: a noisy
    demonstrator's runs (``engine.give_up`` > 0) are trained on whatever their verdict, so false skips a grading
    sandbox per gold replay (the learning proof's seed 2: 3.9 min of demonstrations against 4.7 graded); the summary
    then says they were not graded. With ``engine.give_up`` 0 only resolved runs are kept, which needs the verdicts:
    false is refused there."""

    model_config = ConfigDict(extra="forbid")

    sampler: SamplerParams = Field(default_factory=lambda: SamplerParams(engine="scripted"), description="The demonstrator.")
    train: TrainParams = Field(default_factory=_train_params({"optimizer": {"lr": 1e-3}}, epochs=4),
                               description="How to train; the epoch count is the early stop.")

    @model_validator(mode="after")
    def _verdicts_when_only_resolved_runs_count(self) -> WarmStartParams:
        if not self.grade and self.sampler.give_up == 0:
            raise ValueError("warm_start.grade false needs a noisy demonstrator (sampler.engine.give_up > 0): with every "
                             "demonstration replaying its gold patch only the resolved ones are trained on, which needs "
                             "their verdicts; set grade true or engine.give_up above 0")
        return self


class DAPOParams(DAPOObjective):
    """The RL iterations: G samples per task, rewards, group advantages, clipped update (``DAPOObjective``)."""

    iterations: int = Field(2, ge=0, le=10_000, description="DAPO iterations after RFT.")
    group_size: int = Field(4, ge=2, le=1024, description="Trajectories per task, the group whose rewards give each "
                            "other's advantages (G; the paper: 10; a group advantage needs two).")
    train: TrainParams = Field(default_factory=_train_params(DAPO_TRAIN), description="How to train (default: the paper's DAPO).")


class EvalParams(EvalSettings):
    """Pass@1 over k runs on the evaluation tasks."""

    model_config = ConfigDict(extra="forbid")

    evaluate_start: bool = Field(True, description="Evaluate the starting policy too (the curve's first point).")
    every_iteration: bool = Field(True, description="Evaluate after every DAPO iteration; False: after the last one only "
                                  "(the curve is start, RFT, last iteration; one evaluation saved per other iteration).")


class PipelineParams(SeedSettings, ValidationSettings, PolicySettings, MirrorSettings, TaskFileSettings):
    """The whole loop: images, RFT, N DAPO iterations, each evaluated. A rerun with the same
    name resumes from the last finished stage.

    ``tasks``: the training tasks (``eval_tasks``: the held-out ones); ``model``: the starting policy (None: the tiny
    model, created as ``tiny_model`` says); ``seed``: the base seed of sampling and training."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", description="Pipeline id: run folder and MLflow parent run.")
    run_root: Path = Field(Path("runs/pipelines"), description="Run folders live in RUN_ROOT/NAME.")
    eval_tasks: Path | None = Field(None, description="Held-out task file for evaluation (default: the training tasks).")
    tiny_model: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Size and seed of the tiny model "
                                        "created when `model` is not given.")
    curriculum: CurriculumConfig | None = Field(None, description="Generate the tasks (swerl.curriculum): train, held-out "
                                                "(evaluation) and warm-up splits; `tasks`/`eval_tasks` must then be unset.")
    images: ImageSettings = Field(default_factory=ImageSettings, description="How the task sets' images are built: "
                                  "CA certificates, GitHub for repositories missing from the mirror, builds at once, "
                                  "base images, rebuilding.")
    validate_sets: list[Literal["train", "eval", "warm"]] = Field(
        ["train", "eval", "warm"], description="Which task sets are validated (when validate_runs > 0). The held-out "
        "set keeps the measure on tasks that can be solved; a training task whose tests miss the bug would reward any "
        "edit, so leave `train` out only for a generator known to make valid tasks (the curriculum's: "
        "tests/integration/test_curriculum_tasks.py); a warm-up demonstration replays the gold patch and is graded anyway.")
    warm_start: WarmStartParams | None = Field(None, description="Supervised warm-up of the starting model before the "
                                               "start's evaluation (None: start from the model as it is).")
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
    def _overlap_loads_weights(self) -> "PipelineParams":
        if self.dapo.off_policy.max_staleness and self.dapo.iterations and self.sampler.engine.kind == "scripted":
            raise ValueError("dapo.off_policy.max_staleness > 0 samples iteration k+1 while iteration k trains and loads "
                             "each new checkpoint into the sampler's engine; a scripted policy has no weights: use engine "
                             "hf, vllm or openai, or max_staleness 0")
        return self

    @model_validator(mode="after")
    def _task_sources(self) -> "PipelineParams":
        if self.curriculum is not None and (self.tasks is not None or self.eval_tasks is not None):
            raise ValueError("give either curriculum or tasks/eval_tasks, not both")
        if self.warm_start is not None and self.warm_start.tasks is None and self.curriculum is None:
            raise ValueError("warm_start.tasks is required unless a curriculum provides the warm-up split")
        return self


class EvaluateParams(SeedSettings, EvalSettings, MirrorSettings, TaskFileSettings, PolicySettings):
    """Evaluate one policy: a folder, a hub name, or a registered alias/version (`champion` when none is given)."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(Path("runs/evaluations"), description="Each evaluation writes `OUT/<label>-<date>/`.")
    sampler: SamplerParams = Field(default_factory=SamplerParams, description="Engine and limits of the evaluation's rollouts.")
    images: ImageSettings = Field(default_factory=ImageSettings, description="How the tasks' images are built (or found "
                                  "by tag): CA certificates, GitHub, builds at once, base images, force.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="Where MLflow records the run; the "
                                     "registry that `champion`/`candidate` name.")
    force_promote: bool = Field(False, description="With `promote`: move `champion` here whatever the Pass@1 (a "
                                "deliberate roll-back or re-baseline).")

    @property
    def policy(self) -> str:
        """The policy scored: ``model``, else the registry's `champion`."""
        return self.model or "champion"


class BuildImagesParams(ValidationSettings, ImageBuildSettings, MirrorSettings, TaskFileSettings):
    """Images for a task set (default: the embedded demo tasks), each task validated ``validate_runs`` times."""

    model_config = ConfigDict(extra="forbid")


class RolloutParams(PolicyVersionSettings, RolloutSettings, MirrorSettings, TaskFileSettings):
    """A rollout of one policy on a task set: G samples per task, graded, to Parquet."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Model folder, hub name, or a registry alias (`champion`, `alias:NAME`, `version:N`).")
    out: Path = Field(description="Run folder: trajectories/*.parquet and summary.json; a rerun resumes it.")
    sampler: SamplerParams = Field(default_factory=SamplerParams, description="Engine and limits of the rollouts.")
    images: ImageSettings = Field(default_factory=ImageSettings, description="How the tasks' images are built (or found "
                                  "by tag): CA certificates, GitHub, builds at once, base images, force.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="The registry that `champion`/`candidate` name.")


class GradeParams(FanOutParams, GradingSandboxesSettings, SkipInvalidSettings, MirrorSettings, TaskFileSettings):
    """Grade SWE-bench predictions (instance_id, model_name_or_path, model_patch), each in a fresh sandbox."""

    model_config = ConfigDict(extra="forbid")

    predictions: Path = Field(description="Predictions JSONL.")
    out: Path = Field(description="Results JSONL: one line per prediction.")
    grading: GradingConfig = Field(default_factory=GradingConfig, description="How each prediction is graded: the "
                                   "tests' time limit, canaries, test user, tripwire, the sandboxes' limits.")
