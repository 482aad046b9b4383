"""A flow that fails, crashes or is cancelled after opening MLflow runs ends them FAILED or
KILLED (the hooks of flows._hooks) instead of leaving them RUNNING; against the test Prefect
API and MLflow on SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect import flow

from flows._hooks import HOOKS, kill_mlflow_runs
from swerl.orchestration.params import EvaluateParams, TrackingConfig
from tasks import tracking as tr

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = "run-states"


@flow(name="opens-a-run-then-fails", **HOOKS)
def opens_a_run_then_fails(tracking: TrackingConfig, name: str) -> None:
    tr.stage_run(tracking, None, "evaluate", standalone_id=name)
    raise RuntimeError("the inference server went away")


@flow(name="stage-that-fails", **HOOKS)
def stage_that_fails(tracking: TrackingConfig, parent_run_id: str) -> None:
    tr.stage_run(tracking, parent_run_id, "rft")
    raise RuntimeError("training diverged")


@flow(name="pipeline-whose-stage-fails", **HOOKS)
def pipeline_whose_stage_fails(tracking: TrackingConfig, name: str) -> None:
    parent = tr.pipeline_run(tracking, name, {})
    images = tr.stage_run(tracking, parent.run_id, "images")
    tr.finish_run(tracking, images)
    stage_that_fails(tracking, parent.run_id)


@flow(name="opens-a-run-and-stops", **HOOKS)
def opens_a_run_and_stops(tracking: TrackingConfig, name: str) -> None:
    # what a flow cancelled between opening and closing its run leaves behind
    tr.stage_run(tracking, None, "evaluate", standalone_id=name)


@flow(name="fails-before-logging", **HOOKS)
def fails_before_logging(tracking: TrackingConfig) -> None:
    raise ValueError("bad task file")


@flow(name="evaluate-as-deployed-fails", **HOOKS)
def evaluate_as_deployed_fails(params: EvaluateParams = EvaluateParams()) -> None:
    tr.stage_run(params.tracking, None, "evaluate", standalone_id="deployed")
    raise RuntimeError("the inference server went away")


# run in a process of its own, which the test terminates as a worker shutting down would
HANGS = """
import sys, time
from prefect import flow
from flows._hooks import HOOKS
from swerl.orchestration.params import TrackingConfig
from tasks import tracking as tr

@flow(name="opens-a-run-then-hangs", **HOOKS)
def opens_a_run_then_hangs(tracking: TrackingConfig, name: str) -> None:
    tr.stage_run(tracking, None, "evaluate", standalone_id=name)
    print("RUN OPEN", flush=True)
    time.sleep(600)

opens_a_run_then_hangs(TrackingConfig.model_validate_json(sys.argv[1]), sys.argv[2])
"""


@pytest.fixture
def tracking(tmp_path) -> TrackingConfig:
    return TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment=EXPERIMENT)


def runs_by_name(tracking: TrackingConfig) -> dict[str, tuple[str, str]]:
    """Each MLflow run's name -> (status, the Prefect flow run that last opened it)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking.tracking_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return {r.info.run_name: (r.info.status, r.data.tags["prefect.flow_run_id"])
            for r in client.search_runs([experiment.experiment_id])}


def test_a_failed_flow_ends_its_run_failed(prefect_api, tracking):
    state = opens_a_run_then_fails(tracking, "nightly", return_state=True)
    assert state.is_failed()
    assert runs_by_name(tracking) == {"nightly": ("FAILED", str(state.state_details.flow_run_id))}


def test_a_failed_stage_ends_its_run_and_its_pipeline_s_run_failed_and_leaves_finished_ones(prefect_api, tracking):
    state = pipeline_whose_stage_fails(tracking, "pipe", return_state=True)
    assert state.is_failed()
    runs = runs_by_name(tracking)
    assert {name: status for name, (status, _) in runs.items()} == {
        "pipeline pipe": "FAILED", "images": "FINISHED", "rft": "FAILED"}
    assert runs["pipeline pipe"][1] == str(state.state_details.flow_run_id)
    assert runs["rft"][1] != runs["pipeline pipe"][1]  # the subflow's own run, ended by its own hook


def test_a_flow_that_fails_before_logging_creates_no_database(prefect_api, tracking, tmp_path):
    assert fails_before_logging(tracking, return_state=True).is_failed()
    assert not (tmp_path / "mlflow.db").exists()


def test_a_cancelled_flow_s_runs_end_killed(prefect_api, tracking):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    state = opens_a_run_and_stops(tracking, "cancelled", return_state=True)
    run_id = state.state_details.flow_run_id
    assert runs_by_name(tracking) == {"cancelled": ("RUNNING", str(run_id))}
    # Prefect's runner calls the on_cancellation hooks with the flow run as its API holds it
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(run_id)
    kill_mlflow_runs(opens_a_run_and_stops, flow_run, Cancelled())
    assert runs_by_name(tracking) == {"cancelled": ("KILLED", str(run_id))}


@pytest.mark.slow
def test_a_flow_process_terminated_mid_run_ends_its_run_failed(prefect_api, tracking):
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HANGS, tracking.model_dump_json(), "terminated"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    lines = []
    while proc.poll() is None and time.monotonic() < deadline and (not lines or "RUN OPEN" not in lines[-1]):
        lines.append(proc.stdout.readline())
    assert lines and "RUN OPEN" in lines[-1], "".join(lines)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM
    assert "Finished in state Crashed" in out
    assert [status for status, _ in runs_by_name(tracking).values()] == ["FAILED"]


def test_a_failed_flow_whose_parameters_leave_tracking_to_the_default_ends_its_run_failed(prefect_api, tmp_path,
                                                                                        monkeypatch):
    # a deployment's, the UI's and a schedule's parameters carry only what the user set: no `tracking`
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'default.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    state = evaluate_as_deployed_fails(params={"model": "champion"}, return_state=True)
    assert state.is_failed()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(TrackingConfig().experiment).experiment_id])
    assert [(r.info.run_name, r.info.status) for r in runs] == [("deployed", "FAILED")]


def test_every_flow_s_tracking_default_is_the_one_the_hooks_fall_back_on():
    import inspect

    from prefect import Flow

    from flows import build_images, dapo_iteration, evaluate, grade, pipeline, rft, rollout

    found = 0
    for module in (build_images, dapo_iteration, evaluate, grade, pipeline, rft, rollout):
        for fn in (getattr(module, n) for n in dir(module)):
            target = getattr(fn, "fn", None)
            if not isinstance(fn, Flow) or getattr(target, "__module__", "") != module.__name__:
                continue
            for p in inspect.signature(target).parameters.values():
                hints = inspect.get_annotations(target, eval_str=True)
                kind = hints.get(p.name)
                if p.name == "tracking" and p.default is not p.empty:  # a required one is always in the parameters
                    found += 1
                    assert p.default == TrackingConfig(), (module.__name__, p.name)
                elif isinstance(kind, type) and "tracking" in getattr(kind, "model_fields", {}):
                    found += 1
                    assert kind.model_fields["tracking"].get_default(call_default_factory=True) == TrackingConfig()
    assert found >= 5
