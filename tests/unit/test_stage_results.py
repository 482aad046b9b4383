"""Typed stage results: what the training and evaluation stages hand the next stage, and how
the ledger stores them and reads them back (a ledger of the older dict shape included)."""

from __future__ import annotations

import json

import pytest

from swerl.orchestration.ledger import Ledger, LedgerError
from swerl.orchestration.results import EvalResult, PolicyRef, StageResult


def test_a_policy_ref_names_its_registry_version_when_it_has_one():
    trained = PolicyRef.of("runs/p/rft/train/final", "rft", {"model_id": "m-1", "version": "3"})
    assert trained == PolicyRef(path="runs/p/rft/train/final", policy_version="rft", model_id="m-1", registered_version="3")
    assert trained.model_arg() == "version:3"
    assert PolicyRef.of("tiny", "0").model_arg() == "tiny"


def test_a_stage_result_round_trips_through_the_ledger_typed(tmp_path):
    result = StageResult(policy=PolicyRef.of("final", "dapo-1", {"model_id": "m-2", "version": "4"}),
                         metrics={"train/steps": 2.0, "rollout/mean_reward": 0.25}, run_id="r1", trained=True, seconds=3.5)
    evaluated = EvalResult(policy=result.policy, metrics={"eval/pass_at_1": 0.5}, run_id="r2", promoted=False, seconds=1.0)
    Ledger(tmp_path).record("iter-1", result)
    Ledger(tmp_path).record("eval-iter-1", evaluated)
    again = Ledger(tmp_path)
    assert again.get("iter-1", StageResult) == result
    assert again.get("eval-iter-1", EvalResult) == evaluated
    assert again.get("iter-2", StageResult) is None
    assert again.get("iter-1")["policy"] == {"path": "final", "policy_version": "dapo-1", "model_id": "m-2",
                                             "registered_version": "4"}


def test_a_ledger_written_with_the_old_dict_results_reads_typed(tmp_path):
    # what flows/rft.py returned and the pipeline recorded before the typed results
    old = {"rft": {"result": {"policy": {"path": "runs/p/rft/train/final", "policy_version": "rft", "model_id": "m-1",
                                         "registered_version": "2"},
                              "metrics": {"rft/kept": 3.0, "train/trained": 1.0}, "run_id": "abc", "trained": True,
                              "reason": None, "seconds": 12.5}, "finished_at": 1.0},
           "start-policy": {"result": {"path": "tiny", "policy_version": "0", "model_id": None, "registered_version": None},
                            "finished_at": 1.0}}
    (tmp_path / "ledger.json").write_text(json.dumps(old))
    ledger = Ledger(tmp_path)
    assert ledger.get("rft", StageResult) == StageResult(
        policy=PolicyRef(path="runs/p/rft/train/final", policy_version="rft", model_id="m-1", registered_version="2"),
        metrics={"rft/kept": 3.0, "train/trained": 1.0}, run_id="abc", trained=True, reason=None, seconds=12.5)
    assert ledger.get("start-policy", PolicyRef) == PolicyRef(path="tiny", policy_version="0")


def test_an_entry_that_is_no_result_is_refused_naming_the_file_the_stage_and_the_fix(tmp_path):
    (tmp_path / "ledger.json").write_text(json.dumps({"rft": {"result": {"trained": True}, "finished_at": 1.0}}))
    path = tmp_path / "ledger.json"
    with pytest.raises(LedgerError) as e:
        Ledger(tmp_path).get("rft", StageResult)
    assert str(e.value) == (f"{path}: the entry of stage 'rft' does not read as a StageResult (1 error(s): ('policy',) "
                            f"Field required); remove 'rft' from {path} to rerun that stage, or start a new pipeline name")


def test_a_registry_version_naming_the_policy_s_checkpoint_passes_and_another_is_refused(tmp_path):
    step = tmp_path / "warm-start" / "train" / "step-000760"
    step.mkdir(parents=True)
    (tmp_path / "warm-start" / "train" / "final").symlink_to("step-000760")
    other = tmp_path / "s2" / "iter-1" / "train" / "step-000024"
    other.mkdir(parents=True)
    pol = PolicyRef.of(str(tmp_path / "warm-start" / "train" / "final"), "warm-start", {"model_id": "m-1", "version": "1"})
    pol.check_registered(str(step), "sqlite:///a.db")  # the link and its target: one checkpoint
    with pytest.raises(RuntimeError) as refused:
        pol.check_registered(str(other), "sqlite:///b.db")
    assert str(refused.value) == (
        f"policy 'warm-start' of this run is {tmp_path}/warm-start/train/final, registered as version 1; version 1 in the "
        f"tracking store sqlite:///b.db is {other}: the run folder moved, or the run was started against another MLflow "
        "store. Point tracking.tracking_uri (or MLFLOW_TRACKING_URI) back at that store and the folder back where it was, "
        "or start the run again in a new run folder")
