"""The pure parts of orchestration: the stage ledger, per-stage metrics, flow parameters,
which failures a task retries, and the image cache key."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from swerl.agent.trajectory import ExitReason, Trajectory
from swerl.eval.report import build_report
from swerl.orchestration.ledger import Ledger
from swerl.orchestration.metrics import display_rows, eval_metrics, prefixed, rollout_metrics, stage_row, train_metrics
from swerl.orchestration.params import EvaluateParams, PipelineParams
from swerl.rl.rewards import RewardConfig


def _deployment(name: str):
    """A file of deployments/, parsed."""
    from pathlib import Path

    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "deployments" / name).read_text())


def traj(instance: str, sample: int, exit_reason: str = "submitted", resolved: bool | None = False, turns: int = 5,
         failure: str | None = "tests_failed") -> Trajectory:
    return Trajectory(instance_id=instance, sample_index=sample, trajectory_id=f"{instance}/{sample}", policy_version="v0",
                      exit_reason=ExitReason(exit_reason), resolved=resolved, num_turns=turns,
                      grade_failure=None if resolved else failure)


# --- ledger ------------------------------------------------------------------------------


def test_the_ledger_keeps_finished_stages_in_order_across_instances(tmp_path):
    ledger = Ledger(tmp_path)
    assert ledger.get("images") is None and ledger.finished() == []
    ledger.record("images", {"ready": 9})
    ledger.record("eval-start", {"pass_at_1": 0.0})
    ledger.record("rft", {"trained": True})
    again = Ledger(tmp_path)  # a rerun in a new process
    assert again.finished() == ["images", "eval-start", "rft"]
    assert again.get("images") == {"ready": 9}
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]  # no temp file left behind


def test_a_moved_run_folder_s_ledger_points_into_the_folder_where_it_is_now(tmp_path):
    import shutil

    old, new = tmp_path / "runs" / "seed-0", tmp_path / "moved" / "seed-0"
    Ledger(old).record("rft", {"policy": {"path": str(old / "rft" / "train" / "final")}, "tasks": str(old),
                               "stores": [str(old / "rft" / "rollout")], "model": str(tmp_path / "models" / "base"),
                               "name": "seed-0", "steps": 4})
    shutil.move(str(old), str(new))
    old.mkdir(parents=True)  # another run now lives where the first one did
    assert Ledger(new).get("rft") == {"policy": {"path": str(new / "rft" / "train" / "final")}, "tasks": str(new),
                                      "stores": [str(new / "rft" / "rollout")], "model": str(tmp_path / "models" / "base"),
                                      "name": "seed-0", "steps": 4}


def test_relative_paths_of_a_moved_run_folder_follow_it_too(tmp_path, monkeypatch):
    import shutil

    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    old, new = Path("runs") / "seed-0", Path("moved") / "seed-0"
    Ledger(old).record("rft", {"policy": {"path": str(old / "rft" / "train" / "final")}, "abs": str((old / "rft").resolve())})
    shutil.move(str(old), str(new))
    assert Ledger(new).get("rft") == {"policy": {"path": str(new / "rft" / "train" / "final")},
                                      "abs": str((new / "rft").resolve())}


def test_a_ledger_entry_written_before_entries_knew_their_folder_reads_as_written(tmp_path):
    import json

    (tmp_path / "ledger.json").write_text(json.dumps({"rft": {"result": {"path": "/elsewhere/rft"}, "finished_at": 1.0}}))
    assert Ledger(tmp_path).get("rft") == {"path": "/elsewhere/rft"}


# --- metrics -----------------------------------------------------------------------------


def test_rollout_metrics_count_rewards_groups_exits_and_failure_classes():
    runs = [traj("a", 0, resolved=True, turns=4), traj("a", 1, resolved=False, turns=4),
            traj("b", 0, "format_errors", resolved=False, turns=3, failure="no_patch"),
            traj("b", 1, "format_errors", resolved=False, turns=3, failure="no_patch")]
    m = rollout_metrics(runs, RewardConfig(), wall_s=2.0)
    assert m["trajectories"] == 4.0
    assert m["mean_reward"] == 0.25  # one success, no length penalty below L_thr 10
    assert m["solved_fraction"] == 0.25
    assert m["groups"] == 2.0 and m["groups_dropped_fraction"] == 0.5  # group b has equal rewards
    assert m["turns_mean"] == 3.5
    assert (m["exit_submitted"], m["exit_format_errors"]) == (2.0, 2.0)
    assert (m["failure_resolved"], m["failure_tests_failed"], m["failure_no_patch"]) == (1.0, 1.0, 2.0)
    assert m["tokens_per_s"] == 0.0


def test_a_length_penalty_makes_equal_outcomes_unequal_rewards():
    runs = [traj("a", 0, turns=2), traj("a", 1, turns=4)]
    m = rollout_metrics(runs, RewardConfig(l_thr=1, t_max=5))
    assert m["mean_reward"] == pytest.approx(((1 - 2) / 4 + (1 - 4) / 4) / 2)
    assert m["groups_dropped_fraction"] == 0.0


def test_eval_metrics_carry_pass_at_1_its_error_and_pass_at_k():
    runs = [traj("a", 0, resolved=True), traj("a", 1, resolved=False), traj("b", 0), traj("b", 1)]
    m = eval_metrics(build_report(runs, 2))
    assert m["pass_at_1"] == 0.25
    assert m["pass_at_1_sem"] == pytest.approx(0.25)  # per-run means 0.5 and 0.0
    assert m["pass_at_2"] == 0.5
    assert (m["tasks"], m["runs"]) == (2.0, 2.0)


def test_train_metrics_average_each_key_over_steps_and_skip_missing_or_nan():
    steps = [{"loss": 1.0, "clip_frac_high": 0.1, "entropy": 2.0}, {"loss": 3.0, "clip_frac_high": float("nan")}]
    assert train_metrics(steps) == {"steps": 2.0, "loss": 2.0, "clip_frac_high": 0.1, "entropy": 2.0}
    assert train_metrics([]) == {"steps": 0.0}
    assert prefixed("train", {"loss": 1}) == {"train/loss": 1.0}


def test_a_stage_row_keeps_the_figures_that_have_a_column():
    rft = stage_row("rft", 1, "rft", {"eval/pass_at_1": 0.5, "rollout/mean_reward": 1.0, "rollout/pass_at_1": 0.9,
                                      "train/entropy": 2.123456, "train/trained": 1.0, "rollout/turns_mean": 4.0}, 60.0)
    assert rft == {"stage": "rft", "step": 1, "policy": "rft", "seconds": 60.0, "pass_at_1": 0.5, "mean_reward": 1.0,
                   "entropy": 2.123456, "trained": 1.0}


def test_the_prefect_table_shows_eight_columns_in_words():
    start = stage_row("start", 0, "0", {"eval/pass_at_1": 0.236, "eval/pass_at_1_sem": 0.007}, 65.2)
    rft = stage_row("rft", 1, "rft", {"eval/pass_at_1": 0.5, "rollout/mean_reward": 0.35125, "rollout/solved_fraction": 0.27,
                                      "train/entropy": 2.1, "train/trained": 1.0}, 48.0)
    assert display_rows([start, rft]) == [
        {"stage": "start", "step": 0, "policy": "0", "Pass@1": "23.6% ± 0.7%", "reward": "", "solved": "", "trained": "",
         "time": "65 s"},
        {"stage": "rft", "step": 1, "policy": "rft", "Pass@1": "50.0%", "reward": "0.351", "solved": "27.0%",
         "trained": "yes", "time": "48 s"},
    ]
    assert display_rows([start], runs=1)[0]["Pass@1"] == "23.6%"  # one run has no SEM to show


# --- parameters ----------------------------------------------------------------------------


def test_pipeline_parameters_have_a_json_schema_for_the_ui_form_and_sane_defaults():
    schema = PipelineParams.model_json_schema()
    assert {"name", "tasks", "sampler", "rft", "dapo", "eval", "tracking"} <= set(schema["properties"])
    p = PipelineParams()
    assert (p.name, p.dapo.iterations, p.dapo.loss.eps_low, p.dapo.loss.eps_high, p.rft.train.optimizer.lr) == ("demo", 2, 0.2, 0.3, 5e-6)
    assert p.run_dir.as_posix() == "runs/pipelines/demo"
    assert PipelineParams.model_validate_json(p.model_dump_json()) == p


@pytest.mark.parametrize("bad", [{"name": "../escape"}, {"name": ""}, {"dapo": {"group_size": 1}}, {"eval": {"runs": 0}},
                                 {"sampler": {"engine": "gpt"}}, {"surprise": 1}])
def test_bad_pipeline_parameters_are_refused(bad):
    with pytest.raises(ValidationError):
        PipelineParams(**bad)


# --- retries --------------------------------------------------------------------------------


def test_tasks_retry_infrastructure_failures_only():
    import docker.errors
    from prefect.states import Failed

    from swerl.envs.docker_client import DockerUnavailableError
    from swerl.stages.errors import NothingToTrainError, StageInputError
    from tasks.common import retry_on_infrastructure

    def retried(exc: BaseException) -> bool:
        return retry_on_infrastructure(None, None, Failed(data=exc))

    assert retried(DockerUnavailableError("no daemon"))
    assert retried(docker.errors.APIError("500 Server Error"))
    assert retried(ConnectionResetError("peer reset"))
    assert not retried(StageInputError("bad task file"))
    assert not retried(NothingToTrainError("equal rewards"))
    assert not retried(ValueError("a bug"))
    assert not retried(KeyError("a bug"))


# --- caching ---------------------------------------------------------------------------------


def test_the_image_cache_key_follows_the_content_of_tasks_and_repositories(tmp_path):
    from swerl.stages.images import ImagesStage
    from tasks.images import images_cache_key

    tasks, repos = tmp_path / "tasks.jsonl", tmp_path / "repos"
    (repos / "o__r").mkdir(parents=True)
    (repos / "o__r" / "f.py").write_text("x = 1\n")
    tasks.write_text(json.dumps({"instance_id": "o__r-1"}) + "\n")
    stage = ImagesStage(tasks=tasks, repos=repos, manifest=tmp_path / "images.json")
    key = images_cache_key(None, {"stage": stage})
    assert key == images_cache_key(None, {"stage": stage})
    (repos / "o__r" / "f.py").write_text("x = 2\n")
    changed_repo = images_cache_key(None, {"stage": stage})
    tasks.write_text(json.dumps({"instance_id": "o__r-2"}) + "\n")
    changed_tasks = images_cache_key(None, {"stage": stage})
    assert len({key, changed_repo, changed_tasks}) == 3
    assert len(key) == 64


# --- the `swerl pipeline run` command ------------------------------------------------------------


def test_pipeline_run_refuses_bad_parameters_before_starting_anything(tmp_path):
    from typer.testing import CliRunner

    from swerl.cli import app

    bad = tmp_path / "p.yaml"
    bad.write_text("name: ../escape\ndapo: {group_size: 1}\n")
    result = CliRunner().invoke(app, ["pipeline", "run", "--params", str(bad)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "invalid pipeline parameters" in text and "name" in text and "dapo.group_size" in text
    missing = CliRunner().invoke(app, ["pipeline", "run", "--params", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "no such file" in " ".join(missing.output.split())


def test_the_pipeline_deployment_parameters_are_valid_pipeline_parameters():
    from pathlib import Path

    spec = _deployment("prefect.yaml")
    by_name = {d["name"]: d for d in spec["deployments"]}
    p = PipelineParams.model_validate(by_name["pipeline"]["parameters"]["params"])
    assert (p.name, p.dapo.iterations, p.rft.sampler, p.model) == ("demo", 2, None, "swerl/models/resources/tiny-warm-s0")
    # the curriculum the shipped policy was warm-started beside, with fewer held-out tasks: the held-out split is
    # drawn last, so they are the first of the recipe's, ones the policy never saw
    recipe = PipelineParams.model_validate(_deployment("warm-start.yaml"))
    assert (p.curriculum.model_copy(update={"heldout": recipe.curriculum.heldout}), p.sampler) == (recipe.curriculum, recipe.sampler)
    assert (p.curriculum.heldout, recipe.curriculum.heldout) == (70, 100)
    nightly = EvaluateParams.model_validate(by_name["evaluate"]["parameters"]["params"])
    assert (nightly.tasks, nightly.sampler) == (Path("runs/pipelines/demo/curriculum/heldout.jsonl"), p.sampler)


def test_tracking_tasks_retry_a_failed_call_but_not_a_refused_one():
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR, INVALID_PARAMETER_VALUE
    from prefect.states import Failed

    from tasks.common import retry_on_tracking_failure

    def retried(exc: BaseException) -> bool:
        return retry_on_tracking_failure(None, None, Failed(data=exc))

    assert retried(MlflowException("API request failed", error_code=INTERNAL_ERROR))
    assert retried(ConnectionRefusedError("mlflow server down"))
    assert not retried(MlflowException("'name' exceeds the maximum length", error_code=INVALID_PARAMETER_VALUE))
    assert not retried(LookupError("alias 'champion' is not set"))


def test_a_curriculum_replaces_the_task_files_and_feeds_the_warm_start():
    p = PipelineParams(curriculum={"seed": 3, "warmup": 10, "train": 10, "heldout": 10}, warm_start={})
    assert (p.curriculum.seed, p.warm_start.tasks, p.warm_start.sampler.engine.kind) == (3, None, "scripted")
    with pytest.raises(ValidationError, match="either curriculum or tasks"):
        PipelineParams(curriculum={}, tasks="t.jsonl")
    with pytest.raises(ValidationError, match="warm_start.tasks is required"):
        PipelineParams(warm_start={})


def test_every_task_set_is_validated_unless_validate_sets_names_fewer():
    assert PipelineParams().validate_sets == ["train", "eval", "warm"]
    assert PipelineParams(validate_sets=["eval"]).validate_sets == ["eval"]
    with pytest.raises(ValidationError, match="validate_sets"):
        PipelineParams(validate_sets=["heldout"])


def test_dapo_target_kl_is_off_unless_set_and_positive():
    assert PipelineParams().dapo.train.target_kl is None
    assert PipelineParams(dapo={"train": {"target_kl": 0.1}}).dapo.train.target_kl == 0.1
    with pytest.raises(ValidationError, match="target_kl"):
        PipelineParams(dapo={"train": {"target_kl": 0.0}})


def test_the_candidate_learning_recipe_is_the_measured_one():
    """deployments/learning-cap.yaml: the recipe its header's three-seed figures were measured with."""
    p = PipelineParams.model_validate(_deployment("learning-cap.yaml"))
    assert (p.curriculum.heldout, p.validate_sets, p.warm_start.grade, p.warm_start.train.epochs) == (100, ["eval"], False, 20)
    assert (p.rft.attempts, p.rft.train.optimizer.lr, p.eval.runs, p.dapo.iterations, p.dapo.loss.neg_prob_cap) == (1, 5e-4, 2, 2, 0.5)
    assert p.dapo.train.optimizer.lr == 3e-4 and p.dapo.loss.eps_high == 0.3


def test_the_learning_run_parameters_are_valid_pipeline_parameters():
    p = PipelineParams.model_validate(_deployment("learning.yaml"))
    assert p.curriculum is not None and p.warm_start is not None and p.warm_start.tasks is None
    assert p.curriculum.bug_kinds == ["string_method", "arithmetic_operator", "comparison_boundary"]
    assert p.warm_start.sampler.engine.give_up == 0.5
    assert (p.rft.attempts, p.rft.train.epochs, p.eval.runs, p.dapo.iterations, p.dapo.group_size) == (2, 1, 4, 2, 4)
    assert p.sampler.engine.torch_threads == 1
