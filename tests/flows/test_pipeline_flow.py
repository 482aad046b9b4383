"""The pipeline flow end to end, against a real Prefect API, MLflow on SQLite and Docker.

One pipeline (3 demo tasks, the tiny model) is started in a process of its own and killed
with SIGKILL in the middle of DAPO iteration 1's rollouts, then rerun in this process to
the end, then rerun once more. The test asserts what each of those must leave behind:
finished work is never redone, MLflow holds exactly one run per stage, no container leaks,
and the records (metrics per iteration, registered versions and aliases, dataset inputs,
Prefect artifacts) are all there.

The tiny model solves nothing, so the DAPO updates would see equal rewards in every group
and carry the policy forward. An external grader's rewards (``dapo.rewards_file``: sample 0
of each task scores 1, sample 1 scores 0) give every group a nonzero advantage, so each
iteration takes a real clipped policy-gradient step on the tiny model's own trajectories.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.support.killed_pipeline import parts, run_until, tiny_dapo_pipeline

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = f"e2e-{uuid.uuid4().hex[:8]}"  # its sandboxes' label: unique, as other work shares the daemon
STAGES = ["images", "validate", "start-policy", "eval-start", "rft", "eval-rft", "iter-1", "eval-iter-1", "iter-2", "eval-iter-2"]
CHILD_RUNS = ["eval-start", "rft", "eval-rft", "iter-1", "eval-iter-1", "iter-2", "eval-iter-2"]


def _params(tmp: Path, tasks: Path, repos: Path):
    return tiny_dapo_pipeline(NAME, tmp, tasks, repos, "e2e", validate_runs=1,
                              rft={"train": {"optimizer": {"lr_schedule": "cosine"}}}, dapo={"train": {"batch_size": 6}},
                              eval={"runs": 2})


@pytest.fixture(scope="module")
def e2e(prefect_api, docker_ready, demo, task_slice, tmp_path_factory):
    """Kill the pipeline mid-iteration, rerun it to the end, then rerun it again."""
    from flows._hooks import container_label
    from flows.pipeline import pipeline
    from swerl.orchestration.ledger import Ledger

    tmp = tmp_path_factory.mktemp("e2e")
    params = _params(tmp, task_slice, demo.repos_dir)
    run_dir = params.run_dir
    store = run_dir / "iter-1" / "rollout" / "trajectories"
    log = run_until(tmp, params, prefect_api, lambda: bool(parts(store)), timeout_s=900)
    assert parts(store), f"the killed run never reached iteration 1's rollouts; see {log}"
    killed = {"parts": parts(store), "ledger": Ledger(run_dir).finished()}

    state = pipeline(params, return_state=True)
    assert state.is_completed(), state
    resumed = {"summary": state.result(), "flow_run_id": str(state.state_details.flow_run_id),
               "parts": parts(store), "ledger": json.loads((run_dir / "ledger.json").read_text()),
               "containers": container_label(NAME)}
    again = pipeline(params, return_state=True)
    assert again.is_completed(), again
    return {"params": params, "killed": killed, "resumed": resumed, "again": again,
            "ledger_after_again": json.loads((run_dir / "ledger.json").read_text()), "store": store}


@pytest.fixture(scope="module")
def mlflow_client(e2e):
    from mlflow import MlflowClient

    return MlflowClient(e2e["params"].tracking.tracking_uri)


def _runs(client, experiment="e2e"):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=1000)


def _parent(runs):
    found = [r for r in runs if r.data.tags.get("swerl.pipeline_id") == NAME and r.data.tags.get("swerl.kind") == "pipeline"]
    assert len(found) == 1, [r.info.run_name for r in found]
    return found[0]


def test_the_kill_landed_mid_iteration_and_the_rerun_redid_no_finished_rollout(e2e):
    killed, resumed = e2e["killed"], e2e["resumed"]
    assert killed["ledger"] == STAGES[:6]
    assert 1 <= len(killed["parts"]) < 6
    for name, data in killed["parts"].items():
        assert resumed["parts"][name] == data, f"{name} was rewritten"
    assert len(resumed["parts"]) == 6  # 3 tasks x 2 samples, each stored once


def test_every_stage_is_recorded_once_and_a_second_rerun_skips_them_all(e2e):
    assert list(e2e["resumed"]["ledger"]) == STAGES
    assert e2e["ledger_after_again"] == e2e["resumed"]["ledger"]
    assert parts(e2e["store"]) == e2e["resumed"]["parts"]


def test_no_container_outlives_the_pipeline(e2e):
    from swerl.envs.docker_sandbox import running_containers

    assert running_containers(e2e["resumed"]["containers"]) == []


def test_mlflow_has_one_parent_and_one_child_run_per_stage_tied_to_prefect(e2e, mlflow_client):
    runs = _runs(mlflow_client)
    parent = _parent(runs)
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["swerl.stage"] for r in children) == sorted(CHILD_RUNS)
    assert all(r.info.status == "FINISHED" for r in children)
    # the curve of Pass@1 per stage, as a PNG in the run folder and on the parent run
    assert Path(e2e["resumed"]["summary"].plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [a.path for a in mlflow_client.list_artifacts(parent.info.run_id, "plots")] == ["plots/pass_at_1.png"]
    # the last flow run that touched the parent is the second rerun
    assert parent.data.tags["prefect.flow_run_id"] == str(e2e["again"].state_details.flow_run_id)
    assert parent.data.tags["prefect.flow_name"] == "pipeline"


def test_per_iteration_metrics_are_logged_once_per_step(e2e, mlflow_client):
    parent = _parent(_runs(mlflow_client))
    history = mlflow_client.get_metric_history(parent.info.run_id, "eval/pass_at_1")
    assert sorted(m.step for m in history) == [0, 1, 2, 3]
    for key in ("eval/pass_at_1_sem", "eval/pass_at_2", "eval/turns_mean"):
        assert sorted(m.step for m in mlflow_client.get_metric_history(parent.info.run_id, key)) == [0, 1, 2, 3], key
    for key in ("rollout/mean_reward", "rollout/solved_fraction", "rollout/groups_dropped_fraction", "rollout/turns_mean",
                "rollout/tokens_per_s", "train/trained"):
        assert sorted(m.step for m in mlflow_client.get_metric_history(parent.info.run_id, key)) == [1, 2, 3], key
    for key in ("train/loss", "train/entropy", "train/tokens_per_s", "train/steps"):
        assert sorted(m.step for m in mlflow_client.get_metric_history(parent.info.run_id, key)) == [1, 2, 3], key
    for key in ("train/clip_frac_low", "train/clip_frac_high", "train/approx_kl", "data/kept_fraction", "data/reward_mean"):
        assert sorted(m.step for m in mlflow_client.get_metric_history(parent.info.run_id, key)) == [2, 3], key
    dapo = {m.step: m.value for m in mlflow_client.get_metric_history(parent.info.run_id, "train/trained")}
    assert dapo == {1: 1.0, 2: 1.0, 3: 1.0}  # RFT on the scripted demonstrations, two real DAPO updates
    kept = {m.step: m.value for m in mlflow_client.get_metric_history(parent.info.run_id, "data/kept_fraction")}
    assert kept == {2: 1.0, 3: 1.0}  # every group has a 1 and a 0: no sample has zero advantage
    # counts per failure class of the graded rollouts add up to the trajectories
    iter1 = next(r for r in _runs(mlflow_client) if r.data.tags.get("swerl.stage") == "iter-1")
    failures = sum(v for k, v in iter1.data.metrics.items() if k.startswith("rollout/failure_"))
    assert failures == iter1.data.metrics["rollout/trajectories"] == 6
    # what the plain swebench reading of the same logs resolved and swerl's layers did not, by failure class
    for run in (r for r in _runs(mlflow_client) if str(r.data.tags.get("swerl.stage", "")).startswith("iter-")):
        refused = run.data.metrics["grading/refused_by_layers"]
        by_class = sum(v for k, v in run.data.metrics.items() if k.startswith("grading/refused_by_layers_"))
        assert refused == by_class and "grading/tamper_flags" in run.data.metrics, run.data.tags
    assert iter1.data.metrics["grading/refused_by_layers"] == 0  # the scripted demonstrations are real fixes


def test_checkpoints_are_registered_with_candidate_and_champion_aliases(e2e, mlflow_client):
    name = e2e["params"].tracking.registered_model
    versions = {mv.tags["swerl.policy_version"]: mv for mv in mlflow_client.search_model_versions(f"name='{name}'")}
    assert sorted(versions) == ["0", "dapo-1", "dapo-2", "rft"]
    candidate = mlflow_client.get_model_version_by_alias(name, "candidate")
    assert candidate.tags["swerl.policy_version"] == "dapo-2"
    champion = mlflow_client.get_model_version_by_alias(name, "champion")
    best = max(float(mv.tags["swerl.pass_at_1"]) for mv in versions.values())
    assert float(champion.tags["swerl.pass_at_1"]) == best
    final = e2e["resumed"]["summary"].final_policy
    assert Path(candidate.tags["swerl.checkpoint_path"]) == Path(final.path).resolve()
    # no copy of the weights by default: the logged model points at the checkpoint folder
    model = mlflow_client.get_logged_model(candidate.tags["swerl.model_id"])
    assert mlflow_client.list_logged_model_artifacts(model.model_id) == []


def test_lineage_links_task_set_images_and_trajectories(e2e, mlflow_client):
    from swerl.stages.images import load_task_file
    from swerl.tracking.lineage import file_digest, tasks_digest, tree_digest

    params = e2e["params"]
    runs = _runs(mlflow_client)
    parent = _parent(runs)
    inputs = {d.dataset.name: d for d in parent.inputs.dataset_inputs}
    assert inputs["tasks"].dataset.digest == tasks_digest(load_task_file(params.tasks))[:36]
    assert inputs["images"].dataset.digest == file_digest(params.run_dir / "images.json")[:36]
    iter1 = next(r for r in runs if r.data.tags.get("swerl.stage") == "iter-1")
    traj = {d.dataset.name: d for d in iter1.inputs.dataset_inputs}["iter-1-trajectories"]
    assert traj.dataset.digest == tree_digest(e2e["store"], "*.parquet")[:36]
    assert {t.key: t.value for t in traj.tags}["mlflow.data.context"] == "training"


def test_prefect_artifacts_hold_the_metric_table_progress_and_lineage(e2e, prefect_api):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def latest(key):
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            return sorted(found, key=lambda a: a.created)[-1]

    async def of_run(key, flow_run_id):
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            return [a for a in found if str(a.flow_run_id) == flow_run_id]

    table = asyncio.run(latest(f"metrics-{NAME}"))
    # one table per flow run, updated in place as each stage ends (not one card per stage)
    assert [a.id for a in asyncio.run(of_run(f"metrics-{NAME}", str(e2e["again"].state_details.flow_run_id)))] == [table.id]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert [r["stage"] for r in rows] == ["start", "rft", "iter-1", "iter-2"]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(re.fullmatch(r"\d+\.\d% ± \d+\.\d%", r["Pass@1"]) for r in rows), rows
    # every row has the same eight columns (the UI shows the first row's): the start's training cells are empty
    assert all(list(r) == ["stage", "step", "policy", "Pass@1", "reward", "solved", "trained", "time"] for r in rows)
    assert (rows[0]["trained"], rows[1]["trained"]) == ("", "yes")
    summary = asyncio.run(latest(f"summary-{NAME}"))
    from tests.support.markdown_render import rendered

    assert rendered(summary.data)[1] == []  # nothing in it a Markdown renderer would take for HTML
    assert summary.data.startswith(f"# Pipeline {NAME}\n\n| stage | what happened |\n|---|---|\n| images | ")
    assert [line.split(" | ")[0] for line in summary.data.splitlines() if line.startswith("| ") and " | " in line][1:] == \
        ["| images", "| validate", "| eval-start", "| rft", "| eval-rft", "| iter-1", "| eval-iter-1", "| iter-2", "| eval-iter-2"]
    assert "## Verdict\n\n- Pass@1 per stage: start " in summary.data
    progress = asyncio.run(latest(f"progress-{NAME}"))
    assert float(progress.data) == 100.0
    lineage = asyncio.run(latest(f"lineage-{NAME}"))
    assert "MLflow parent run" in lineage.data


def test_the_pipeline_and_its_subflow_runs_are_named_by_stage(e2e, prefect_api):
    import asyncio
    import uuid

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort

    async def names():
        async with get_client() as client:
            root = await client.read_flow_run(uuid.UUID(e2e["resumed"]["flow_run_id"]))
            children = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[root.id])),
                sort=FlowRunSort.START_TIME_ASC)
            return root.name, [c.name for c in children]

    # the rerun after the kill: the stages the killed run had not finished
    assert asyncio.run(names()) == (f"pipeline-{NAME}", ["iter-1", "eval-iter-1", "iter-2", "eval-iter-2"])


def test_the_run_summary_says_what_each_stage_did(e2e):
    story = e2e["resumed"]["summary"].summary
    assert story[0] == f"summary of pipeline {NAME}:"
    assert story[1].startswith("  Pass@1 per stage: start ")
    assert story[2].startswith("  The plumbing works: 3 images ready; 3/3 tasks valid (gold patches pass in sandboxes); "
                               "the scripted policy resolved 3/3 trajectories in rft.")


def test_a_standalone_evaluation_of_the_champion_gets_a_run_of_its_own(e2e, mlflow_client, demo, task_slice, tmp_path):
    from flows.evaluate import evaluate
    from swerl.orchestration.params import EvaluateParams, SamplerParams

    params = e2e["params"]
    name = params.tracking.registered_model
    champion = mlflow_client.get_model_version_by_alias(name, "champion")
    request = EvaluateParams(model="champion", tasks=task_slice, repos=demo.repos_dir, out=tmp_path, runs=1,
                             sampler=SamplerParams(engine="hf", concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16}),
                             tracking=params.tracking)
    first, second = evaluate(request), evaluate(request)
    assert first.checkpoint == champion.tags["swerl.checkpoint_path"]
    assert first.run_id != second.run_id  # a nightly evaluation never lands in yesterday's run
    assert len(list(tmp_path.iterdir())) == 2
    run = mlflow_client.get_run(first.run_id)
    assert "mlflow.parentRunId" not in run.data.tags
    assert run.data.metrics["eval/tasks"] == 3.0 and run.data.metrics["eval/runs"] == 1.0
