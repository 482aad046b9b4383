"""Flow: Pass@1 (mean ± SEM over k runs) and Pass@k of one policy; may move `champion`."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from swerl.eval.report import pass_at_1_text
from swerl.orchestration.artifact_keys import artifact_key
from swerl.orchestration.follow import say
from swerl.orchestration.inputs import task_inputs
from swerl.orchestration.metrics import eval_metrics, prefixed
from swerl.orchestration.params import EvaluateParams
from swerl.orchestration.results import Evaluation
from swerl.orchestration.summary import plural, promotion_words
from tasks import tracking as tr
from tasks.rollout import evaluate_task


def _label(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name if "/" in model else model).strip("-") or "model"


# a scheduled run is named for the policy it scores (Prefect formats the name with the run's parameters)
@flow(name="evaluate", flow_run_name="evaluate-{params.policy}", log_prints=True, **HOOKS)
def evaluate(params: EvaluateParams = EvaluateParams()) -> Evaluation:
    """Pass@1 (mean ± SEM over k runs) and Pass@k of one policy, recorded in MLflow; may move `champion`.

    Args:
        params: The policy (a folder, a hub id or a registry alias), the tasks, k runs per task and the agent's limits.
    """
    # the deployed form: only what a user sets; a pipeline's wiring goes through evaluate_stage
    return evaluate_stage.fn(params)


@flow(name="evaluate", log_prints=True, **HOOKS)
def evaluate_stage(params: EvaluateParams = EvaluateParams(), parent_run_id: str | None = None, stage: str | None = None,
                   step: int | None = None, out: Path | None = None, container_label: str | None = None,
                   policy_version: str | None = None) -> Evaluation:
    """Evaluate ``params.policy`` on ``params.tasks``; record metrics in MLflow and a Prefect artifact.

    Standalone (a UI run, the nightly schedule) it writes ``OUT/<label>-<UTC time>-<flow run id>/``; in a
    pipeline it writes the stage's folder, logs into the stage's child run and returns what
    the pipeline tabulates.
    """
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from swerl.inference.factory import require_model

    tasks, repos = task_inputs(params.tasks, params.repos)
    model = params.policy
    policy = tr.resolve_policy(params.tracking, model)
    require_model(policy.path)  # before an MLflow run or a logged model exists for it
    label = stage or f"evaluate-{_label(model)}"
    from prefect.runtime import flow_run

    # one folder (and MLflow run) per standalone evaluation, e.g. each night's
    stamp = f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{str(flow_run.id or '')[:8]}".rstrip("-")
    folder = out or params.out / f"{_label(model)}-{stamp}"
    run_id = tr.stage_run(params.tracking, parent_run_id, label, standalone_id=f"evaluate {folder.name}",
                          params={"model": model, "checkpoint": policy.path, "runs": params.runs, "tasks": str(tasks)})
    model_id = tr.link_policy(params.tracking, run_id, policy.path, policy.registered_version)
    from flows.rollout import rollout_stage

    stage_cfg = rollout_stage(tasks=tasks, repos=repos, model=policy.path, out=folder, samples=params.runs, seed=params.seed,
                              policy_version=policy_version or policy.policy_version, sampler=params.sampler,
                              images=params.images, container_label=container_label)
    record = evaluate_task.with_options(timeout_seconds=params.sampler.chunk_timeout_s)(stage_cfg)
    report = record.report
    metrics = eval_metrics(report)
    digests = tr.log_lineage(params.tracking, run_id, tasks=tasks, tasks_name="eval-tasks", tasks_context="evaluation",
                             trajectories=record.store, trajectories_name=f"{label}-trajectories",
                             trajectories_context="evaluation", count=report.tasks * report.runs)
    # standalone (the nightly run): at the step the scored checkpoint was made, so it lands on the pipeline's curve
    at = step if step is not None else policy.step
    tr.log_evaluation(params.tracking, run_id, model_id, prefixed("eval", metrics), step=at,
                      dataset=("eval-tasks", digests.tasks), registered_version=policy.registered_version,
                      pass_at_1=report.pass_at_1)
    promoted, before = None, (None, None)
    if params.promote and policy.registered_version:
        before = tr.champion_state(params.tracking)
        promoted = tr.promote(params.tracking, policy.registered_version, report.pass_at_1, force=params.force_promote)
    champion = promotion_words(params.promote, policy.registered_version, report.pass_at_1, before, promoted,
                               params.force_promote)
    tr.finish_run(params.tracking, run_id, summary={"eval": report.model_dump(mode="json"), "checkpoint": policy.path, "promoted": promoted})
    rows = [{"k": int(k), "pass_at_k": round(v, 4)} for k, v in sorted(report.pass_at_k.items(), key=lambda kv: int(kv[0]))]
    create_table_artifact(key=artifact_key("eval", _label(label)), table=rows,
                          description=f"Pass@k of {model} on {tasks} ({report.runs} runs per task)")
    score = pass_at_1_text(report.pass_at_1, report.pass_at_1_sem, report.runs)
    create_markdown_artifact(
        key="evaluation", description="Latest evaluation",
        markdown=f"**{model}** (`{policy.path}`): Pass@1 = **{score}** "
                 f"over {report.runs} runs of {report.tasks} tasks; MLflow run `{run_id}`; {champion}")
    say(f"{label}: Pass@1 {score} ({plural(report.runs, 'run')} of {plural(report.tasks, 'task')}); {champion}")
    return Evaluation(report=report, metrics=metrics, run_id=run_id, out=folder, promoted=promoted, checkpoint=policy.path,
                      model_id=model_id)
