"""Flow parameters: pydantic models that the Prefect UI renders as forms.

Every path is relative to the working directory of the flow run (the repository root for
the shipped deployments). The defaults are the embedded default: the demo tasks, the tiny
model, local Docker, MLflow on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.curriculum.config import CurriculumConfig
from swerl.models.tiny import TinyModelConfig
from swerl.rl.rewards import RewardConfig

EngineKind = Literal["hf", "vllm", "openai", "scripted"]


class TrackingParams(BaseModel):
    """Where MLflow records runs (None: $MLFLOW_TRACKING_URI, else SQLite under .swerl/)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(None, description="MLflow tracking URI: http(s)://, sqlite:///, postgresql://.")
    experiment: str = Field("swerl", min_length=1, description="MLflow experiment.")
    registered_model: str = Field("swerl-policy", min_length=1, description="Registry name of the policy's checkpoints.")
    log_weights: bool = Field(False, description="Copy every checkpoint's weights into MLflow (default: record path and digest).")


class AgentParams(BaseModel):
    """The agent's limits and the sampling seed of a rollout."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineKind = Field("hf", description="hf (transformers), vllm, openai (HTTP server), scripted (gold patches).")
    base_url: str | None = Field(None, description="OpenAI-compatible server for engine openai.")
    concurrency: int = Field(4, ge=1, le=4096, description="Trajectories (sandboxes) at once.")
    max_turns: int = Field(40, ge=1, le=1000, description="Replies per trajectory (T_max).")
    max_context: int | None = Field(None, ge=64, description="Token budget per trajectory (default: the model's).")
    max_new_tokens: int = Field(1024, ge=1, le=131072, description="Tokens per reply at most.")
    command_timeout_s: float = Field(60.0, ge=1, le=86400, description="Seconds per sandbox command.")
    deadline_s: float = Field(1800.0, ge=1, le=86400, description="Wall-clock seconds per trajectory.")
    prompt_dir: Path | None = Field(None, description="Folder overriding the agent's prompt templates (<name>.j2).")
    torch_threads: int | None = Field(None, ge=1, le=1024, description="Engine hf on CPU: torch threads of its decoding thread "
                                      "(None: torch's default; 1 is fastest for a small model beside busy sandboxes).")
    demo: Literal["edit", "replace"] = Field("edit", description="Engine scripted: `edit` explores then edits the gold patch's "
                                             "lines; `replace` opens the file, replaces the smallest unique span, submits.")
    demo_give_up: float = Field(0.0, ge=0.0, le=1.0, description="Demo `replace`: the fraction of trajectories that submit "
                                "right after `open`, unfixed (a noisy demonstrator: the policy it teaches often stops short).")
    chunk_size: int | None = Field(None, ge=1, description="Tasks per rollout task run (None: one chunk); chunks run in parallel on a distributed task runner.")
    timeout_s: float = Field(6 * 3600, ge=60, description="Prefect timeout of one rollout chunk.")


class TrainParams(BaseModel):
    """Optimiser and backend of a training stage."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["torch", "deepspeed"] = Field("torch", description="Trainer backend.")
    device: str = Field("auto", description="cpu, cuda, cuda:N or auto.")
    epochs: int = Field(1, ge=1, le=10_000, description="Passes over the stage's data.")
    batch_size: int = Field(8, ge=1, le=65_536, description="Sequences per optimiser step.")
    lr: float = Field(5e-6, gt=0, le=1.0, description="Peak learning rate.")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field("cosine", description="Decay to 0 at the last step, or none.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    max_tokens_per_microbatch: int = Field(16384, ge=1, description="Padded tokens per forward pass.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward.")
    zero_stage: int = Field(3, ge=1, le=3, description="DeepSpeed ZeRO stage.")
    keep_last: int = Field(0, ge=0, description="Keep only the newest N step checkpoints (0: all).")
    save_every: int = Field(1, ge=1, le=1_000_000, description="Write a checkpoint every N steps and at the last.")
    timeout_s: float = Field(24 * 3600, ge=60, description="Prefect timeout of the training task.")

    def stage_fields(self) -> dict:
        """The fields a training stage config (``swerl.stages.train.TrainCommon``) shares with these."""
        return self.model_dump(exclude={"timeout_s"})


class RFTParams(BaseModel):
    """Rejection fine-tuning: sample, keep the resolved runs, fine-tune on them."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Run the RFT stage.")
    agent: AgentParams | None = Field(None, description="Engine and limits of the RFT rollouts (None: the pipeline's). The "
                                      "paper samples the starting model; engine `scripted` replays gold patches instead "
                                      "(demonstrations, for a starting model that solves nothing).")
    samples: int = Field(4, ge=1, le=1024, description="Trajectories per task for the RFT data.")
    max_per_task: int | None = Field(None, ge=1, description="At most this many resolved runs per task.")
    require_submitted: bool = Field(False, description="Keep only resolved runs that ended with `submit`.")
    require_resolved: bool = Field(True, description="Keep only resolved runs (rejection sampling); the warm start sets "
                                   "False to imitate every demonstration, a noisy demonstrator's unfixed ones included.")
    train: TrainParams = Field(default_factory=lambda: TrainParams(lr=5e-6, warmup_steps=10), description="Optimiser.")


class WarmStartParams(BaseModel):
    """Supervised warm-up on demonstrations (scripted gold-patch replays) of a separate task set,
    before the measured curve starts: it turns a random policy into a weak one."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path | None = Field(None, description="Warm-up task file, disjoint from training and held-out tasks "
                               "(None: the generated curriculum's warm-up split).")
    samples: int = Field(1, ge=1, le=1024, description="Demonstrations per task.")
    agent: AgentParams = Field(default_factory=lambda: AgentParams(engine="scripted"), description="The demonstrator.")
    train: TrainParams = Field(default_factory=lambda: TrainParams(lr=1e-3, epochs=4, lr_schedule="constant"),
                               description="Optimiser; the epoch count is the early stop.")


class DAPOParams(BaseModel):
    """The RL iterations: G samples per task, rewards, group advantages, clipped update."""

    model_config = ConfigDict(extra="forbid")

    iterations: int = Field(2, ge=0, le=10_000, description="DAPO iterations after RFT.")
    samples: int = Field(4, ge=2, le=1024, description="Trajectories per task (G; the paper: 10).")
    eps_low: float = Field(0.2, ge=0, le=1, description="Lower clip: 1 - eps_low.")
    eps_high: float = Field(0.3, ge=0, le=10, description="Upper clip (clip-higher): 1 + eps_high.")
    advantage: Literal["mean_std", "mean", "leave_one_out"] = Field("mean_std", description="Group baseline.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Turn-length penalty, limit/error policies.")
    drop_zero_advantage: bool = Field(True, description="Drop zero-advantage samples (DAPO); False: plain GRPO.")
    loss_aggregation: Literal["token", "sequence"] = Field("token", description="token (DAPO) or sequence-mean (GRPO) loss.")
    rewards_file: Path | None = Field(None, description="External grader: JSONL {trajectory_id, reward} replacing computed "
                                      "rewards of the trajectories it names (ids are '<instance_id>/<sample_index>').")
    train: TrainParams = Field(default_factory=lambda: TrainParams(lr=1e-6, batch_size=128, lr_schedule="constant"),
                               description="Optimiser.")


class EvalParams(BaseModel):
    """Pass@1 over k runs on the evaluation tasks."""

    model_config = ConfigDict(extra="forbid")

    runs: int = Field(2, ge=1, le=1024, description="Independent runs per task (k; the paper: 10).")
    evaluate_start: bool = Field(True, description="Evaluate the starting policy too (the curve's first point).")
    promote: bool = Field(True, description="Move the `champion` alias to an evaluated checkpoint whose Pass@1 is strictly "
                          "better than the champion's (a tie keeps the champion).")


class PipelineParams(BaseModel):
    """The whole loop: images, RFT, N DAPO iterations, each evaluated. A rerun with the same
    name resumes from the last finished stage."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", description="Pipeline id: run folder and MLflow parent run.")
    run_root: Path = Field(Path("runs/pipelines"), description="Run folders live in RUN_ROOT/NAME.")
    tasks: Path | None = Field(None, description="Training task file (default: the embedded demo tasks).")
    eval_tasks: Path | None = Field(None, description="Held-out task file for evaluation (default: the training tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM) for image builds.")
    model: str | None = Field(None, description="Starting policy folder or hub name (default: the tiny model, created).")
    tiny_model: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Size and seed of the tiny model "
                                        "created when `model` is not given.")
    curriculum: CurriculumConfig | None = Field(None, description="Generate the tasks (swerl.curriculum): train, held-out "
                                                "(evaluation) and warm-up splits; `tasks`/`eval_tasks` must then be unset.")
    validate_runs: int = Field(1, ge=0, le=100, description="Gold-patch runs per task when validating the task set (0: skip).")
    warm_start: WarmStartParams | None = Field(None, description="Supervised warm-up of the starting model before the "
                                               "start's evaluation (None: start from the model as it is).")
    seed: int = Field(0, ge=0, description="Base seed of sampling and training.")
    agent: AgentParams = Field(default_factory=AgentParams, description="Rollout engine and limits.")
    rft: RFTParams = Field(default_factory=RFTParams, description="Rejection fine-tuning after the start's evaluation.")
    dapo: DAPOParams = Field(default_factory=DAPOParams, description="The DAPO iterations after RFT.")
    eval: EvalParams = Field(default_factory=EvalParams, description="How each stage's policy is evaluated.")
    tracking: TrackingParams = Field(default_factory=TrackingParams, description="Where MLflow records the runs.")

    @property
    def run_dir(self) -> Path:
        return self.run_root / self.name

    @property
    def run_name(self) -> str:
        """The Prefect flow run's name."""
        return f"pipeline-{self.name}"

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
    tasks: Path | None = Field(None, description="Task file (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(Path("runs/evaluations"), description="Each evaluation writes OUT/<label>-<date>/.")
    runs: int = Field(2, ge=1, le=1024, description="Independent runs per task (k).")
    seed: int = Field(0, ge=0, description="Base sampling seed.")
    agent: AgentParams = Field(default_factory=AgentParams, description="Engine and limits of the evaluation's rollouts.")
    tracking: TrackingParams = Field(default_factory=TrackingParams, description="Where MLflow records the run; the "
                                     "registry that `champion`/`candidate` name.")
    promote: bool = Field(False, description="Move `champion` here when Pass@1 is strictly better than the champion's.")
    force_promote: bool = Field(False, description="With `promote`: move `champion` here whatever the Pass@1 (a "
                                "deliberate roll-back or re-baseline).")


class BuildImagesParams(BaseModel):
    """Images for a task set (default: the embedded demo tasks)."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path | None = Field(None, description="Task file (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM); default: the host's bundle.")
    manifest: Path = Field(Path("runs/images.json"), description="Where the task -> image map is written.")
    concurrency: int = Field(2, ge=1, le=64, description="Builds at once.")
    validate_runs: int = Field(0, ge=0, le=100, description="Also validate every task: gold patch N times (0: no).")


class RolloutParams(BaseModel):
    """A rollout of one policy on a task set: G samples per task, graded, to Parquet."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Model folder, hub name, or a registry alias (`champion`, `alias:NAME`, `version:N`).")
    tasks: Path | None = Field(None, description="Task file (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(description="Run folder: trajectories/*.parquet and summary.json; a rerun resumes it.")
    samples: int = Field(1, ge=1, le=1024, description="Trajectories per task (G).")
    seed: int = Field(0, ge=0, description="Base sampling seed.")
    policy_version: str | None = Field(None, description="Recorded on every trajectory (default: the registry's or '0').")
    grade: bool = Field(True, description="Grade each trajectory in a fresh sandbox.")
    agent: AgentParams = Field(default_factory=AgentParams, description="Engine and limits of the rollouts.")
    tracking: TrackingParams = Field(default_factory=TrackingParams, description="The registry that `champion`/`candidate` name.")


class GradeParams(BaseModel):
    """Grade SWE-bench predictions (instance_id, model_name_or_path, model_patch), each in a fresh sandbox."""

    model_config = ConfigDict(extra="forbid")

    predictions: Path = Field(description="Predictions JSONL.")
    tasks: Path | None = Field(None, description="Task file (default: the embedded demo tasks).")
    repos: Path | None = Field(None, description="Repository mirror folder (default: the demo's).")
    out: Path = Field(description="Results JSONL: one line per prediction.")
    chunk_size: int = Field(50, ge=1, le=100_000, description="Predictions per grading task run.")
    concurrency: int = Field(2, ge=1, le=256, description="Sandboxes at once per chunk.")
    timeout_s: float = Field(900.0, ge=1, le=86400, description="Seconds allowed for one test run.")
    skip_invalid: bool = Field(False, description="Grade the valid predictions and only report bad lines (missing "
                               "instance_id or model_patch, unknown instance); otherwise the run fails after grading them.")
