"""State hooks shared by the flows: a cancelled or crashed run leaves no sandbox behind, and a
failed, crashed or cancelled run leaves no MLflow run RUNNING."""

from __future__ import annotations

from typing import Any

# the tags tasks.tracking.prefect_tags puts on every MLflow run a flow opens
_FLOW_RUN_TAGS = ("prefect.flow_run_id", "prefect.root_flow_run_id")


def container_label(name: str) -> str:
    """The Docker label value (swerl run id) of every sandbox a pipeline starts."""
    return f"pipeline-{name}"


def _field(value: Any, name: str) -> Any:
    # flow run parameters arrive as the models themselves or as their JSON form
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def reap_run_containers(flow: Any, flow_run: Any, state: Any) -> None:
    """Remove this run's sandboxes, and any whose owner process died (a crashed worker), on the local daemon,
    every Docker host of the run's sandbox pools and every Kubernetes namespace its sandboxes use."""
    from swerl.envs.docker_hosts import hosts_in
    from swerl.envs.docker_sandbox import reap_containers
    from swerl.envs.k8s_sandbox import kube_configs_in, reap_pods

    params = getattr(flow_run, "parameters", None) or {}
    name = _field(params.get("params") or {}, "name")
    label = params.get("container_label") or (container_label(name) if name else None)
    try:
        hosts = hosts_in(params)
        if label:
            reap_containers(run_id=label, hosts=hosts)
        reap_containers(hosts=hosts)
        for kube in kube_configs_in(params):
            reap_pods(kube, run_id=label)
    except Exception as e:  # noqa: BLE001 - a hook must not mask the state it reacts to
        print(f"sandbox clean-up failed: {type(e).__name__}: {e}")


def _tracker_of(flow_run: Any) -> Any | None:
    """The Tracker of the flow run's ``tracking`` (or ``params.tracking``) parameter, or of the default
    every flow uses when it is not given (a deployment's, the UI's, a schedule's parameters never carry
    it); None when its SQLite database does not exist (nothing was logged there)."""
    from swerl.tracking import Tracker, TrackingConfig
    from swerl.tracking.config import sqlite_path

    params = getattr(flow_run, "parameters", None) or {}
    tracking = params.get("tracking") or _field(params.get("params") or {}, "tracking") or TrackingConfig()
    config = TrackingConfig.model_validate(tracking, from_attributes=True).resolved()
    db = sqlite_path(config.tracking_uri)
    if db is not None and not db.is_file():
        return None
    return Tracker(config)


def end_mlflow_runs(flow_run: Any, status: str) -> list[str]:
    """End the MLflow runs still RUNNING that this flow run or one of its subflows opened as
    ``status``; a rerun of the flow reopens the ones it resumes."""
    try:
        tracker = _tracker_of(flow_run)
        if tracker is None:
            return []
        ended: list[str] = []
        for tag in _FLOW_RUN_TAGS:
            ended += tracker.end_runs({tag: str(flow_run.id)}, status)
        if ended:
            print(f"MLflow run(s) {', '.join(ended)} ended as {status}")
        return ended
    except Exception as e:  # noqa: BLE001 - a hook must not mask the state it reacts to
        print(f"ending the MLflow runs failed: {type(e).__name__}: {e}")
        return []


def fail_mlflow_runs(flow: Any, flow_run: Any, state: Any) -> None:
    """A failed or crashed flow run's MLflow runs end FAILED."""
    end_mlflow_runs(flow_run, "FAILED")


def kill_mlflow_runs(flow: Any, flow_run: Any, state: Any) -> None:
    """A cancelled flow run's MLflow runs end KILLED."""
    end_mlflow_runs(flow_run, "KILLED")


HOOKS = dict(on_failure=[fail_mlflow_runs], on_cancellation=[reap_run_containers, kill_mlflow_runs],
             on_crashed=[reap_run_containers, fail_mlflow_runs])
