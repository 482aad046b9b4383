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
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows._hooks import HOOKS, container_label
from swerl.orchestration.artifact_keys import artifact_key
from flows.evaluate import evaluate_stage
from flows.train_iteration import train_iteration
from swerl.orchestration.follow import say
from swerl.orchestration.inputs import curriculum_inputs, task_inputs, tiny_model
from swerl.orchestration.ledger import Ledger
from swerl.orchestration.live_table import LiveTable
from swerl.orchestration.metrics import display_rows, prefixed, stage_row
from swerl.orchestration.params import EvaluateParams, PipelineParams
from swerl.orchestration.plan import StartStep, TrainStep, stage_plan
from swerl.orchestration.results import EvalResult, PolicyRef, StageResult
from swerl.orchestration.summary import (Behaviour, StageFacts, eval_facts, images_facts, pass_table, per_task_outcomes,
                                         rise_lines, sampler_words, stage_line, summary_lines, summary_markdown, train_facts,
                                         validation_facts, where_to_look)
from swerl.stages.images import ImagesStage
from tasks import tracking as tr
from tasks.images import build_images_task, validate_tasks_task


@task(name="prepare-inputs", cache_policy=NO_CACHE)
def prepare_inputs(params: PipelineParams) -> dict[str, Any]:
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
    return {"tasks": str(tasks), "eval_tasks": str(eval_tasks), "repos": str(repos) if repos else None,
            "warm_tasks": str(warm) if warm else None, "model": model, "reaped": len(reaped)}


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
def pipeline(params: PipelineParams = PipelineParams()) -> dict[str, Any]:
    """Images, task validation, RFT, then DAPO iterations, each evaluated; rerun the same name to resume.

    Args:
        params: The tasks, the starting model and every stage's settings; `name` names the run folder and MLflow run.
    """
    from swerl.stages.policy_server import policy_server

    inputs = prepare_inputs(params)
    if params.sampler.grade_cache is None:  # the stages share verdicts: a fix graded once is not graded again
        params = params.model_copy(update={"sampler": params.sampler.model_copy(update={"grade_cache": params.run_dir / "grades"})})
    # sampler.serve: one vLLM server for the whole run, on the starting policy; stopped at the end, on failure too
    with policy_server(params, inputs["model"], params.run_dir) as params:
        return _pipeline(params, inputs)


def _pipeline(params: PipelineParams, inputs: dict[str, Any]) -> dict[str, Any]:
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_progress_artifact
    from prefect.artifacts import update_progress_artifact

    run_dir = params.run_dir
    ledger = Ledger(run_dir)
    tasks, eval_tasks = Path(inputs["tasks"]), Path(inputs["eval_tasks"])
    repos = Path(inputs["repos"]) if inputs["repos"] else None
    label = container_label(params.name)
    parent = tr.pipeline_run(params.tracking, params.name, _flat(params))
    parent_id = parent["run_id"]
    if parent["url"]:
        create_link_artifact(key=artifact_key("mlflow", params.name), link=parent["url"], link_text=f"MLflow: pipeline {params.name}",
                             description="The pipeline's MLflow parent run")
    create_markdown_artifact(key=artifact_key("lineage", params.name), description="Where this pipeline's records are",
                             markdown=f"MLflow parent run `{parent_id}` (experiment {parent['experiment_id']}, tracking "
                                      f"`{params.tracking.tracking_uri or 'default'}`); run folder `{run_dir}`; "
                                      f"stage ledger `{ledger.path}`")

    stages = stage_plan(params)
    validating = bool(params.validate_runs and params.validate_sets)
    plan = ["images"] + (["validate"] if validating else []) + [s.name for s in stages]
    progress_id = create_progress_artifact(progress=100.0 * len([s for s in plan if ledger.get(s)]) / len(plan),
                                           key=artifact_key("progress", params.name), description=f"Stages of {params.name}")
    rows: list[dict[str, Any]] = []
    facts: list[StageFacts] = []

    def stage(name: str, body, explain=None, as_type=None):
        """Run ``body`` unless the ledger has the stage; then say in words what it did (``explain``: entry -> facts).
        ``as_type``: the result model the stage returns and the ledger reads back (None: a dict)."""
        done = ledger.get(name, as_type) if as_type else ledger.get(name)
        skipped = done is not None
        if done is None:
            if explain is not None:  # a stage a person hears about (not the start's registration)
                say(f"{name}: started")
            t0 = time.monotonic()
            done = body()
            if isinstance(done, dict):
                done["seconds"] = time.monotonic() - t0
            elif "seconds" in type(done).model_fields:
                done = done.model_copy(update={"seconds": time.monotonic() - t0})
            ledger.record(name, done)
        update_progress_artifact(progress_id, 100.0 * len([s for s in plan if ledger.get(s)]) / len(plan))
        if explain is not None:
            facts.append(explain(done))
            say(stage_line(facts[-1], done.get("seconds") if isinstance(done, dict) else done.seconds, skipped))
        elif skipped:
            say(f"{name}: finished in an earlier run, skipped")
        return done

    metrics_table = LiveTable(artifact_key("metrics", params.name),
                              f"Per-stage metrics of pipeline {params.name} (Pass@1 over {params.eval.runs} runs)")

    def table() -> None:
        metrics_table.show(display_rows(rows, params.eval.runs))

    # every task file the pipeline samples: training, held-out evaluation, warm-up
    sets = {"train": tasks}
    if eval_tasks != tasks:
        sets["eval"] = eval_tasks
    if params.warm_start is not None:
        sets["warm"] = Path(inputs["warm_tasks"])
    contexts = {"train": "training", "eval": "evaluation", "warm": "warm-up"}

    def images_body() -> dict[str, Any]:
        out = {}
        for key, path in sets.items():
            built = build_images_task(ImagesStage(tasks=path, repos=repos, ca_certs=params.ca_certs,
                                                  concurrency=params.sampler.concurrency,
                                                  manifest=run_dir / ("images.json" if key == "train" else f"images-{key}.json")),
                                      return_state=True)
            result = built.result()
            tr.log_lineage(params.tracking, parent_id, tasks=path, tasks_name="tasks" if key == "train" else f"{key}-tasks",
                           tasks_context=contexts[key], manifest=result.manifest if key == "train" else None)
            # a cache hit returns an earlier run's counts: then every image was reused
            out[key] = {"manifest": str(result.manifest), "ready": result.ready, "cached": result.cached,
                        "cache_hit": built.name == "Cached"}
        return out

    images = stage("images", images_body, lambda r: images_facts("images", r))
    warm_tasks = sets.get("warm")
    if validating:
        # the held-out set doubles as the training set when no separate one is given
        wanted = set(params.validate_sets) | ({"train"} if "eval" in params.validate_sets and "eval" not in sets else set())
        checked = {k: p for k, p in sets.items() if k in wanted}

        def validate_body() -> dict[str, Any]:
            out = {}
            for key, path in checked.items():
                suffix = "" if key == "train" else f"-{key}"
                report = validate_tasks_task(path, Path(images[key]["manifest"]), params.validate_runs,
                                             run_dir / f"validation{suffix}.json", params.sampler.concurrency,
                                             grading=params.sampler.grading)
                tr.log_metrics(params.tracking, parent_id, {f"tasks{suffix}/valid": float(report["valid"]),
                                                            f"tasks{suffix}/total": float(report["total"])})
                kept = keep_valid_tasks(path, run_dir / f"validation{suffix}.json", run_dir / f"tasks{suffix}.valid.jsonl")
                out[key] = {**report, "tasks": kept}
            return out

        valid = stage("validate", validate_body, lambda r: validation_facts("validate", r))
        if "train" in valid:
            tasks = Path(valid["train"]["tasks"])
        if "eval" in valid:
            eval_tasks = Path(valid["eval"]["tasks"])
        elif "eval" not in sets:
            eval_tasks = tasks
        if "warm" in valid:
            warm_tasks = Path(valid["warm"]["tasks"])

    policy = PolicyRef.of(inputs["model"], "0")

    def start_policy() -> PolicyRef:
        if not Path(policy.path).is_dir():
            return policy
        registered = tr.register_checkpoint(params.tracking, parent_id, Path(policy.path), name="start", policy_version="0", step=0)
        return PolicyRef.of(policy.path, "0", registered)

    def train_body(s: TrainStep, start: PolicyRef) -> StageResult:
        # one flow for every objective, its subflow runs named as before (`rft` for the warm start too)
        result = train_iteration.with_options(name=s.flow, flow_run_name=s.name)(
            s.objective, tasks=warm_tasks if s.task_set == "warm" else tasks, model=start.path, out=run_dir / s.name,
            repos=repos, policy_version=start.policy_version, sampler=params.sampler, seed=params.seed,
            tracking=params.tracking, parent_run_id=parent_id, step=s.step, container_label=label)
        if s.on_parent:
            tr.log_metrics(params.tracking, parent_id, result.metrics, step=s.step)
        return result

    def eval_body(name: str, step: int, pol: PolicyRef) -> EvalResult:
        if pol.registered_version:
            pol.check_registered(tr.resolve_policy(params.tracking, pol.model_arg())["path"], params.tracking.tracking_uri)
        result = evaluate_stage.with_options(flow_run_name=name)(
            EvaluateParams(model=pol.model_arg(), tasks=eval_tasks, repos=repos, runs=params.eval.runs, seed=params.seed,
                           sampler=params.sampler, tracking=params.tracking, promote=params.eval.promote),
            parent_run_id=parent_id, stage=name, step=step, out=run_dir / "eval" / name, container_label=label,
            policy_version=pol.policy_version)
        tr.log_metrics(params.tracking, parent_id, prefixed("eval", result["metrics"]), step=step)
        return EvalResult(metrics=prefixed("eval", result["metrics"]), run_id=result["run_id"], promoted=result["promoted"],
                          policy=pol)

    def explain_eval(name: str):
        return lambda r: eval_facts(name, r.model_dump(), behaviour_in(run_dir / "eval" / name / "trajectories"))

    def explain_training(name: str, engine: str, start: PolicyRef):
        sampler = sampler_words(engine, start.policy_version)
        # the training task measured the behaviour where it read the rollout; an older ledger's entry has none
        return lambda r: train_facts(name, r.model_dump(), sampler,
                                     r.behaviour or behaviour_in(run_dir / name / "rollout" / "trajectories"))

    trained: dict[str, StageResult] = {}
    for s in stages:  # the ledger skips every stage an earlier run finished
        if isinstance(s, StartStep):
            policy = stage(s.name, start_policy, as_type=PolicyRef)
        elif isinstance(s, TrainStep):
            done = stage(s.name, lambda s=s, start=policy: train_body(s, start), explain_training(s.name, s.engine, policy),
                         StageResult)
            if s.must_train and not done.trained:
                raise RuntimeError(f"the {s.name.replace('-', ' ')} trained nothing: {done.reason}")
            policy = done.policy if done.trained else policy  # carried forward: keep its registry version
            trained[s.name] = done
        else:
            evaluated = stage(s.name, lambda s=s, pol=policy: eval_body(s.name, s.step, pol), explain_eval(s.name), EvalResult)
            before = trained.get(s.after) if s.after else None
            metrics = ({**before.metrics, **evaluated.metrics, "train/trained": float(before.trained)} if before
                       else evaluated.metrics)
            rows.append(stage_row(s.row, s.step, policy.policy_version, metrics,
                                  evaluated.seconds + (before.seconds if before else 0.0)))
            table()

    curve = plot_curve(params.tracking, parent_id, rows, run_dir / "pass_at_1.png", f"pipeline {params.name}")
    where = where_to_look(run_dir, parent["url"] or parent_id, params.name)
    create_markdown_artifact(key=artifact_key("summary", params.name), description=f"What pipeline {params.name} did, in words",
                             markdown=summary_markdown(params.name, facts, where))
    story = summary_lines(params.name, facts, where)
    summary = {"name": params.name, "run_dir": str(run_dir), "mlflow_run_id": parent_id, "mlflow_url": parent["url"],
               "final_policy": policy.model_dump(), "stages": rows, "plot": curve, "summary": story}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    tr.finish_run(params.tracking, parent_id, summary=summary)
    for line in pass_table(rows) + rise_lines(per_task_outcomes(run_dir, [r["stage"] for r in rows])) + story:
        say(line)
    return summary


if __name__ == "__main__":
    pipeline()
