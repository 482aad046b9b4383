"""A Parquet task file through the whole pipeline: the training, held-out and warm-up sets all given
as Parquet, read by every stage that reads a task file (images, validation, the tiny model's corpus,
the warm start, RFT, DAPO, the evaluations and the lineage digest).

One short run on 3 demo tasks: the tiny model made from the warm-up corpus, warm-started and RFT'd on scripted demonstrations, one DAPO
iteration, each evaluated once; only the held-out set validated (`validate_sets`), so the
later stages read the training and warm-up Parquet files themselves; the noisy demonstrations of the warm start
are not graded (`warm_start.grade`); against the test Prefect API, Docker and SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "parquet"
STAGES = ["images", "validate", "warm-start", "eval-start", "rft", "eval-rft", "iter-1", "eval-iter-1"]


@pytest.fixture(scope="module")
def parquet_sets(task_slice, tmp_path_factory) -> dict[str, Path]:
    """The demo slice written as three Parquet files (training, held-out and warm-up sets of the same tasks)."""
    from swerl.data.loaders import load_tasks, save_tasks

    tasks = load_tasks(task_slice).tasks
    folder = tmp_path_factory.mktemp("parquet")
    return {key: save_tasks(tasks, folder / f"{key}.parquet") for key in ("train", "eval", "warm")}


@pytest.fixture(scope="module")
def pipeline_run(prefect_api, docker_ready, demo, task_slice, parquet_sets, tmp_path_factory):
    from flows.pipeline import pipeline
    from swerl.inference.config import ScriptedEngineConfig
    from swerl.orchestration.params import (DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingConfig,
                                            TrainParams, WarmStartParams)

    tmp = tmp_path_factory.mktemp("run")
    scripted = SamplerParams(engine="scripted", concurrency=3, agent={"max_turns": 20})
    params = PipelineParams(
        name=NAME, run_root=tmp / "runs", tasks=parquet_sets["train"], eval_tasks=parquet_sets["eval"], repos=demo.repos_dir,
        validate_runs=1, validate_sets=["eval"], seed=5,
        warm_start=WarmStartParams(tasks=parquet_sets["warm"], grade=False,
                                   sampler=scripted.model_copy(update={"engine": ScriptedEngineConfig(demo="replace", give_up=0.5)}),
                                   train=TrainParams(batch_size=3, optimizer={"lr": 1e-3})),
        sampler=SamplerParams(engine="hf", concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16}),
        rft=RFTParams(sampler=scripted, attempts=1, train=TrainParams(batch_size=3, optimizer={"lr": 1e-3})),
        dapo=DAPOParams(iterations=1, group_size=2, reward={"length_penalty": False},
                        train=TrainParams(batch_size=6, optimizer={"lr": 1e-4})),
        eval=EvalParams(runs=1),
        tracking=TrackingConfig(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", experiment=NAME),
    )
    state = pipeline(params, return_state=True)
    assert state.is_completed(), state
    return params


def test_every_stage_ran_on_the_parquet_task_sets(pipeline_run):
    from swerl.orchestration.ledger import Ledger

    assert Ledger(pipeline_run.run_dir).finished() == STAGES


def test_validation_kept_every_task_of_the_held_out_parquet_set(pipeline_run, task_slice):
    from swerl.data.loaders import load_tasks

    ids = sorted(t.instance_id for t in load_tasks(task_slice).tasks)
    assert sorted(t.instance_id for t in load_tasks(pipeline_run.run_dir / "tasks-eval.valid.jsonl").tasks) == ids


def test_sets_left_out_of_validate_sets_are_not_validated(pipeline_run):
    from swerl.orchestration.ledger import Ledger

    run_dir = pipeline_run.run_dir
    validated = Ledger(run_dir).get("validate")
    assert sorted(key for key, report in validated.items() if isinstance(report, dict)) == ["eval"]
    for name in ("validation.json", "tasks.valid.jsonl", "validation-warm.json", "tasks-warm.valid.jsonl"):
        assert not (run_dir / name).exists(), name


def test_every_rollout_sampled_every_task(pipeline_run, task_slice):
    from swerl.data.loaders import load_tasks
    from swerl.stages.rollout import stored_trajectories

    ids = sorted(t.instance_id for t in load_tasks(task_slice).tasks)
    run_dir = pipeline_run.run_dir
    stores = {"warm-start": run_dir / "warm-start" / "rollout", "rft": run_dir / "rft" / "rollout",
              "iter-1": run_dir / "iter-1" / "rollout",
              **{stage: run_dir / "eval" / stage for stage in ("eval-start", "eval-rft", "eval-iter-1")}}
    sampled = {stage: sorted({t.instance_id for t in stored_trajectories(store / "trajectories")})
               for stage, store in stores.items()}
    assert sampled == dict.fromkeys(stores, ids)


def test_the_warm_start_trained_on_ungraded_demonstrations_and_every_later_rollout_was_graded(pipeline_run):
    from swerl.orchestration.ledger import Ledger
    from swerl.stages.rollout import stored_trajectories

    run_dir = pipeline_run.run_dir
    verdicts = {stage: {t.resolved is not None for t in stored_trajectories(run_dir / stage / "rollout" / "trajectories")}
                for stage in ("warm-start", "rft", "iter-1")}
    assert verdicts == {"warm-start": {False}, "rft": {True}, "iter-1": {True}}
    assert Ledger(run_dir).get("warm-start")["trained"] is True


def test_mlflow_records_each_parquet_set_with_the_digest_of_its_tasks(pipeline_run, task_slice):
    from mlflow import MlflowClient

    from swerl.data.loaders import load_tasks
    from swerl.tracking.lineage import tasks_digest

    client = MlflowClient(pipeline_run.tracking.tracking_uri)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    (parent,) = [client.get_run(r.info.run_id) for r in client.search_runs([experiment])
                 if r.data.tags.get("swerl.kind") == "pipeline"]
    digests = {d.dataset.name: {t.key: t.value for t in d.tags}["swerl.digest"] for d in parent.inputs.dataset_inputs}
    # the records of the JSONL slice: the format leaves no trace in the digest
    expected = tasks_digest(load_tasks(task_slice).tasks)
    assert {name: digests[name] for name in ("tasks", "eval-tasks", "warm-tasks")} == dict.fromkeys(
        ("tasks", "eval-tasks", "warm-tasks"), expected)
