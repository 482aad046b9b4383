"""The asynchronous pipeline (``dapo.off_policy.max_staleness: 1``) end to end, killed inside its overlap.

DAPO iteration 2 samples while iteration 1 trains. The pipeline runs in a process of its own and is killed with
SIGKILL when both are under way (iteration 2 has stored trajectories, iteration 1 has written a training step but
is not finished), then rerun in this process to the end. What must hold: iteration 2's stored trajectories are not
resampled, iteration 1's update does not train a step twice, the ledger says which policy sampled each iteration,
the trajectories record their staleness, MLflow has the rollout's staleness figures, and no container outlives the
run. Real Prefect API, MLflow on SQLite, Docker, the tiny model; rewards from an external grader file so every group
has an advantage (see test_pipeline_flow.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.support.killed_pipeline import async_pipeline, in_overlap, parts, run_until, train_steps

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = f"async-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def killed_then_resumed(prefect_api, docker_ready, demo, task_slice, tmp_path_factory):
    from flows._hooks import container_label
    from flows.pipeline import pipeline
    from swerl.orchestration.ledger import Ledger

    tmp = tmp_path_factory.mktemp("async")
    params = async_pipeline(NAME, tmp, task_slice, demo.repos_dir, "async")
    run_dir = params.run_dir
    log = run_until(tmp, params, prefect_api, lambda: in_overlap(run_dir), timeout_s=1200, poll_s=0.2)
    assert in_overlap(run_dir), f"the kill did not land inside the overlap; see {log}"
    store = run_dir / "iter-2" / "rollout" / "trajectories"
    killed = {"parts": parts(store), "ledger": Ledger(run_dir).finished(), "steps": train_steps(run_dir / "iter-1" / "train")}
    state = pipeline(params, return_state=True)
    assert state.is_completed(), state
    return {"params": params, "killed": killed, "summary": state.result(), "parts": parts(store), "store": store,
            "ledger": json.loads((run_dir / "ledger.json").read_text()), "containers": container_label(NAME),
            "steps": train_steps(run_dir / "iter-1" / "train"), "run_dir": run_dir}


def test_the_kill_landed_while_iteration_2_sampled_beside_iteration_1_s_update(killed_then_resumed):
    killed = killed_then_resumed["killed"]
    assert "iter-1-rollout" in killed["ledger"] and "iter-1" not in killed["ledger"]
    assert killed["parts"] and killed["steps"]


def test_the_rerun_resampled_no_stored_trajectory_and_trained_no_step_twice(killed_then_resumed):
    r = killed_then_resumed
    for name, data in r["killed"]["parts"].items():
        assert r["parts"][name] == data, f"{name} was rewritten"
    assert len(r["parts"]) == 6  # 3 tasks x 2 samples, each stored once
    assert r["steps"] == sorted(set(r["steps"])) and r["steps"][:len(r["killed"]["steps"])] == r["killed"]["steps"]


def test_the_ledger_says_which_policy_sampled_each_iteration_and_holds_every_stage_once(killed_then_resumed):
    ledger = killed_then_resumed["ledger"]
    assert sorted(ledger) == sorted(["images", "rft", "eval-rft", "iter-1-rollout", "iter-1", "iter-2-rollout", "iter-2",
                                     "eval-iter-2"])
    order = list(ledger)  # iteration 2's rollouts may end before or after iteration 1's update: they overlap
    assert order.index("iter-1-rollout") < order.index("iter-1") < order.index("iter-2") < order.index("eval-iter-2")
    assert order.index("iter-1-rollout") < order.index("iter-2-rollout") < order.index("iter-2")
    assert ledger["iter-1"]["result"]["sampled_by"] == {"rft": 6}
    # sampled first by the RFT policy beside iteration 1's update, finished by dapo-1 after the rerun trained it
    by = ledger["iter-2"]["result"]["sampled_by"]
    assert sum(by.values()) == 6 and set(by) <= {"rft", "dapo-1"} and by.get("rft", 0) >= len(killed_then_resumed["killed"]["parts"])


def test_each_trajectory_records_its_staleness_and_mlflow_has_the_rollout_s_figures(killed_then_resumed):
    from mlflow import MlflowClient

    from swerl.rl.staleness import staleness
    from swerl.rollout.store import TrajectoryStore

    trajectories = TrajectoryStore(killed_then_resumed["store"]).trajectories()
    assert [t.staleness for t in trajectories] == [staleness(t, "dapo-1") for t in trajectories]
    assert set(t.staleness for t in trajectories) <= {0, 1} and 1 in {t.staleness for t in trajectories}
    params = killed_then_resumed["params"]
    client = MlflowClient(params.tracking.tracking_uri)
    exp = client.get_experiment_by_name("async")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("swerl.stage") == "iter-2")
    metrics = run.data.metrics
    mean = sum(t.staleness for t in trajectories) / len(trajectories)
    assert metrics["rollout/staleness_mean"] == pytest.approx(mean) and metrics["rollout/stale_dropped"] == 0.0
    assert metrics["data/stale_dropped"] == 0.0 and "train/is_weight_mean" in metrics


def test_each_iteration_records_where_its_time_went_and_iteration_2_waited_for_less_than_it_sampled(killed_then_resumed):
    from swerl.orchestration.results import StageResult

    ledger = killed_then_resumed["ledger"]
    times = {k: StageResult.model_validate(ledger[k]["result"]).times for k in ("iter-1", "iter-2")}
    for t in times.values():
        assert t.sampling_s > 0 and t.training_s > 0 and 0 < t.grading_s < t.sampling_s
    # iteration 1 sampled after RFT's evaluation, with nothing to hide behind; its record is the sampling stage's
    assert times["iter-1"].sampling_s == ledger["iter-1-rollout"]["result"]["seconds"]
    # iteration 2 sampled beside iteration 1's update: its update waited only for what was left of it
    assert times["iter-2"].waiting_s < times["iter-2"].sampling_s
    assert times["iter-2"].sampling_s == ledger["iter-2-rollout"]["result"]["seconds"]


def test_the_new_policy_was_announced_on_the_feed(killed_then_resumed):
    from swerl.rollout.policy_feed import newest

    entry = newest(killed_then_resumed["run_dir"] / "policies.jsonl")
    assert entry.version == "dapo-2" and entry.checkpoint == Path(killed_then_resumed["summary"].final_policy.path)


def test_no_container_outlives_the_pipeline(killed_then_resumed):
    from swerl.envs.docker_sandbox import running_containers

    assert running_containers(killed_then_resumed["containers"]) == []
