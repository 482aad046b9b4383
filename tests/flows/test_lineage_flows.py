"""The lineage a real pipeline leaves in MLflow, walked with ``MlflowClient`` alone: task set
-> images -> trajectories -> checkpoint -> evaluation, and back.

One short pipeline (3 demo tasks, the tiny model; start evaluated, RFT on the scripted
demonstrations, one DAPO iteration on an external grader's rewards, each evaluated once)
runs against the test Prefect API, Docker and SQLite; every hop is asserted by id and digest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "lineage"
CONTEXT = "mlflow.data.context"


@pytest.fixture(scope="module")
def pipeline_run(prefect_api, docker_ready, demo, task_slice, tiny_model_dir, tmp_path_factory):
    from flows.pipeline import pipeline
    from swerl.orchestration.params import (DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingConfig,
                                            TrainParams)

    tmp = tmp_path_factory.mktemp("lineage")
    ids = [json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines()]
    rewards = tmp / "rewards.jsonl"  # sample 0 of each task scores 1: every group has an advantage, DAPO trains
    rewards.write_text("".join(json.dumps({"trajectory_id": f"{i}/{s}", "reward": float(s == 0)}) + "\n" for i in ids for s in (0, 1)))
    params = PipelineParams(
        name=NAME, run_root=tmp / "runs", tasks=task_slice, repos=demo.repos_dir, model=str(tiny_model_dir), validate_runs=0,
        seed=3, sampler=SamplerParams(engine="hf", concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16}),
        rft=RFTParams(sampler=SamplerParams(engine="scripted", concurrency=3, agent={"max_turns": 20}), attempts=1,
                      train=TrainParams(epochs=1, batch_size=3, optimizer={"lr": 1e-3, "warmup_steps": 0, "lr_schedule": "cosine"})),
        dapo=DAPOParams(iterations=1, group_size=2, rewards_file=rewards, reward={"length_penalty": False},
                        train=TrainParams(batch_size=6, optimizer={"lr": 1e-4, "lr_schedule": "constant"})),
        eval=EvalParams(runs=1),
        tracking=TrackingConfig(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", experiment=NAME),
    )
    state = pipeline(params, return_state=True)
    assert state.is_completed(), state
    return params


@pytest.fixture(scope="module")
def walk(pipeline_run):
    """The MLflow client, the runs by stage (the parent as 'pipeline') and the expected digests."""
    from mlflow import MlflowClient

    from swerl.stages.images import load_task_file
    from swerl.tracking.lineage import file_digest, tasks_digest, tree_digest

    params = pipeline_run
    client = MlflowClient(params.tracking.tracking_uri, registry_uri=params.tracking.tracking_uri)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    # get_run, not the search's runs: MLflow's search leaves a run's model inputs out
    runs = {r.data.tags.get("swerl.stage", "pipeline"): client.get_run(r.info.run_id) for r in client.search_runs([experiment])}
    run_dir = params.run_dir
    digests = {"tasks": tasks_digest(load_task_file(params.tasks)), "images": file_digest(run_dir / "images.json"),
               "rft-trajectories": tree_digest(run_dir / "rft" / "rollout" / "trajectories", "*.parquet"),
               "iter-1-trajectories": tree_digest(run_dir / "iter-1" / "rollout" / "trajectories", "*.parquet")}
    return {"client": client, "experiment": experiment, "runs": runs, "digests": digests, "run_dir": run_dir}


def _datasets(run) -> dict[str, tuple[str, str]]:
    """name -> (full digest, context) of a run's dataset inputs."""
    return {d.dataset.name: ({t.key: t.value for t in d.tags}["swerl.digest"], {t.key: t.value for t in d.tags}[CONTEXT])
            for d in run.inputs.dataset_inputs}


def _model_inputs(run) -> list[str]:
    return [m.model_id for m in run.inputs.model_inputs]


def test_the_runs_are_the_pipeline_and_its_stages(walk):
    assert sorted(walk["runs"]) == ["eval-iter-1", "eval-rft", "eval-start", "iter-1", "pipeline", "rft"]
    assert {stage: r.info.status for stage, r in walk["runs"].items()} == dict.fromkeys(walk["runs"], "FINISHED")


def test_each_evaluation_leads_back_through_its_checkpoint_to_trajectories_images_and_tasks(walk):
    client, runs, d = walk["client"], walk["runs"], walk["digests"]
    start_model, rft_model, iter_model = ([o.model_id for o in runs[stage].outputs.model_outputs]
                                          for stage in ("pipeline", "rft", "iter-1"))
    assert len(start_model) == len(rft_model) == len(iter_model) == 1
    start_model, rft_model, iter_model = start_model[0], rft_model[0], iter_model[0]

    # evaluation -> the model it evaluated
    assert {stage: _model_inputs(runs[stage]) for stage in ("eval-start", "eval-rft", "eval-iter-1")} == {
        "eval-start": [start_model], "eval-rft": [rft_model], "eval-iter-1": [iter_model]}
    for stage in ("eval-start", "eval-rft", "eval-iter-1"):
        assert _datasets(runs[stage]) == {"eval-tasks": (d["tasks"], "evaluation"),
                                          f"{stage}-trajectories": (_datasets(runs[stage])[f"{stage}-trajectories"][0], "evaluation")}

    # checkpoint -> the training run that made it -> what it trained on, and the checkpoint it started from
    iter_logged = client.get_logged_model(iter_model)
    assert (iter_logged.name, iter_logged.source_run_id) == ("iter-1", runs["iter-1"].info.run_id)
    assert iter_logged.params == {"trained_on.tasks": d["tasks"], "trained_on.images": d["images"],
                                  "trained_on.iter-1-trajectories": d["iter-1-trajectories"]}
    assert _datasets(runs["iter-1"]) == {"tasks": (d["tasks"], "training"), "images": (d["images"], "environment"),
                                         "iter-1-trajectories": (d["iter-1-trajectories"], "training")}
    assert _model_inputs(runs["iter-1"]) == [rft_model]
    rft_logged = client.get_logged_model(rft_model)
    assert (rft_logged.name, rft_logged.source_run_id) == ("rft", runs["rft"].info.run_id)
    assert _datasets(runs["rft"]) == {"tasks": (d["tasks"], "training"), "images": (d["images"], "environment"),
                                      "rft-trajectories": (d["rft-trajectories"], "training")}
    assert _model_inputs(runs["rft"]) == [start_model]
    assert client.get_logged_model(start_model).source_run_id == runs["pipeline"].info.run_id

    # training run -> its pipeline, which logged the task set and built the images
    assert runs["rft"].data.tags["mlflow.parentRunId"] == runs["pipeline"].info.run_id
    assert _datasets(runs["pipeline"]) == {"tasks": (d["tasks"], "training"), "images": (d["images"], "environment")}


def test_the_task_set_leads_forward_to_checkpoints_versions_and_scores(walk):
    client, runs, d = walk["client"], walk["runs"], walk["digests"]

    def stages_using(digest: str) -> list[str]:
        found = client.search_runs([walk["experiment"]], f"datasets.digest = '{digest[:36]}'")
        return sorted(r.data.tags.get("swerl.stage", "pipeline") for r in found)

    # the evaluations use the same task set (no held-out set here)
    assert stages_using(d["tasks"]) == ["eval-iter-1", "eval-rft", "eval-start", "iter-1", "pipeline", "rft"]
    assert stages_using(d["images"]) == ["iter-1", "pipeline", "rft"]
    assert stages_using(d["rft-trajectories"]) == ["rft"]
    assert stages_using(d["iter-1-trajectories"]) == ["iter-1"]

    name = "swerl-policy"
    for train, evaluation, policy in (("pipeline", "eval-start", "0"), ("rft", "eval-rft", "rft"), ("iter-1", "eval-iter-1", "dapo-1")):
        [model_id] = [o.model_id for o in runs[train].outputs.model_outputs]
        model = client.get_logged_model(model_id)
        scored = {m.key: (m.value, m.run_id, m.dataset_name, m.dataset_digest) for m in model.metrics if m.key.startswith("eval/")}
        eval_run = runs[evaluation]
        assert scored["eval/pass_at_1"] == (eval_run.data.metrics["eval/pass_at_1"], eval_run.info.run_id, "eval-tasks",
                                            d["tasks"][:36])
        [version] = client.search_model_versions(f"name = '{name}' AND tags.`swerl.model_id` = '{model_id}'")
        assert json.loads(model.tags["mlflow.modelVersions"]) == [{"name": name, "version": str(version.version)}]
        assert (version.tags["swerl.policy_version"], version.tags["swerl.eval_run_id"], version.tags["swerl.pass_at_1"]) == (
            policy, eval_run.info.run_id, f"{eval_run.data.metrics['eval/pass_at_1']:.6f}")
    # a trained checkpoint's loss is on its model too, measured on its trajectories
    [iter_model] = [o.model_id for o in runs["iter-1"].outputs.model_outputs]
    loss = [m for m in client.get_logged_model(iter_model).metrics if m.key == "train/loss"]
    assert [(m.run_id, m.dataset_name, m.dataset_digest) for m in loss] == [
        (runs["iter-1"].info.run_id, "iter-1-trajectories", d["iter-1-trajectories"][:36])]


@pytest.fixture(scope="module")
def nightly(walk, pipeline_run, task_slice, demo, tmp_path_factory):
    """The deployed `evaluate` flow on `champion` after the pipeline, as the nightly schedule runs it."""
    from flows.evaluate import evaluate
    from swerl.orchestration.params import EvaluateParams, SamplerParams

    state = evaluate(EvaluateParams(model="champion", tasks=task_slice, repos=demo.repos_dir, runs=1, promote=False,
                                    out=tmp_path_factory.mktemp("nightly"), tracking=pipeline_run.tracking,
                                    sampler=SamplerParams(engine="hf", concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16})),
                     return_state=True)
    assert state.is_completed(), state
    return state.result()


def test_a_standalone_evaluation_is_logged_as_one_at_its_checkpoint_s_step_on_the_pipeline_s_dataset(walk, nightly):
    client = walk["client"]
    run = client.get_run(nightly.run_id)
    assert run.data.tags["swerl.kind"] == "evaluation"
    champion = client.get_model_version_by_alias("swerl-policy", "champion")
    # on the pipeline's curve at the step its checkpoint was made, not at 0
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1")] == [int(champion.tags["swerl.step"])]
    # the same task records as the pipeline's evaluations: the same dataset, one digest
    assert _datasets(run)["eval-tasks"] == (walk["digests"]["tasks"], "evaluation")
