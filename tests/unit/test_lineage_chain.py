"""Lineage in MLflow's own links, walked with ``MlflowClient`` alone: task set -> images ->
trajectories -> checkpoint -> evaluation, and back again.

The records are written by the recording functions the flows call, on SQLite in a temp
folder, in a pipeline's order: the pipeline run logs the task set and the image manifest and
registers the starting checkpoint; the ``rft`` stage logs what it trained on and registers
its checkpoint; the ``eval-rft`` stage evaluates that version. Checkpoints are tiny fake
Hugging Face folders (files only: nothing is trained or sampled). One database serves the
module (creating MLflow's tables takes seconds); each test has its own experiment and
registered model.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from swerl.data.task import Task
from swerl.orchestration import recording
from swerl.tracking import TrackingConfig, file_digest, tasks_digest, tree_digest
from swerl.tracking.lineage import CHECKPOINT_PATTERNS
from swerl.tracking.mlflow_tracker import Tracker

CONTEXT = "mlflow.data.context"


@pytest.fixture(autouse=True)
def _sync_logging(monkeypatch):
    monkeypatch.delenv("MLFLOW_ENABLE_ASYNC_LOGGING", raising=False)


def write_tasks(path: Path, ids: list[str]) -> Path:
    tasks = [Task(instance_id=i, repo="o/r", base_commit="abcdef1", install_config={}, FAIL_TO_PASS=["t"]) for i in ids]
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    return path


def fake_checkpoint(folder: Path, weight: float) -> Path:
    """A Hugging Face model folder: config and weights (the digest covers these)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 4}))
    save_file({"w": np.full((2, 2), weight, dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def chain(db_uri, tmp_path) -> dict:
    """One pipeline's records: what each hop of the walk must find, by id and digest."""
    name = f"policy-{uuid.uuid4().hex[:8]}"
    config = TrackingConfig(tracking_uri=db_uri, experiment=f"lineage-{name}", registered_model=name,
                            artifact_location=str(tmp_path / "artifacts"))
    tracker = Tracker(config)
    tasks_file = write_tasks(tmp_path / "tasks.jsonl", ["o__r-1", "o__r-2"])
    eval_file = write_tasks(tmp_path / "eval.jsonl", ["o__r-3"])
    manifest = tmp_path / "images.json"
    manifest.write_text(json.dumps({"o__r-1": "swerl-inst:1a", "o__r-2": "swerl-inst:2b"}))
    start = fake_checkpoint(tmp_path / "start-model", 0.0)
    store = tmp_path / "rft" / "rollout" / "trajectories"
    store.mkdir(parents=True)
    (store / "part-00000.parquet").write_bytes(b"two trajectories")

    parent = tracker.pipeline_run("pipe", name="pipeline pipe")
    recording.log_task_set(tracker, parent, tasks_file, name="tasks", context="training")
    recording.log_manifest(tracker, parent, manifest)
    start_model = recording.log_checkpoint(tracker, parent, start, name="start", policy_version="0", step=0)

    rft = tracker.stage_run(parent, "rft")
    trained_on = recording.log_training_inputs(tracker, rft, tasks=tasks_file, trajectories=store,
                                               trajectories_name="rft-trajectories", count=2, start_model=str(start),
                                               parent_run_id=parent)
    final = fake_checkpoint(tmp_path / "rft" / "train" / "final", 1.0)
    registered = recording.log_checkpoint(tracker, rft, final, name="rft", policy_version="rft", step=1,
                                          metrics={"train/loss": 0.75}, trained_on=trained_on,
                                          metrics_dataset="rft-trajectories")
    tracker.finish(rft)

    evaluation = tracker.stage_run(parent, "eval-rft")
    path, _, version, _ = recording.resolve_policy(tracker, f"version:{registered['version']}")
    model_id = recording.link_policy(tracker, evaluation, path, version)
    eval_digest = recording.log_task_set(tracker, evaluation, eval_file, name="eval-tasks", context="evaluation")
    recording.log_evaluation(tracker, evaluation, model_id, {"eval/pass_at_1": 0.5, "eval/pass_at_1_sem": 0.25}, step=1,
                             dataset=("eval-tasks", eval_digest), registered_version=version, pass_at_1=0.5)
    tracker.finish(evaluation)
    tracker.finish(parent)

    from mlflow import MlflowClient

    return {
        "client": MlflowClient(config.tracking_uri, registry_uri=config.tracking_uri), "tracker": tracker, "name": name,
        "experiment_id": tracker.experiment_id, "parent": parent, "rft": rft, "evaluation": evaluation,
        "start_model": start_model, "registered": registered, "trained_on": trained_on, "eval_digest": eval_digest,
        "tasks": tasks_digest(Task.model_validate_json(line) for line in tasks_file.read_text().splitlines()),
        "images": file_digest(manifest), "trajectories": tree_digest(store, "*.parquet"),
        "tasks_file": tasks_file.resolve(), "manifest": manifest.resolve(), "store": store.resolve(),
        "start": start.resolve(), "final": final.resolve(),
    }


def _datasets(run) -> dict[str, tuple[str, str, dict[str, str]]]:
    """A run's dataset inputs as name -> (digest, source path, input tags)."""
    return {d.dataset.name: (d.dataset.digest, json.loads(d.dataset.source)["uri"], {t.key: t.value for t in d.tags})
            for d in run.inputs.dataset_inputs}


def test_the_recording_functions_return_the_digests_and_ids_they_logged(chain):
    assert chain["trained_on"] == {"tasks": chain["tasks"], "images": chain["images"], "rft-trajectories": chain["trajectories"]}
    assert (chain["start_model"]["version"], chain["registered"]["version"]) == ("1", "2")


def test_an_evaluation_leads_back_to_its_checkpoint_trajectories_images_and_task_set(chain):
    client, c = chain["client"], chain

    # evaluation -> the model it evaluated (a model input of the run)
    evaluation = client.get_run(c["evaluation"])
    assert [m.model_id for m in evaluation.inputs.model_inputs] == [c["registered"]["model_id"]]
    model = client.get_logged_model(evaluation.inputs.model_inputs[0].model_id)
    assert (model.name, model.source_run_id) == ("rft", c["rft"])
    assert (model.tags["swerl.checkpoint_path"], model.tags["swerl.checkpoint_digest"]) == (
        str(c["final"]), tree_digest(c["final"], CHECKPOINT_PATTERNS))
    # the model names what it was trained on
    assert model.params == {"trained_on.tasks": c["tasks"], "trained_on.images": c["images"],
                            "trained_on.rft-trajectories": c["trajectories"]}

    # checkpoint -> the training run that produced it -> its trajectories, images and task set
    training = client.get_run(model.source_run_id)
    assert training.info.run_name == "rft"
    assert _datasets(training) == {
        "tasks": (c["tasks"][:36], str(c["tasks_file"]), {CONTEXT: "training", "swerl.digest": c["tasks"]}),
        "images": (c["images"][:36], str(c["manifest"]), {CONTEXT: "environment", "swerl.digest": c["images"]}),
        "rft-trajectories": (c["trajectories"][:36], str(c["store"]), {CONTEXT: "training", "swerl.digest": c["trajectories"]}),
    }
    # ... and the policy it started from, itself a registered checkpoint
    assert [m.model_id for m in training.inputs.model_inputs] == [c["start_model"]["model_id"]]
    start = client.get_logged_model(c["start_model"]["model_id"])
    assert (start.name, start.source_run_id, start.tags["swerl.checkpoint_digest"]) == (
        "start", c["parent"], tree_digest(c["start"], CHECKPOINT_PATTERNS))

    # training run -> the pipeline run that built the images for that task set
    pipeline = client.get_run(training.data.tags["mlflow.parentRunId"])
    assert pipeline.info.run_id == c["parent"]
    assert _datasets(pipeline) == {
        "tasks": (c["tasks"][:36], str(c["tasks_file"]), {CONTEXT: "training", "swerl.digest": c["tasks"]}),
        "images": (c["images"][:36], str(c["manifest"]), {CONTEXT: "environment", "swerl.digest": c["images"]}),
    }
    assert [a.path for a in client.list_artifacts(c["parent"], "lineage")] == ["lineage/images.json"]


def test_a_task_set_leads_forward_to_the_runs_checkpoint_and_scores_built_on_it(chain):
    client, c = chain["client"], chain

    def runs_using(digest: str) -> list[str]:
        found = client.search_runs([c["experiment_id"]], f"datasets.digest = '{digest[:36]}'")
        return sorted(r.info.run_name for r in found)

    # task set -> images -> trajectories: the runs that used each
    assert runs_using(c["tasks"]) == ["pipeline pipe", "rft"]
    assert runs_using(c["images"]) == ["pipeline pipe", "rft"]
    assert runs_using(c["trajectories"]) == ["rft"]
    assert runs_using(c["eval_digest"]) == ["eval-rft"]

    # trajectories -> checkpoint: the training run's model output, its loss linked to the trajectories
    training = client.get_run(c["rft"])
    assert [(o.model_id, o.step) for o in training.outputs.model_outputs] == [(c["registered"]["model_id"], 1)]
    model = client.get_logged_model(training.outputs.model_outputs[0].model_id)
    metrics = sorted((m.key, m.value, m.step, m.run_id, m.dataset_name, m.dataset_digest) for m in model.metrics)
    assert metrics == [
        ("eval/pass_at_1", 0.5, 1, c["evaluation"], "eval-tasks", c["eval_digest"][:36]),
        ("eval/pass_at_1_sem", 0.25, 1, c["evaluation"], "eval-tasks", c["eval_digest"][:36]),
        ("train/loss", 0.75, 1, c["rft"], "rft-trajectories", c["trajectories"][:36]),
    ]

    # checkpoint -> its registered version, which shows the score and the evaluation run
    assert json.loads(model.tags["mlflow.modelVersions"]) == [{"name": c["name"], "version": "2"}]
    version = client.get_model_version(c["name"], "2")
    assert (version.run_id, version.tags["swerl.model_id"]) == (c["rft"], model.model_id)
    assert (version.tags["swerl.pass_at_1"], version.tags["swerl.eval_run_id"]) == ("0.500000", c["evaluation"])
    assert str(client.get_model_version_by_alias(c["name"], "candidate").version) == "2"

    # checkpoint -> evaluation: the run behind the model's eval metrics has it as input, the same scores
    evaluation = client.get_run(c["evaluation"])
    assert (evaluation.info.run_name, evaluation.info.status) == ("eval-rft", "FINISHED")
    assert evaluation.data.metrics == {"eval/pass_at_1": 0.5, "eval/pass_at_1_sem": 0.25}
    assert [m.model_id for m in evaluation.inputs.model_inputs] == [model.model_id]


def test_rerecording_a_stage_adds_no_second_link(chain):
    tracker, c = chain["tracker"], chain
    evaluation, model_id = c["evaluation"], c["registered"]["model_id"]
    assert recording.link_policy(tracker, evaluation, str(c["final"]), "2") == model_id
    recording.log_evaluation(tracker, evaluation, model_id, {"eval/pass_at_1": 0.5}, step=1,
                             dataset=("eval-tasks", c["eval_digest"]), registered_version="2", pass_at_1=0.5)
    assert [m.model_id for m in c["client"].get_run(evaluation).inputs.model_inputs] == [model_id]
    assert [(m.step, m.value) for m in c["client"].get_metric_history(evaluation, "eval/pass_at_1")] == [(1, 0.5)]
    assert len([m for m in c["client"].get_logged_model(model_id).metrics if m.key == "eval/pass_at_1"]) == 1


def test_an_unregistered_folder_or_hub_name_still_gets_a_logged_model_to_link(chain, tmp_path):
    tracker, client, c = chain["tracker"], chain["client"], chain
    run = tracker.pipeline_run("evaluate standalone")
    # a folder a training run logged: that run's model, found by content (also from a copy elsewhere)
    assert recording.link_policy(tracker, run, str(c["final"]), None) == c["registered"]["model_id"]
    copy = fake_checkpoint(tmp_path / "copied" / "start", 0.0)
    assert recording.link_policy(tracker, run, str(copy), None) == c["start_model"]["model_id"]
    # a folder never logged: an external model standing for it, found again by its digest
    other = fake_checkpoint(tmp_path / "downloaded" / "other-model", 7.0)
    first = recording.link_policy(tracker, run, str(other), None)
    assert recording.link_policy(tracker, run, str(other), None) == first
    made = client.get_logged_model(first)
    assert (made.name, made.source_run_id, str(made.status)) == ("other-model", None, "READY")
    assert {k: made.tags[k] for k in ("swerl.checkpoint_path", "swerl.checkpoint_digest", "mlflow.model.isExternal")} == {
        "swerl.checkpoint_path": str(other.resolve()), "swerl.checkpoint_digest": tree_digest(other, CHECKPOINT_PATTERNS),
        "mlflow.model.isExternal": "true"}
    # a hub name: found again by the name
    hub = recording.link_policy(tracker, run, "Qwen/Qwen3-0.6B", None)
    assert recording.link_policy(tracker, run, "Qwen/Qwen3-0.6B", None) == hub
    named = client.get_logged_model(hub)
    assert (named.name, named.tags["swerl.model_ref"], named.source_run_id) == ("Qwen-Qwen3-0-6B", "Qwen/Qwen3-0.6B", None)
    assert sorted(m.model_id for m in client.get_run(run).inputs.model_inputs) == sorted(
        [c["registered"]["model_id"], c["start_model"]["model_id"], first, hub])
