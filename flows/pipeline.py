"""Flow: the whole loop. Images, task validation, the starting policy's evaluation, RFT, then
N DAPO iterations, each stage evaluated; MLflow holds one parent run with a child per stage.

Resumable: ``RUN_ROOT/NAME/ledger.json`` records each finished stage, and a rerun with the
same name skips them; a stage cut short resumes inside (stored trajectories are not
resampled, training restarts from its newest step). Metrics on the parent run use the
iteration as their step: 0 the starting policy, 1 after RFT, 1 + k after DAPO iteration k.
The policy stages are a typed list (``swerl.orchestration.plan.stage_plan``) walked in one loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from flows._hooks import HOOKS, container_label
from swerl.orchestration.artifact_keys import artifact_key
from flows.evaluate import evaluate_stage
from flows.train_iteration import sample_iteration, train_iteration
from swerl.orchestration.background import in_background
from swerl.orchestration.follow import say
from swerl.orchestration.inputs import curriculum_inputs, task_inputs, tiny_model
from swerl.orchestration.ledger import Ledger
from swerl.orchestration.live_table import LiveTable
from swerl.orchestration.metrics import display_rows, prefixed, stage_row
from swerl.orchestration.params import EvaluateParams, PipelineParams
from swerl.orchestration.plan import EvalStep, StartStep, TrainStep, stage_plan
from swerl.orchestration.results import (EvalResult, ImageSet, ImagesOutcome, PipelineInputs, PipelineSummary, PolicyRef,
                                         SampledIteration, StageResult, TrackedRun, ValidatedSet, ValidationOutcome)
from swerl.orchestration.summary import (Behaviour, StageFacts, eval_facts, images_facts, pass_table, per_task_outcomes,
                                         rise_lines, sampler_words, stage_line, summary_lines, summary_markdown, train_facts,
                                         validation_facts, where_to_look)
from swerl.envs.images import ImageSettings
from swerl.grading.validate import ValidationSettings
from swerl.stages.config import part
from swerl.rollout.policy_feed import announce
from swerl.stages.images import ImagesStage
from tasks import tracking as tr
from tasks.images import build_images_task, validate_tasks_task


M = TypeVar("M", bound=BaseModel)


@task(name="prepare-inputs", cache_policy=NO_CACHE)
def prepare_inputs(params: PipelineParams) -> PipelineInputs:
    """Task files, mirror and starting model; the embedded default materialises the demo and the tiny model."""
    from swerl.envs.docker_hosts import hosts_in
    from swerl.envs.docker_sandbox import reap_containers
    from swerl.inference.factory import require_model

    if params.model:
        require_model(params.model)  # before minutes of image builds, not at the first rollout
    run_dir = params.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    warm = None
    if params.curriculum is not None:
        generated = curriculum_inputs(run_dir / "curriculum", params.curriculum)
        tasks, repos, eval_tasks, warm = generated["train"], generated["repos"], generated["heldout"], generated["warmup"]
    else:
        tasks, repos = task_inputs(params.tasks, params.repos, demo_dir=run_dir / "demo")
        eval_tasks = params.eval_tasks or tasks
    if params.warm_start is not None and params.warm_start.tasks is not None:
        warm = params.warm_start.tasks
    # The warm-up tasks' text joins the tiny tokenizer's corpus (its identifiers get whole tokens).
    model = params.model or str(tiny_model(run_dir / "start-model", params.tiny_model, corpus_tasks=warm))
    # sandboxes whose owner died (a killed earlier attempt) go before new ones start, on every host of the run
    reaped = reap_containers(hosts=hosts_in(params))
    history = run_dir / "params.jsonl"
    with history.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"time": time.time(), "params": params.model_dump(mode="json")}) + "\n")
    return PipelineInputs(tasks=tasks, eval_tasks=eval_tasks, repos=repos, warm_tasks=warm, model=model, reaped=len(reaped))


@task(name="plot-pass-at-1", cache_policy=NO_CACHE)
def plot_curve(tracking, run_id: str, rows: list[dict[str, Any]], out: Path, title: str) -> str | None:
    """Pass@1 per stage as a PNG in the run folder, logged to the parent MLflow run."""
    from swerl.orchestration.plot import plot_pass_at_1
    from tasks.common import tracker

    path = plot_pass_at_1(rows, out, title)
    if path is not None:
        tracker(tracking).log_artifact(run_id, path, "plots")
    return str(path) if path else None


@task(name="keep-valid-tasks", cache_policy=NO_CACHE)
def keep_valid_tasks(tasks: Path, report: Path, out: Path) -> str:
    """The task file without the tasks validation rejected (one broken task does not stop the run), each
    kept task carrying the statuses its gold patch had (``gold_statuses``: what grading holds an XFAIL or
    a skip against). Any task file format in, JSONL out."""
    from swerl.data.loaders import load_tasks, save_tasks

    verdicts = {v["instance_id"]: v for v in json.loads(Path(report).read_text(encoding="utf-8"))["tasks"]}
    kept = [t.model_copy(update={"gold_statuses": verdicts[t.instance_id].get("gold_statuses") or t.gold_statuses})
            for t in load_tasks(tasks).tasks if verdicts.get(t.instance_id, {}).get("valid")]
    if not kept:
        raise ValueError(f"every task in {tasks} failed validation; see the validation report {report}")
    save_tasks(kept, out)
    return str(out)


def _flat(params: PipelineParams) -> dict[str, Any]:
    """The parameters as flat MLflow params (nested keys joined with dots)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", params.model_dump(mode="json", exclude={"tracking"}))
    return out


@task(name="read-behaviour", cache_policy=NO_CACHE)
def behaviour_in(store: Path) -> Behaviour | None:
    """What the policy did in a stage's stored trajectories (None when the stage stored none)."""
    from swerl.orchestration.summary import behaviour_of
    from swerl.stages.rollout import stored_trajectories

    return behaviour_of(stored_trajectories(store)) if Path(store).is_dir() else None


def _run_name() -> str:
    """``pipeline-<name>``, also for a deployment's run (Prefect names those at random)."""
    from prefect.runtime import flow_run

    p = (flow_run.parameters or {}).get("params") or {}
    return (PipelineParams.model_validate(p) if isinstance(p, dict) else p).run_name


@flow(name="pipeline", flow_run_name=_run_name, log_prints=True, **HOOKS)
def pipeline(params: PipelineParams = PipelineParams()) -> PipelineSummary:
    """Images, task validation, RFT, then DAPO iterations, each evaluated; rerun the same name to resume.

    Args:
        params: The tasks, the starting model and every stage's settings; `name` names the run folder and MLflow run.
    """
    from swerl.stages.policy_server import policy_server

    inputs = prepare_inputs(params)
    if params.sampler.grade_cache is None:  # the stages share verdicts: a fix graded once is not graded again
        params = params.model_copy(update={"sampler": params.sampler.model_copy(update={"grade_cache": params.run_dir / "grades"})})
    # sampler.serve: one vLLM server for the whole run, on the starting policy; stopped at the end, on failure too
    with policy_server(params, inputs.model, params.run_dir) as params:
        return _pipeline(params, inputs)


def _pipeline(params: PipelineParams, inputs: PipelineInputs) -> PipelineSummary:
    """The stages in order, each skipped when the ledger has it: images, validation, then the policy stages."""
    run = PipelineRun.open(params, inputs)
    images = run.stage("images", ImagesOutcome, run.build_images, lambda r: images_facts("images", r.model_dump()))
    sets = run.task_sets(images)
    policy = PolicyRef.of(inputs.model, "0")
    trained: dict[str, StageResult] = {}
    try:
        for s in run.stages:  # the ledger skips every stage an earlier run finished
            if isinstance(s, StartStep):
                policy = run.stage(s.name, PolicyRef, lambda: run.register_start(policy))
            elif isinstance(s, TrainStep):
                done = run.stage(s.name, StageResult, lambda s=s, start=policy: run.train(s, start, sets),
                                 run.explain_training(s, policy))
                if s.must_train and not done.trained:
                    raise RuntimeError(f"the {s.name.replace('-', ' ')} trained nothing: {done.reason}")
                policy = done.policy if done.trained else policy  # carried forward: keep its registry version
                trained[s.name] = done
            else:
                evaluated = run.stage(s.name, EvalResult, lambda s=s, pol=policy: run.evaluate(s, pol, sets),
                                      run.explain_eval(s.name))
                run.add_row(s, policy, evaluated, trained.get(s.after) if s.after else None)
    except BaseException:
        run.settle_ahead()  # an asynchronous run's rollouts beside the failed stage
        raise
    return run.finish(policy)


class PipelineRun:
    """One pipeline run's shared state: its ledger, MLflow parent run, Prefect artifacts, table and story."""

    def __init__(self, params: PipelineParams, inputs: PipelineInputs, parent: TrackedRun):
        self.params, self.inputs, self.parent = params, inputs, parent
        self.progress_id: Any = None  # the Prefect progress artifact, made by ``open``
        self.run_dir = params.run_dir
        self.ledger = Ledger(self.run_dir)
        self.label = container_label(params.name)
        self.stages = stage_plan(params)
        self.validating = bool(params.validate_runs and params.validate_sets)
        # dapo.off_policy.max_staleness > 0: iteration k+1 samples while iteration k trains
        self.overlap = params.dapo.off_policy.max_staleness > 0
        self.feed = self.run_dir / "policies.jsonl"
        self.ahead: dict[str, Future[SampledIteration]] = {}
        self.plan = ["images"] + (["validate"] if self.validating else []) + [
            name for s in self.stages for name in ([f"{s.name}-rollout"] if self.overlapped(s) else []) + [s.name]]
        self.rows: list[dict[str, Any]] = []
        self.facts: list[StageFacts] = []
        self.table = LiveTable(artifact_key("metrics", params.name),
                               f"Per-stage metrics of pipeline {params.name} (Pass@1 over {params.eval.runs} runs)")

    @classmethod
    def open(cls, params: PipelineParams, inputs: PipelineInputs) -> PipelineRun:
        """The run's MLflow parent run and its Prefect artifacts: where its records are, its progress."""
        from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_progress_artifact

        parent = tr.pipeline_run(params.tracking, params.name, _flat(params))
        if parent.url:
            create_link_artifact(key=artifact_key("mlflow", params.name), link=parent.url,
                                 link_text=f"MLflow: pipeline {params.name}", description="The pipeline's MLflow parent run")
        run = cls(params, inputs, parent)
        create_markdown_artifact(key=artifact_key("lineage", params.name), description="Where this pipeline's records are",
                                 markdown=f"MLflow parent run `{parent.run_id}` (experiment {parent.experiment_id}, tracking "
                                          f"`{params.tracking.tracking_uri or 'default'}`); run folder `{params.run_dir}`; "
                                          f"stage ledger `{run.ledger.path}`")
        run.progress_id = create_progress_artifact(progress=run.progress(), key=artifact_key("progress", params.name),
                                                   description=f"Stages of {params.name}")
        return run

    def progress(self) -> float:
        return 100.0 * len([s for s in self.plan if self.ledger.get(s)]) / len(self.plan)

    def stage(self, name: str, as_type: type[M], body: Callable[[], M], explain: Callable[[M], StageFacts] | None = None) -> M:
        """Run ``body`` unless the ledger has the stage; then say in words what it did (``explain``: result -> facts).
        ``as_type``: the result model the stage returns and the ledger reads back."""
        from prefect.artifacts import update_progress_artifact

        done = self.ledger.get(name, as_type)
        skipped = done is not None
        if done is None:
            if explain is not None:  # a stage a person hears about (not the start's registration)
                say(f"{name}: started")
            t0 = time.monotonic()
            done = body()
            if "seconds" in type(done).model_fields:
                done = done.model_copy(update={"seconds": time.monotonic() - t0})
            self.ledger.record(name, done)
        update_progress_artifact(self.progress_id, self.progress())
        if explain is not None:
            self.facts.append(explain(done))
            say(stage_line(self.facts[-1], done.seconds, skipped))
        elif skipped:
            say(f"{name}: finished in an earlier run, skipped")
        return done

    def sampled_sets(self) -> dict[str, Path]:
        """Every task file the pipeline samples: training, held-out evaluation (when apart), warm-up."""
        sets = {"train": self.inputs.tasks}
        if self.inputs.eval_tasks != self.inputs.tasks:
            sets["eval"] = self.inputs.eval_tasks
        if self.params.warm_start is not None:
            sets["warm"] = self.inputs.warm_tasks
        return sets

    @property
    def rollout_images(self) -> ImageSettings:
        """The image settings of every rollout the pipeline runs: the images stage's (the same CA certificates and
        base images, hence the same tags: a rollout finds the images that stage built), without ``force`` (that stage
        rebuilt them already; a rollout would rebuild them at each chunk)."""
        return self.params.images.model_copy(update={"force": False})

    def build_images(self) -> ImagesOutcome:
        contexts = {"train": "training", "eval": "evaluation", "warm": "warm-up"}
        out = {}
        for key, path in self.sampled_sets().items():
            manifest = self.run_dir / ("images.json" if key == "train" else f"images-{key}.json")
            built = build_images_task(ImagesStage(tasks=path, repos=self.inputs.repos, manifest=manifest,
                                                  **dict(self.params.images)),
                                      return_state=True)
            result = built.result()
            tr.log_lineage(self.params.tracking, self.parent.run_id, tasks=path,
                           tasks_name="tasks" if key == "train" else f"{key}-tasks", tasks_context=contexts[key],
                           manifest=result.manifest if key == "train" else None)
            # a cache hit returns an earlier run's counts: then every image was reused
            out[key] = ImageSet(manifest=result.manifest, ready=result.ready, cached=result.cached,
                                cache_hit=built.name == "Cached")
        return ImagesOutcome(**out)

    def task_sets(self, images: ImagesOutcome) -> PipelineInputs:
        """The inputs the policy stages sample, each task file validated replaced by its valid tasks."""
        if not self.validating:
            return self.inputs
        sets = self.sampled_sets()
        valid = self.stage("validate", ValidationOutcome, lambda: self.validate(sets, images),
                           lambda r: validation_facts("validate", r.model_dump()))
        kept = {key: v.tasks for key in ("train", "eval", "warm") if (v := getattr(valid, key)) is not None}
        inputs = self.inputs
        tasks = kept.get("train", inputs.tasks)
        # the held-out set doubles as the training set when no separate one is given
        return inputs.model_copy(update={"tasks": tasks, "eval_tasks": kept.get("eval", tasks if "eval" not in sets
                                                                                 else inputs.eval_tasks),
                                         "warm_tasks": kept.get("warm", inputs.warm_tasks)})

    def validate(self, sets: dict[str, Path], images: ImagesOutcome) -> ValidationOutcome:
        wanted = set(self.params.validate_sets) | (
            {"train"} if "eval" in self.params.validate_sets and "eval" not in sets else set())
        out = {}
        for key, path in sets.items():
            if key not in wanted:
                continue
            suffix = "" if key == "train" else f"-{key}"
            report = self.run_dir / f"validation{suffix}.json"
            summary = validate_tasks_task(path, getattr(images, key).manifest, part(self.params, ValidationSettings), report,
                                          grading=self.params.sampler.grading)
            tr.log_metrics(self.params.tracking, self.parent.run_id, {f"tasks{suffix}/valid": float(summary.valid),
                                                                      f"tasks{suffix}/total": float(summary.total)})
            kept = keep_valid_tasks(path, report, self.run_dir / f"tasks{suffix}.valid.jsonl")
            out[key] = ValidatedSet(**dict(summary), tasks=kept)
        return ValidationOutcome(**out)

    def register_start(self, policy: PolicyRef) -> PolicyRef:
        """The starting policy in the registry (a folder; a hub name stays as it is)."""
        if not Path(policy.path).is_dir():
            return policy
        registered = tr.register_checkpoint(self.params.tracking, self.parent.run_id, Path(policy.path), name="start",
                                            policy_version="0", step=0)
        return PolicyRef.of(policy.path, "0", registered)

    def train(self, s: TrainStep, start: PolicyRef, sets: PipelineInputs) -> StageResult:
        t0 = time.monotonic()
        sampled = self.sampled(s, start, sets)  # None: the iteration samples itself (synchronous)
        waited = time.monotonic() - t0
        self.sample_ahead(s, start, sets)  # a failure from here on settles it (``_pipeline``)
        # one flow for every objective, its subflow runs named as before (`rft` for the warm start too)
        result = train_iteration.with_options(name=s.flow, flow_run_name=s.name)(
            s.objective, tasks=sets.warm_tasks if s.task_set == "warm" else sets.tasks, model=start.path,
            out=self.run_dir / s.name, repos=sets.repos, policy_version=start.policy_version, sampler=self.params.sampler,
            images=self.rollout_images, seed=self.params.seed, tracking=self.params.tracking,
            parent_run_id=self.parent.run_id, step=s.step, container_label=self.label, sampled=sampled,
            waited_s=waited if sampled is not None else None)
        if self.overlap and result.trained:  # the rollout running beside it loads the new policy
            announce(self.feed, result.policy.policy_version, Path(result.policy.path))
        if s.on_parent:
            tr.log_metrics(self.params.tracking, self.parent.run_id, result.metrics, step=s.step)
        return result

    def overlapped(self, s: object) -> bool:
        """Whether ``s`` is a DAPO iteration whose rollouts may run beside the update before it (max_staleness > 0)."""
        return self.overlap and isinstance(s, TrainStep) and s.flow == "dapo_iteration"

    def _dapo_after(self, s: TrainStep) -> TrainStep | None:
        return next((t for t in self.stages[self.stages.index(s) + 1:] if self.overlapped(t)), None)

    def sampled(self, s: TrainStep, start: PolicyRef, sets: PipelineInputs) -> SampledIteration | None:
        """An asynchronous DAPO iteration's rollouts: sampled beside the previous update (waited for here), or
        recorded by an earlier attempt, or sampled now from ``start``, following the feed."""
        if not self.overlapped(s):
            return None
        if s.name in self.ahead:
            return self.ahead.pop(s.name).result()
        return self.sample(s, start, sets, trains_from=start.policy_version)

    def sample(self, s: TrainStep, policy: PolicyRef, sets: PipelineInputs, trains_from: str) -> SampledIteration:
        name = f"{s.name}-rollout"
        return self.stage(name, SampledIteration, lambda: sample_iteration.with_options(flow_run_name=name)(
            s.objective, tasks=sets.tasks, model=policy.path, out=self.run_dir / s.name, repos=sets.repos,
            policy_version=policy.policy_version, sampler=self.params.sampler, images=self.rollout_images,
            seed=self.params.seed, tracking=self.params.tracking, parent_run_id=self.parent.run_id,
            container_label=self.label, follow=self.feed, trains_from=trains_from))

    def sample_ahead(self, s: TrainStep, start: PolicyRef, sets: PipelineInputs) -> None:
        """While DAPO iteration k trains, iteration k+1 samples the newest policy there is (k's start), loading k's
        checkpoint when it lands: its data is one version behind the update that trains on it."""
        after = self._dapo_after(s) if self.overlapped(s) else None
        if after is None or self.ledger.get(after.name) is not None:
            return
        say(f"{after.name}: sampling {start.policy_version} beside {s.name}'s update (max_staleness "
            f"{self.params.dapo.off_policy.max_staleness})")
        self.ahead[after.name] = in_background(
            lambda: self.sample(after, start, sets, trains_from=s.objective.new_version), name=f"{after.name}-rollout")

    def settle_ahead(self) -> None:
        """After a failure: let the rollouts beside it end (their finished trajectories are kept for the rerun)."""
        for name, future in self.ahead.items():
            say(f"{name}: waiting for its rollouts beside the failed stage to end (a rerun keeps what they stored)")
            try:
                future.result()
            except BaseException as e:  # the stage that failed first is the one to report
                say(f"{name}: its rollouts ended with {type(e).__name__}: {e}")
        self.ahead.clear()

    def evaluate(self, s: EvalStep, policy: PolicyRef, sets: PipelineInputs) -> EvalResult:
        params = self.params
        if policy.registered_version:
            policy.check_registered(tr.resolve_policy(params.tracking, policy.model_arg()).path, params.tracking.tracking_uri)
        result = evaluate_stage.with_options(flow_run_name=s.name)(
            EvaluateParams(model=policy.model_arg(), tasks=sets.eval_tasks, repos=sets.repos, runs=params.eval.runs, seed=params.seed,
                           sampler=params.sampler, images=self.rollout_images, tracking=params.tracking,
                           promote=params.eval.promote),
            parent_run_id=self.parent.run_id, stage=s.name, step=s.step, out=self.run_dir / "eval" / s.name,
            container_label=self.label, policy_version=policy.policy_version)
        metrics = prefixed("eval", result.metrics)
        tr.log_metrics(params.tracking, self.parent.run_id, metrics, step=s.step)
        return EvalResult(metrics=metrics, run_id=result.run_id, promoted=result.promoted, policy=policy)

    def explain_eval(self, name: str) -> Callable[[EvalResult], StageFacts]:
        return lambda r: eval_facts(name, r.model_dump(), behaviour_in(self.run_dir / "eval" / name / "trajectories"))

    def explain_training(self, s: TrainStep, start: PolicyRef) -> Callable[[StageResult], StageFacts]:
        # the training task measured the behaviour where it read the rollout; an older ledger's entry has none
        return lambda r: train_facts(s.name, r.model_dump(), sampler_words(s.engine, start.policy_version, r.sampled_by),
                                     r.behaviour or behaviour_in(self.run_dir / s.name / "rollout" / "trajectories"))

    def add_row(self, s: EvalStep, policy: PolicyRef, evaluated: EvalResult, before: StageResult | None) -> None:
        """The evaluation's row of the table, with the figures of the training it follows."""
        metrics = ({**before.metrics, **evaluated.metrics, "train/trained": float(before.trained)} if before
                   else evaluated.metrics)
        self.rows.append(stage_row(s.row, s.step, policy.policy_version, metrics,
                                   evaluated.seconds + (before.seconds if before else 0.0)))
        self.table.show(display_rows(self.rows, self.params.eval.runs))

    def finish(self, policy: PolicyRef) -> PipelineSummary:
        """The curve, the story in words, ``summary.json``; the parent MLflow run ends."""
        from prefect.artifacts import create_markdown_artifact

        name, run_dir = self.params.name, self.run_dir
        curve = plot_curve(self.params.tracking, self.parent.run_id, self.rows, run_dir / "pass_at_1.png", f"pipeline {name}")
        where = where_to_look(run_dir, self.parent.url or self.parent.run_id, name)
        create_markdown_artifact(key=artifact_key("summary", name), description=f"What pipeline {name} did, in words",
                                 markdown=summary_markdown(name, self.facts, where))
        story = summary_lines(name, self.facts, where)
        summary = PipelineSummary(name=name, run_dir=run_dir, mlflow_run_id=self.parent.run_id, mlflow_url=self.parent.url,
                                  final_policy=policy, stages=self.rows, plot=curve, summary=story)
        (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
        tr.finish_run(self.params.tracking, self.parent.run_id, summary=summary.model_dump(mode="json"))
        for line in pass_table(self.rows) + rise_lines(per_task_outcomes(run_dir, [r["stage"] for r in self.rows])) + story:
            say(line)
        return summary


if __name__ == "__main__":
    pipeline()
