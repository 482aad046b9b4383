"""Stage: roll the agent out on a task set (resumable), and evaluation on top of it.

How a stage samples (engine, agent limits, sampling, sandboxes) is one ``SamplerConfig``, the same
the CLI and the Prefect forms set. A stage whose share of infrastructure-failed pairs
(``Trajectory.infra_failed``) exceeds ``sampler.max_infra_failure_rate`` raises ``InfraFailureRate`` (retryable) once it has stored what
it finished; its rerun redoes only the failed pairs. Below the bound the stage completes,
and evaluation leaves the failed pairs out of every figure and lists them apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swerl.agent.trajectory import Trajectory
from swerl.data.task import Task
from swerl.envs.docker_hosts import on_agents_pool
from swerl.envs.factory import environment_kind
from swerl.envs.images import ImageSettings
from swerl.eval.report import EvalReport, build_report
from swerl.inference.config import (EngineConfig, HFEngineConfig, HFEngineSettings, OpenAIEngineConfig, ScriptedEngineConfig,
                                    VLLMEngineConfig, VLLMEngineSettings)
from swerl.envs.docker_config import RunIdSettings
from swerl.rollout.runner import PolicyVersionSettings, RolloutConfig, RolloutSettings, RolloutSummary, StalenessSettings
from swerl.rollout.sampler import SamplerConfig
from swerl.rollout.store import TrajectoryStore
from swerl.stages.errors import InfraFailureRate, StageInputError
from swerl.stages.images import ImagesStage, TaskStageSettings, build_outcomes, image_config, load_task_file


class RolloutStage(TaskStageSettings, RolloutSettings, PolicyVersionSettings, RunIdSettings, StalenessSettings):
    """One rollout: which tasks, which policy, how many samples, where to; how it samples is ``sampler``, how it builds
    (or finds) its tasks' images is ``images``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Policy: a model folder, a hub name, or (engine openai) the served model name.")
    tokenizer: str | None = Field(None, description="Tokenizer folder or name (default: model).")
    out: Path = Field(description="Run folder: trajectories/*.parquet, summary.json; a rerun resumes it.")
    instance_ids: list[str] | None = Field(None, description="Only these tasks of the file (a chunk); None: all.")
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="Engine, agent, sampling and sandboxes.")
    images: ImageSettings = Field(default_factory=ImageSettings, description="How the tasks' images are built (docker "
                                  "sandboxes): a pipeline's images stage's settings, so that the rollout finds the images "
                                  "it built (their tags depend on the CA certificates and the base images).")
    follow: Path | None = Field(None, description="An asynchronous pipeline's policy feed (RUN_DIR/policies.jsonl): the "
                                "checkpoints announced while this rollout samples are loaded into its engine as they land "
                                "(swerl.rollout.policy_feed). None: one policy throughout.")

    @property
    def version(self) -> str:
        """The policy version recorded on every trajectory: ``policy_version``, else "0"."""
        return self.policy_version or "0"

    @model_validator(mode="after")
    def _followed_policy_has_weights(self) -> RolloutStage:
        if self.follow is not None and self.sampler.engine.kind == "scripted":
            raise ValueError("follow loads newer checkpoints into the engine; a scripted policy has no weights: "
                             "give follow only with engine hf, vllm or openai")
        return self


class RolloutResult(BaseModel):
    summary: RolloutSummary
    store: Path
    tasks: list[str]


def stage_tasks(stage: RolloutStage) -> list[Task]:
    """The stage's tasks in file order: the whole file, or its ``instance_ids`` (each must be in it)."""
    tasks = load_task_file(stage.tasks, stage.skip_invalid)
    if stage.instance_ids is not None:
        unknown = sorted(set(stage.instance_ids) - {t.instance_id for t in tasks})
        if unknown:
            raise StageInputError(f"instance_ids not in {stage.tasks}: {unknown[:5]}")
        wanted = set(stage.instance_ids)
        tasks = [t for t in tasks if t.instance_id in wanted]
    return tasks


def run_rollout(stage: RolloutStage, on_done: Callable[[Trajectory], None] | None = None,
                on_start: Callable[[int], None] | None = None,
                on_build: Callable[[object], None] | None = None) -> RolloutResult:
    """Build (or find) the images, then run every (task, sample) not yet stored in ``out``; raises
    InfraFailureRate (after storing what finished) when too many pairs failed for infrastructure.

    ``on_start(n)`` is called with the number of trajectories this call will produce.
    """
    from swerl.agent.chat_format import ChatFormat, ChatTemplateError
    from swerl.inference.base import EngineError
    from swerl.inference.factory import load_tokenizer, make_engine
    from swerl.inference.scripted import demonstrations
    from swerl.rollout.policy_feed import starting_policy

    tasks = stage_tasks(stage)
    sampler = stage.sampler
    try:
        tok = load_tokenizer(stage.tokenizer or stage.model)
        chat = ChatFormat(tok)
    except (EngineError, ChatTemplateError) as e:
        raise StageInputError(str(e)) from e
    images = _environments(stage, tasks, on_build)
    engine_cfg = engine_config(stage)
    scripts = demonstrations(engine_cfg, tok, tasks) if isinstance(engine_cfg, ScriptedEngineConfig) else None
    store_dir = stage.out / "trajectories"
    if on_start is not None:
        done = TrajectoryStore(store_dir).done()
        on_start(sum(1 for t in tasks for i in range(stage.samples) if (t.instance_id, i) not in done))
    try:
        # each request carries its own cap (agent.max_new_tokens) and seed (from the stage's seed)
        engine = make_engine(engine_cfg, sampling=sampler.sampling, policy_version=stage.version, tokenizer=tok,
                             scripts=scripts)
    except EngineError as e:
        raise StageInputError(str(e)) from e
    config = rollout_config(stage)
    try:
        if reloads_checkpoint(stage):  # one server for every stage: it must sample from this stage's policy
            # (a following rollout: or the newer one the feed has, never moving the server back under the others)
            engine.ensure_policy(*starting_policy(stage.follow, stage.model, stage.version))  # EngineError fails the stage
        summary = _sample(stage, tasks, images, engine, chat, config, store_dir, on_done)
    finally:
        engine.close()
    stage.out.mkdir(parents=True, exist_ok=True)
    (stage.out / "summary.json").write_text(summary.model_dump_json(indent=2))
    check_infra_failures(TrajectoryStore(store_dir), tasks, stage.samples, sampler.max_infra_failure_rate)
    return RolloutResult(summary=summary, store=store_dir, tasks=[t.instance_id for t in tasks])


def _sample(stage: RolloutStage, tasks, images, engine, chat, config: RolloutConfig, store_dir: Path,
            on_done: Callable[[Trajectory], None] | None) -> RolloutSummary:
    """The runner over the stage's pairs; with ``follow``, the newer policies announced meanwhile are loaded as they land."""
    from swerl.rollout.policy_feed import FeedFollower
    from swerl.rollout.runner import rollout

    if stage.follow is None:
        return rollout(tasks, images, engine, chat, config, store_dir, on_done=on_done)
    with FeedFollower(stage.follow, engine) as follower:
        summary = rollout(tasks, images, engine, chat, config, store_dir, on_done=on_done)
    return summary.model_copy(update={"policies_loaded": [v for v, _ in follower.record.loaded],
                                      "reloads_failed": dict(follower.record.failed)})


def rollout_config(stage: RolloutStage) -> RolloutConfig:
    """The runner's settings for ``stage``: its sampler, with the stage's grading logs and run label (the stage's own
    config stays as given)."""
    sampler = stage.sampler.model_copy(deep=True)
    sampler.grading.grading_logs = sampler.grading.grading_logs or stage.log_dir / "grading"
    sampler.grading.sandbox = on_agents_pool(sampler.sandbox, sampler.grading.sandbox)  # a pool grades on its hosts too
    if stage.run_id:
        sampler.sandbox.run_id = stage.run_id
        sampler.grading.sandbox.run_id = stage.run_id
    return RolloutConfig(samples=stage.samples, seed=stage.seed, grade=stage.grade, model_name=stage.model, sampler=sampler,
                         trains_from=stage.trains_from)


def engine_config(stage: RolloutStage) -> EngineConfig:
    """The engine the stage's sampler sets (``sampler.engine``) with the stage's model; StageInputError when one is
    missing or wrong."""
    try:
        return _engine_config(stage)
    except ValidationError as e:
        raise StageInputError(f"the stage's {stage.sampler.engine.kind} engine settings are invalid: {e}") from e


def _engine_config(stage: RolloutStage) -> EngineConfig:
    settings = stage.sampler.engine
    if isinstance(settings, ScriptedEngineConfig):  # no model: its settings are its config
        return settings
    values = settings.model_dump(exclude={"kind"})
    if isinstance(settings, HFEngineSettings):
        return HFEngineConfig(**values, model=stage.model)
    if isinstance(settings, VLLMEngineSettings):
        return VLLMEngineConfig(**values, model=stage.model)
    if not settings.base_url:
        raise StageInputError("engine openai needs base_url (engine.base_url, --base-url), e.g. http://127.0.0.1:8000/v1" + (
            "; sampler.serve is started by the pipeline flow, which hands its stages the base_url: a stage run alone "
            "takes a running server's" if stage.sampler.serve else ""))
    served = settings.served_model or (served_model_name(settings.base_url) if reloads_checkpoint(stage) else stage.model)
    return OpenAIEngineConfig(**{k: v for k, v in values.items() if k != "served_model"}, model=served)


def reloads_checkpoint(stage: RolloutStage) -> bool:
    """Engine openai with a checkpoint folder as the stage's model: the server is made to serve it."""
    return stage.sampler.engine.kind == "openai" and Path(stage.model).is_dir()


def served_model_name(base_url: str) -> str:
    """The one model ``base_url`` serves; StageInputError when it serves none or several (set engine.served_model)."""
    from swerl.inference.openai_engine import served_models

    names = served_models(base_url)
    if len(names) != 1:
        raise StageInputError(f"{base_url} serves {names}: set the sampler's engine.served_model to the policy's name")
    return names[0]


def rollout_images_stage(stage: RolloutStage) -> ImagesStage:
    """The image build of ``stage``'s tasks: its image settings, its task file, mirror and logs (LOG_DIR/builds)."""
    settings = {name: getattr(stage.images, name) for name in ImageSettings.model_fields}
    return ImagesStage(tasks=stage.tasks, repos=stage.repos, log_dir=stage.log_dir, **settings)


def _environments(stage: RolloutStage, tasks: list[Task], on_build: Callable[[object], None] | None) -> dict[str, str]:
    """instance_id -> what its sandbox starts from: a built image, or (local sandboxes) the repository mirror.
    A task left out gets an ``error`` trajectory that says why."""
    if environment_kind(stage.sampler.sandbox) == "image":
        outcomes = build_outcomes(tasks, image_config(rollout_images_stage(stage)), on_build)
        return {iid: o.image for iid, o in outcomes.items() if o.image and not o.error}
    from swerl.envs.repos import MirrorRepoSource, RepoNotFoundError

    if stage.grade:
        raise StageInputError("grading runs in Docker sandboxes of built images, and a local agent sandbox has none: "
                              "set grade to false, or use a docker sandbox")
    if stage.repos is None:
        raise StageInputError("a local sandbox copies each task's repository from the mirror folder: set repos")
    source, found = MirrorRepoSource(stage.repos), {}
    for t in tasks:
        try:
            found[t.instance_id] = str(source.locate(t.repo))
        except RepoNotFoundError:
            pass
    return found


def check_infra_failures(store: TrajectoryStore, tasks: list[Task], samples: int, bound: float) -> None:
    """Raise InfraFailureRate when more than ``bound`` of the ``tasks`` x ``samples`` pairs stored in
    ``store`` failed for infrastructure."""
    wanted = {t.instance_id for t in tasks}
    failed = {pair: why for pair, why in store.infra_failures().items() if pair[0] in wanted and pair[1] < samples}
    total = len(tasks) * samples
    if total and len(failed) / total > bound:
        (iid, sample), why = sorted(failed.items())[0]
        raise InfraFailureRate(
            f"{len(failed)} of {total} (task, sample) pairs ({len(failed) / total:.0%}) failed for infrastructure, over "
            f"the bound of {bound:.0%} (max_infra_failure_rate); e.g. {iid}/{sample}: {why[:300]}. Rerun the stage: it "
            "keeps the finished pairs and redoes only these.", failed=len(failed), total=total, bound=bound)


def stored_trajectories(store: Path, instance_ids: list[str] | None = None) -> list[Trajectory]:
    wanted = set(instance_ids) if instance_ids is not None else None
    return [t for t in TrajectoryStore(store).trajectories() if wanted is None or t.instance_id in wanted]


def run_eval(stage: RolloutStage, on_done: Callable[[Trajectory], None] | None = None,
             on_start: Callable[[int], None] | None = None,
             on_build: Callable[[object], None] | None = None) -> tuple[EvalReport, RolloutResult]:
    """Roll out ``samples`` runs per task (graded), then write ``out/eval.json``."""
    if not stage.grade:
        raise StageInputError("evaluation grades every trajectory: grade must be true")
    result = run_rollout(stage, on_done=on_done, on_start=on_start, on_build=on_build)
    try:
        report = build_report(stored_trajectories(result.store, result.tasks), stage.samples)
    except ValueError as e:
        raise StageInputError(f"{e} (trajectories in {result.store})") from e
    (stage.out / "eval.json").write_text(json.dumps(report.model_dump(), indent=2))
    return report, result
