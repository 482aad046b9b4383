"""Tracking with the real MLflow on SQLite: runs found again on rerun, params fixed once,
one metric per step, datasets by reference, checkpoints as logged models, the registry.

One database serves the module (creating MLflow's tables takes seconds); each test has its
own experiment and registered model, so tests do not see each other's runs or versions.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from swerl.data.task import Task
from swerl.tracking import TrackingConfig, file_digest, tasks_digest, tree_digest
from swerl.tracking.mlflow_tracker import Tracker


@pytest.fixture(autouse=True)
def _sync_logging(monkeypatch):
    monkeypatch.delenv("MLFLOW_ENABLE_ASYNC_LOGGING", raising=False)


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def config(db_uri, tmp_path) -> TrackingConfig:
    unique = uuid.uuid4().hex[:8]
    return TrackingConfig(
        tracking_uri=db_uri, experiment=f"exp-{unique}", registered_model=f"policy-{unique}",
        artifact_location=str(tmp_path / "artifacts"),
    )


def fake_checkpoint(folder: Path, weight: float = 0.0) -> Path:
    """A Hugging Face model folder as the trainers write it: config, weights, trainer state."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 4}))
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True}))
    (folder / "tokenizer.json").write_text("{}")
    save_file({"w": np.full((2, 2), weight, dtype=np.float32)}, str(folder / "model.safetensors"))
    (folder / "trainer_state").mkdir()
    (folder / "trainer_state" / "state.json").write_text(json.dumps({"step": 1}))
    return folder


def test_configs_digests_and_tag_names_do_not_import_mlflow():
    # import mlflow takes seconds: only a Tracker pays for it
    code = "import sys, swerl.tracking, swerl.tracking.lineage, swerl.tracking.keys; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- lineage ---------------------------------------------------------------------------------


def test_file_digest_is_the_sha256_of_the_bytes(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello\n")
    assert file_digest(tmp_path / "a.txt") == hashlib.sha256(b"hello\n").hexdigest()


def test_tree_digest_hashes_sorted_relative_paths_and_file_digests(tmp_path):
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "b.json").write_text("B")
    (root / "sub" / "a.json").write_text("A")
    (root / "notes.txt").write_text("not matched")
    expected = hashlib.sha256(
        f"b.json\0{hashlib.sha256(b'B').hexdigest()}\n".encode()
        + f"sub/a.json\0{hashlib.sha256(b'A').hexdigest()}\n".encode()
    ).hexdigest()
    assert tree_digest(root, "*.json") == expected
    # Another location, the same content: the same digest
    shutil.copytree(root, tmp_path / "elsewhere")
    assert tree_digest(tmp_path / "elsewhere", "*.json") == expected
    # Files outside the pattern do not count; files inside do
    (root / "notes.txt").write_text("changed")
    assert tree_digest(root, "*.json") == expected
    (root / "sub" / "a.json").write_text("A2")
    assert tree_digest(root, "*.json") != expected
    assert tree_digest(root, ["*.json", "*.txt"]) != tree_digest(root, "*.json")


def test_tasks_digest_is_independent_of_task_order():
    tasks = [Task(instance_id=f"o__r-{i}", repo="o/r", base_commit="abcdef1", install_config={}, FAIL_TO_PASS=["t"]) for i in range(3)]
    lines = sorted(json.dumps(t.model_dump(mode="json", exclude={"gold_statuses"}), sort_keys=True, separators=(",", ":"))
                   for t in tasks)
    assert tasks_digest(tasks) == hashlib.sha256("\n".join(lines).encode()).hexdigest()
    assert tasks_digest(reversed(tasks)) == tasks_digest(tasks)
    assert tasks_digest(tasks[:2]) != tasks_digest(tasks)


def test_the_same_tasks_validated_or_not_are_one_dataset():
    # a pipeline's held-out set carries validation's gold statuses; the nightly evaluation reads the same file bare
    tasks = [Task(instance_id=f"o__r-{i}", repo="o/r", base_commit="abcdef1", install_config={}, FAIL_TO_PASS=["t"]) for i in range(3)]
    validated = [t.model_copy(update={"gold_statuses": {"t": "PASSED"}}) for t in tasks]
    assert tasks_digest(validated) == tasks_digest(tasks)
    changed = [tasks[0].model_copy(update={"FAIL_TO_PASS": ["t", "u"]}), *tasks[1:]]
    assert tasks_digest(changed) != tasks_digest(tasks)


# -- config ----------------------------------------------------------------------------------


def test_default_tracking_uri_is_a_sqlite_database_under_dot_swerl(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    config = TrackingConfig()
    assert config.tracking_uri is None  # a form's default: resolved where the runs are recorded
    assert config.resolved().tracking_uri == f"sqlite:///{tmp_path.resolve() / '.swerl' / 'mlflow.db'}"
    assert (config.experiment, config.registered_model, config.log_weights) == ("swerl", "swerl-policy", False)
    assert config.resolved_artifact_location() == str(tmp_path.resolve() / ".swerl" / "mlartifacts")


def test_the_environment_names_the_tracking_server(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")
    config = TrackingConfig()
    assert config.resolved().tracking_uri == "http://mlflow.internal:5000"
    assert config.resolved_artifact_location() is None  # the server decides


def test_a_relative_sqlite_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TrackingConfig(tracking_uri="sqlite:///runs/m.db").tracking_uri == f"sqlite:///{tmp_path.resolve()}/runs/m.db"


@pytest.mark.parametrize("uri", ["./mlruns", "/abs/mlruns", "file:///abs/mlruns", "ftp://host/x"])
def test_a_folder_or_unknown_scheme_is_refused(uri):
    with pytest.raises(ValueError, match="use http\\(s\\)://host:port, sqlite:///path/to/mlflow.db"):
        TrackingConfig(tracking_uri=uri)


def test_unknown_settings_are_refused():
    with pytest.raises(ValueError, match="extra_forbidden"):
        TrackingConfig(experiment_name="x")


# -- runs ------------------------------------------------------------------------------------


def test_a_rerun_finds_the_same_pipeline_and_stage_runs(config):
    first = Tracker(config)
    parent = first.pipeline_run("pipe-a", name="demo pipeline", tags={"attempt": "1"})
    rft = first.stage_run(parent, "rft")
    first.finish(rft)
    first.finish(parent, "FAILED")

    rerun = Tracker(config)  # a new process
    assert rerun.pipeline_run("pipe-a", tags={"attempt": "2"}) == parent
    assert rerun.stage_run(parent, "rft") == rft
    dapo = rerun.stage_run(parent, "dapo")

    run = rerun.client.get_run(parent)
    assert (run.info.status, run.info.run_name) == ("RUNNING", "demo pipeline")
    assert {k: run.data.tags[k] for k in ("swerl.pipeline_id", "swerl.kind", "attempt")} == {
        "swerl.pipeline_id": "pipe-a", "swerl.kind": "pipeline", "attempt": "2",
    }
    # A finished stage stays finished, so the pipeline can skip it
    assert (rerun.is_finished(rft), rerun.is_finished(dapo)) == (True, False)
    children = rerun.child_runs(parent)
    assert [c.info.run_name for c in children] == ["rft", "dapo"]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent}
    assert [c.data.tags["swerl.pipeline_id"] for c in children] == ["pipe-a", "pipe-a"]
    assert rerun.find_stage_run(parent, "dapo") == dapo
    assert rerun.find_stage_run(parent, "eval") is None
    assert len(rerun.client.search_runs([rerun.experiment_id])) == 3


def test_pipelines_with_other_ids_get_other_runs(config):
    tracker = Tracker(config)
    assert tracker.pipeline_run("pipe-1") != tracker.pipeline_run("pipe-2")


def test_params_are_logged_once_and_a_changed_value_is_refused(config):
    tracker = Tracker(config)
    parent = tracker.pipeline_run("pipe-p", params={"lr": 1e-6, "model": {"name": "tiny", "layers": 2}})
    assert tracker.pipeline_run("pipe-p", params={"lr": 1e-6}) == parent
    assert tracker.client.get_run(parent).data.params == {"lr": "1e-06", "model": '{"layers": 2, "name": "tiny"}'}
    with pytest.raises(ValueError, match=r"param 'lr' of run \w+ was logged as '1e-06', now given as '2e-06'"):
        tracker.pipeline_run("pipe-p", params={"lr": 2e-6})
    stage = tracker.stage_run(parent, "rft", params={"epochs": 1})
    with pytest.raises(ValueError, match="param 'epochs'"):
        tracker.stage_run(parent, "rft", params={"epochs": 2})
    assert tracker.client.get_run(stage).data.params == {"epochs": "1"}


def test_finish_takes_only_mlflow_end_states(config):
    tracker = Tracker(config)
    run = tracker.pipeline_run("pipe-f")
    tracker.finish(run, "KILLED")
    assert tracker.client.get_run(run).info.status == "KILLED"
    with pytest.raises(ValueError, match="status must be one of FINISHED, FAILED, KILLED, got 'DONE'"):
        tracker.finish(run, "DONE")


def test_end_runs_ends_only_the_running_runs_that_carry_the_tags(config):
    tracker = Tracker(config)
    flow_tags = {"prefect.flow_run_id": "flow-1"}
    parent = tracker.pipeline_run("pipe-x", tags=flow_tags)
    stage = tracker.stage_run(parent, "rft", tags=flow_tags)
    done = tracker.stage_run(parent, "images", tags=flow_tags)
    tracker.finish(done)
    other = tracker.pipeline_run("pipe-y", tags={"prefect.flow_run_id": "flow-2"})

    assert sorted(tracker.end_runs(flow_tags, "FAILED")) == sorted([parent, stage])
    status = {run: tracker.client.get_run(run).info.status for run in (parent, stage, done, other)}
    assert status == {parent: "FAILED", stage: "FAILED", done: "FINISHED", other: "RUNNING"}
    assert tracker.end_runs(flow_tags, "KILLED") == []  # nothing left running
    with pytest.raises(ValueError, match="status must be one of FINISHED, FAILED, KILLED, got 'RUNNING'"):
        tracker.end_runs(flow_tags, "RUNNING")


def test_a_database_has_no_run_url(config):
    tracker = Tracker(config)
    assert tracker.run_url(tracker.pipeline_run("pipe-u")) is None


# -- metrics and artifacts -------------------------------------------------------------------


def test_metrics_are_logged_once_per_step_even_across_trackers(config):
    tracker = Tracker(config)
    run = tracker.stage_run(tracker.pipeline_run("pipe-m"), "dapo")
    tracker.log_metrics(run, {"loss": 0.5, "reward": None}, step=1)
    tracker.log_metrics(run, {"loss": 0.4}, step=2)
    tracker.log_metrics(run, {"loss": 0.9}, step=1)  # the same step again: ignored
    Tracker(config).log_metrics(run, {"loss": 0.8, "kl": 0.1}, step=2)  # a resumed stage
    tracker.log_metrics(run, {"pass@1": 0.25})  # MLflow refuses '@' in names: logged as pass_at_1
    tracker.log_metrics(run, {"pass@1": 0.5})  # no step is step 0: logged once

    history = {key: [(m.step, m.value) for m in tracker.client.get_metric_history(run, key)]
               for key in ("loss", "kl", "reward", "pass_at_1")}
    assert history == {"loss": [(1, 0.5), (2, 0.4)], "kl": [(2, 0.1)], "reward": [], "pass_at_1": [(0, 0.25)]}


def test_dicts_and_files_become_run_artifacts(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.pipeline_run("pipe-art")
    tracker.log_dict(run, {"pass@1": 0.5}, "eval/report.json")
    (tmp_path / "validation.json").write_text("{}")
    tracker.log_artifact(run, tmp_path / "validation.json", "validation")
    listed = {f.path for f in tracker.client.list_artifacts(run)} | {f.path for f in tracker.client.list_artifacts(run, "eval")}
    assert listed == {"eval", "validation", "eval/report.json"}
    with pytest.raises(FileNotFoundError, match="no file or folder at"):
        tracker.log_artifact(run, tmp_path / "missing.json")


# -- datasets --------------------------------------------------------------------------------


def test_datasets_are_recorded_by_reference_with_digest_and_context(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.stage_run(tracker.pipeline_run("pipe-d"), "rollout")
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("{}\n")
    digest = hashlib.sha256(b"tasks").hexdigest()
    for _ in range(2):  # a rerun logs it again: harmless
        tracker.log_dataset(run, name="demo-tasks", source=tasks_file, digest=digest, context="training",
                            profile={"num_tasks": 9})
    tracker.log_dataset(run, name="swe-rebench", source="nebius/SWE-rebench", digest="abc123", context="evaluation")

    inputs = {i.dataset.name: i for i in tracker.client.get_run(run).inputs.dataset_inputs}
    assert sorted(inputs) == ["demo-tasks", "swe-rebench"]
    local, hub = inputs["demo-tasks"], inputs["swe-rebench"]
    assert (local.dataset.digest, local.dataset.source_type, json.loads(local.dataset.source)) == (
        digest[:36], "local", {"uri": str(tasks_file.resolve())},
    )
    assert json.loads(local.dataset.profile) == {"num_tasks": 9}
    assert {t.key: t.value for t in local.tags} == {"mlflow.data.context": "training", "swerl.digest": digest}
    assert (hub.dataset.digest, hub.dataset.source_type, json.loads(hub.dataset.source)) == (
        "abc123", "uri", {"uri": "nebius/SWE-rebench"},
    )
    assert {t.key: t.value for t in hub.tags} == {"mlflow.data.context": "evaluation", "swerl.digest": "abc123"}


# -- checkpoints and the registry ------------------------------------------------------------


def test_a_checkpoint_is_a_logged_model_that_points_at_its_folder(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.stage_run(tracker.pipeline_run("pipe-c"), "rft")
    ckpt = fake_checkpoint(tmp_path / "out" / "step-000002")
    tracker.log_metrics(run, {"loss": 0.25}, step=2)

    model_id = tracker.log_checkpoint(run, ckpt, name="rft.step-2", step=2, params={"lr": 1e-6},
                                      metrics={"loss": 0.25, "pass@1": 0.5}, tags={"stage": "rft"})
    assert tracker.log_checkpoint(run, ckpt, name="rft.step-2", step=2, metrics={"loss": 0.25}) == model_id

    model = tracker.client.get_logged_model(model_id)
    expected_digest = tree_digest(ckpt, ["*.safetensors", "*.safetensors.index.json", "*config.json"])
    assert (model.name, model.source_run_id, str(model.status), model.params) == ("rft-step-2", run, "READY", {"lr": "1e-06"})
    expected_tags = {
        "swerl.checkpoint_path": str(ckpt.resolve()), "swerl.checkpoint_digest": expected_digest,
        "swerl.step": "2", "stage": "rft", "mlflow.model.isExternal": "true",
    }
    assert {k: model.tags.get(k) for k in expected_tags} == expected_tags
    assert tracker.client.list_logged_model_artifacts(model_id) == []  # no copy of the weights
    assert sorted((m.key, m.step, m.value) for m in model.metrics) == [("loss", 2, 0.25), ("pass_at_1", 2, 0.5)]
    # The run's history keeps one entry per step; the model is an output of the run
    assert [(m.step, m.value) for m in tracker.client.get_metric_history(run, "loss")] == [(2, 0.25)]
    assert [(o.model_id, o.step) for o in tracker.client.get_run(run).outputs.model_outputs] == [(model_id, 2)]


def test_each_run_scoring_a_model_records_its_own_metrics_on_it_linked_to_the_dataset(config, tmp_path):
    tracker = Tracker(config)
    model = tracker.log_checkpoint(tracker.pipeline_run("pipe-s"), fake_checkpoint(tmp_path / "ck"), name="ck")
    first, second = tracker.pipeline_run("eval-1"), tracker.pipeline_run("eval-2")
    digest = hashlib.sha256(b"eval tasks").hexdigest()
    for run, value in ((first, 0.25), (second, 0.5)):
        for _ in range(2):  # a rerun links and logs nothing twice
            tracker.log_model_input(run, model)
            tracker.log_model_metrics(run, model, {"pass@1": value}, dataset=("eval-tasks", digest))
        tracker.log_model_metrics(run, model, {"pass@1": 0.9})  # step 0 again: ignored

    on_model = sorted((m.run_id == first, m.key, m.value, m.step, m.dataset_name, m.dataset_digest)
                      for m in tracker.client.get_logged_model(model).metrics)
    assert on_model == [(False, "pass_at_1", 0.5, 0, "eval-tasks", digest[:36]), (True, "pass_at_1", 0.25, 0, "eval-tasks", digest[:36])]
    for run, value in ((first, 0.25), (second, 0.5)):
        assert [(m.step, m.value) for m in tracker.client.get_metric_history(run, "pass_at_1")] == [(0, value)]
        assert [m.model_id for m in tracker.client.get_run(run).inputs.model_inputs] == [model]


def test_new_content_in_the_same_folder_is_a_new_model(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.pipeline_run("pipe-n")
    first = tracker.log_checkpoint(run, fake_checkpoint(tmp_path / "ck", 0.0), name="ck")
    shutil.rmtree(tmp_path / "ck")
    assert tracker.log_checkpoint(run, fake_checkpoint(tmp_path / "ck", 1.0), name="ck") != first


def test_a_folder_without_safetensors_is_not_a_checkpoint(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.pipeline_run("pipe-e")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no \\*.safetensors file"):
        tracker.log_checkpoint(run, tmp_path / "empty", name="x")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tracker.log_checkpoint(run, tmp_path / "missing", name="x")


def test_log_weights_copies_the_model_files_but_not_the_trainer_state(config, tmp_path):
    tracker = Tracker(config.model_copy(update={"log_weights": True}))
    run = tracker.pipeline_run("pipe-w")
    model_id = tracker.log_checkpoint(run, fake_checkpoint(tmp_path / "ck"), name="ck")
    files = sorted(f.path for f in tracker.client.list_logged_model_artifacts(model_id))
    assert files == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
    assert "mlflow.model.isExternal" not in tracker.client.get_logged_model(model_id).tags


def test_registering_twice_gives_one_version_and_aliases_move(config, tmp_path):
    tracker = Tracker(config)
    run = tracker.stage_run(tracker.pipeline_run("pipe-r"), "dapo")
    first = tracker.log_checkpoint(run, fake_checkpoint(tmp_path / "step-1", 1.0), name="step-1", step=1)
    second = tracker.log_checkpoint(run, fake_checkpoint(tmp_path / "step-2", 2.0), name="step-2", step=2)

    assert tracker.register(first) == "1"
    assert tracker.register(first, aliases=("candidate", "champion")) == "1"
    assert tracker.register(second, tags={"pass@1": 0.5}) == "2"
    name = config.registered_model
    assert sorted(str(v.version) for v in tracker.client.search_model_versions(f"name = '{name}'")) == ["1", "2"]
    assert (tracker.alias_version("candidate"), tracker.alias_version("champion")) == ("2", "1")

    tracker.set_alias("champion", "2")
    assert tracker.alias_version("champion") == "2"
    assert tracker.checkpoint_for("champion") == (tmp_path / "step-2").resolve()
    assert tracker.checkpoint_for("1") == (tmp_path / "step-1").resolve()
    version = tracker.client.get_model_version(name, "2")
    assert {k: version.tags[k] for k in ("swerl.model_id", "swerl.step", "pass_at_1")} == {
        "swerl.model_id": second, "swerl.step": "2", "pass_at_1": "0.5",
    }
    assert json.loads(tracker.client.get_logged_model(second).tags["mlflow.modelVersions"]) == [{"name": name, "version": "2"}]


def test_an_unset_alias_is_a_clear_error(config):
    tracker = Tracker(config)
    assert tracker.alias_version("champion") is None  # not even the registered model exists yet
    with pytest.raises(LookupError, match=f"alias 'champion' is not set on registered model '{config.registered_model}'"):
        tracker.checkpoint_for("champion")
    with pytest.raises(LookupError, match=f"version 7 of registered model '{config.registered_model}' does not exist"):
        tracker.checkpoint_for("7")
