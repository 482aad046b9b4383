"""`prefect deploy --all` against a local server started by `swerl up`, then the evaluate
deployment triggered with parameters the way the UI does (an API run request), executed by
the stack's process worker, and recorded in the stack's MLflow server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _api(method: str, url: str, **kw) -> httpx.Response:
    """One API call, retried on 502/503/504 as Prefect's own client does: a server busy with
    its SQLite database answers 503 for a moment under load."""
    for attempt in range(8):
        response = httpx.request(method, url, timeout=30, **kw)
        if response.status_code not in (502, 503, 504):
            return response
        time.sleep(0.5 * 2 ** min(attempt, 4))
    return response


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from swerl.services import ServicesConfig, down, env, up

    config = ServicesConfig(home=tmp_path_factory.mktemp("stack"), prefect_port=_free_port(), mlflow_port=_free_port())
    try:
        up(config)
        yield {**env(config), "SWERL_STACK_HOME": str(config.home)}
    finally:
        down(config)


@pytest.fixture(scope="module")
def deployed(stack):
    subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml"],
                   cwd=ROOT, env={**os.environ, **stack}, check=True, capture_output=True, text=True, timeout=300)
    api = stack["PREFECT_API_URL"]
    found = _api("POST", f"{api}/deployments/filter", json={}).json()
    return {d["name"]: d for d in found}


def test_deploy_all_creates_the_three_deployments_on_the_process_pool(deployed):
    assert sorted(deployed) == ["build-images", "evaluate", "pipeline"]
    assert {d["work_pool_name"] for d in deployed.values()} == {"swerl-local"}
    assert deployed["evaluate"]["entrypoint"] == "flows/evaluate.py:evaluate"


def test_evaluate_has_an_active_nightly_schedule_for_the_champion(deployed):
    schedules = deployed["evaluate"]["schedules"]
    assert len(schedules) == 1
    assert schedules[0]["active"] is True
    assert schedules[0]["schedule"]["cron"] == "0 2 * * *"
    assert schedules[0]["schedule"]["timezone"] == "UTC"
    assert schedules[0]["parameters"]["params"]["model"] == "champion"


def test_the_deployed_forms_hold_only_described_user_fields(deployed):
    internal = {"parent_run_id", "stage", "step", "container_label", "policy_version"}
    for name, deployment in deployed.items():
        schema = deployment["parameter_openapi_schema"]
        assert list(schema["properties"]) == ["params"], name
        fields = dict(schema["properties"])
        for model, definition in schema.get("definitions", {}).items():
            fields.update({f"{model}.{k}": v for k, v in definition.get("properties", {}).items()})
        assert [k for k, v in fields.items() if not v.get("description")] == [], name
        assert internal & {k.rsplit(".", 1)[-1] for k in fields} == set(), name


def test_a_started_pipeline_with_a_missing_model_path_fails_at_once_and_says_why(stack, deployed, tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(f"name: no-model\nrun_root: {tmp_path / 'runs'}\nmodel: ./no/such/model\n")
    # a process of its own: this one's Prefect settings may point at the test harness's server
    result = subprocess.run([sys.executable, "-m", "swerl.cli", "pipeline", "start", "--params", str(params), "--interval", "1"],
                            cwd=ROOT, env={**os.environ, **stack}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    # it failed before its inputs were prepared: no task set, no image, no stage (and so no hub retries either)
    assert not (tmp_path / "runs" / "no-model" / "ledger.json").exists() and not list(tmp_path.rglob("images*.json"))
    lines = result.stdout.splitlines()
    assert lines[0].startswith("flow run pipeline-no-model (")
    assert lines[-1] == (f"pipeline-no-model failed: EngineError: model path './no/such/model' does not exist (looked for "
                         f"{ROOT / 'no/such/model'}); give an existing model folder (e.g. from `swerl model init-tiny --out "
                         "DIR`) or a hub id such as ORG/NAME")


def test_a_run_request_with_parameters_completes_on_the_worker(stack, deployed, docker_ready, demo, task_slice,
                                                              tiny_model_dir, tmp_path):
    from mlflow import MlflowClient

    api = stack["PREFECT_API_URL"]
    params = {"params": {"model": str(tiny_model_dir), "tasks": str(task_slice), "repos": str(demo.repos_dir),
                         "out": str(tmp_path / "evals"), "runs": 1,
                         "sampler": {"engine": "hf", "concurrency": 3, "agent": {"max_turns": 2, "max_new_tokens": 16}}}}
    # what the UI's "Custom run" sends
    run = _api("POST", f"{api}/deployments/{deployed['evaluate']['id']}/create_flow_run",
               json={"parameters": params, "state": {"type": "SCHEDULED"}})
    assert run.status_code == 201, run.text
    run_id = run.json()["id"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = _api("GET", f"{api}/flow_runs/{run_id}").json()["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            break
        time.sleep(2)
    assert state["type"] == "COMPLETED", state
    folders = list((tmp_path / "evals").iterdir())
    assert len(folders) == 1
    report = json.loads((folders[0] / "eval.json").read_text())
    assert report["tasks"] == 3 and report["runs"] == 1
    # recorded in the stack's MLflow server, tied to the flow run
    client = MlflowClient(stack["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("swerl")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`prefect.flow_run_id` = '{run_id}'")
    assert len(runs) == 1
    assert runs[0].data.metrics["eval/tasks"] == 3.0
    # `swerl follow` in a new shell (no PREFECT_API_URL): it finds the server `swerl up` runs from its home,
    # and prints the evaluation's result line
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    followed = subprocess.run([sys.executable, "-m", "swerl.cli", "follow", run_id, "--home", stack["SWERL_STACK_HOME"]],
                              cwd=ROOT, env=shell, capture_output=True, text=True, timeout=300)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    said = [line[10:] for line in followed.stdout.splitlines() if "Pass@1" in line]
    assert said == [f"evaluate-{Path(str(tiny_model_dir)).name}: Pass@1 {report['pass_at_1']:.1%} (1 run, no SEM) "
                    "(1 run of 3 tasks); champion not considered (the evaluated model is no registered version)"], followed.stdout


def test_swerl_follow_with_no_server_to_follow_says_so_at_once(tmp_path):
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    shell["PREFECT_HOME"] = str(tmp_path / "prefect")  # no profile naming a server either
    run_id = str(uuid.uuid4())
    nobody = subprocess.run([sys.executable, "-m", "swerl.cli", "follow", run_id, "--home", str(tmp_path / "stack")],
                            cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120)
    assert nobody.returncode == 2
    assert nobody.stderr.strip() == (
        f"error: no Prefect server to follow: PREFECT_API_URL is not set and `swerl up` runs none in {tmp_path / 'stack'}; "
        "start one with `swerl up` (or give its --home), or export the server's URL, e.g. "
        "PREFECT_API_URL=http://127.0.0.1:4200/api")
    dead = subprocess.run([sys.executable, "-m", "swerl.cli", "follow", run_id],
                          cwd=ROOT, env={**shell, "PREFECT_API_URL": f"http://127.0.0.1:{_free_port()}/api"},
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode == 2 and "does not answer (ConnectError" in dead.stderr, dead.stderr


def _processes_of(flow_run_id: str) -> list[int]:
    """Pids whose environment names this flow run (the worker's flow-run subprocess and its children)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_cancelling_a_pipeline_run_removes_its_sandboxes_and_processes(stack, deployed, docker_ready, demo, task_slice,
                                                                        tmp_path):
    from flows._hooks import container_label
    from swerl.envs.docker_sandbox import running_containers

    api = stack["PREFECT_API_URL"]
    name = f"cancel-me-{uuid.uuid4().hex[:8]}"  # its sandboxes' label: others' runs share the daemon
    params = {"params": {"name": name, "run_root": str(tmp_path / "runs"), "tasks": str(task_slice), "repos": str(demo.repos_dir),
                         "validate_runs": 0, "eval": {"runs": 4},
                         "sampler": {"engine": "hf", "concurrency": 3, "agent": {"max_turns": 40, "max_new_tokens": 64}}}}
    label = container_label(name)
    run_id = _run_until(api, deployed["pipeline"]["id"], params, lambda: running_containers(label), timeout_s=600)
    assert running_containers(label), "the pipeline never started a sandbox"
    assert _processes_of(run_id)
    _cancel(api, run_id, label)


def _run_until(api: str, deployment_id: str, parameters: dict, condition, timeout_s: float, poll_s: float = 1.0) -> str:
    """A flow run of the deployment, as the UI makes one, watched until ``condition()`` holds; its id."""
    run = _api("POST", f"{api}/deployments/{deployment_id}/create_flow_run",
               json={"parameters": parameters, "state": {"type": "SCHEDULED"}})
    assert run.status_code == 201, run.text
    run_id = run.json()["id"]
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        state = _api("GET", f"{api}/flow_runs/{run_id}").json()["state"]
        assert state["type"] in ("SCHEDULED", "PENDING", "RUNNING"), state
        time.sleep(poll_s)
    return run_id


def _cancel(api: str, run_id: str, label: str) -> None:
    """Cancel the flow run as the UI does; it ends CANCELLED with none of its sandboxes or processes left."""
    from swerl.envs.docker_sandbox import running_containers

    cancel = _api("POST", f"{api}/flow_runs/{run_id}/set_state", json={"state": {"type": "CANCELLING"}, "force": True})
    assert cancel.status_code in (200, 201), cancel.text
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        state = _api("GET", f"{api}/flow_runs/{run_id}").json()["state"]
        if state["type"] == "CANCELLED" and not running_containers(label) and not _processes_of(run_id):
            break
        time.sleep(1)
    assert state["type"] == "CANCELLED", state
    assert running_containers(label) == []
    assert _processes_of(run_id) == []


def test_cancelling_an_asynchronous_run_inside_its_overlap_leaves_nothing_running_and_keeps_what_it_stored(
        stack, deployed, docker_ready, demo, task_slice, tmp_path):
    from flows._hooks import container_label
    from swerl.orchestration.ledger import Ledger
    from tests.support.killed_pipeline import async_pipeline, in_overlap, parts

    name = f"cancel-async-{uuid.uuid4().hex[:8]}"
    params = async_pipeline(name, tmp_path, task_slice, demo.repos_dir, name)
    api, run_dir = stack["PREFECT_API_URL"], params.run_dir
    run_id = _run_until(api, deployed["pipeline"]["id"], {"params": params.model_dump(mode="json")},
                        lambda: in_overlap(run_dir), timeout_s=900, poll_s=0.2)
    assert in_overlap(run_dir), "the run never sampled iteration 2 beside iteration 1's update"
    _cancel(api, run_id, container_label(name))
    # what the overlap stored stays for a rerun: iteration 1's rollouts in the ledger, iteration 2's trajectories
    assert "iter-1-rollout" in Ledger(run_dir).finished() and "iter-1" not in Ledger(run_dir).finished()
    assert parts(run_dir / "iter-2" / "rollout" / "trajectories")


def _visible_text(html: str, css_class: str) -> str:
    """The text a person sees inside the first element whose class list holds ``css_class``."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.depth, self.parts = 0, []

        def handle_starttag(self, tag, attrs):
            if self.depth:
                self.depth += 1
            elif css_class in (dict(attrs).get("class") or "").split():
                self.depth = 1

        def handle_endtag(self, tag):
            if self.depth:
                self.depth -= 1

        def handle_data(self, data):
            if self.depth:
                self.parts.append(data)

    parser = Text()
    parser.feed(html)
    return "".join(parser.parts)


def test_the_run_summary_renders_as_written_in_prefect_s_ui(stack):
    # Prefect's UI sanitises Markdown: `eval/<stage>/trajectories` written plainly loses `<stage>`
    import shutil
    import tempfile

    from swerl.orchestration.summary import summary_markdown, where_to_look

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no Chromium here: the test command's set-up (scripts/setup.sh) installs Debian's")
    where = where_to_look(Path("runs/pipelines/demo"), "abc123", "demo")
    created = _api("POST", f"{stack['PREFECT_API_URL']}/artifacts/",
                   json={"key": f"summary-render-{uuid.uuid4().hex[:8]}", "type": "markdown",
                         "data": summary_markdown("demo", [], where)})
    assert created.status_code == 201, created.text
    ui = stack["PREFECT_API_URL"].removesuffix("/api")
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                              "--virtual-time-budget=20000", "--dump-dom", f"{ui}/artifacts/artifact/{created.json()['id']}"],
                             capture_output=True, text=True, timeout=180).stdout
    shown = _visible_text(dom, "artifact-data-markdown")
    assert "runs/pipelines/demo/eval/<stage>/trajectories" in shown, shown
    assert "runs/pipelines/demo/iter-<k>/rollout/trajectories" in shown, shown


def _run_deployment(api: str, deployment: dict, params: dict, timeout_s: float = 600) -> tuple[str, dict]:
    """Start ``deployment`` as the UI's "Custom run" does and wait for its end: (flow run id, final state)."""
    run = _api("POST", f"{api}/deployments/{deployment['id']}/create_flow_run",
               json={"parameters": params, "state": {"type": "SCHEDULED"}})
    assert run.status_code == 201, run.text
    run_id = run.json()["id"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _api("GET", f"{api}/flow_runs/{run_id}").json()["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run_id, state
        time.sleep(2)
    raise AssertionError(f"flow run {run_id} did not end in {timeout_s} s: {state}")


def test_a_deployed_evaluation_that_fails_ends_its_mlflow_runs_and_logs_no_model_for_a_missing_path(
        stack, deployed, demo, task_slice, tmp_path):
    from mlflow import MlflowClient

    api, client = stack["PREFECT_API_URL"], MlflowClient(stack["MLFLOW_TRACKING_URI"])
    base = {"tasks": str(task_slice), "repos": str(demo.repos_dir), "out": str(tmp_path / "evals"), "runs": 1,
            "sampler": {"engine": "hf", "concurrency": 1, "agent": {"max_turns": 1, "max_new_tokens": 8}}}

    def runs_of(flow_run_id: str):
        exp = client.get_experiment_by_name("swerl")
        return [] if exp is None else client.search_runs(
            [exp.experiment_id], filter_string=f"tags.`prefect.flow_run_id` = '{flow_run_id}'")

    # a folder that is no model: the flow fails after opening its MLflow run, whose parameters carry no
    # `tracking` (a deployment's never do); the run ends FAILED in the stack's store, not RUNNING
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    run_id, state = _run_deployment(api, deployed["evaluate"], {"params": {**base, "model": str(empty)}})
    assert state["type"] == "FAILED", state
    assert [r.info.status for r in runs_of(run_id)] == ["FAILED"]

    # a path that does not exist: refused before any MLflow run or logged model exists for it
    missing = tmp_path / "no-such-model"
    run_id, state = _run_deployment(api, deployed["evaluate"], {"params": {**base, "model": str(missing)}})
    assert state["type"] == "FAILED" and "does not exist" in (state.get("message") or ""), state
    assert runs_of(run_id) == []
    exp = client.get_experiment_by_name("swerl")
    models = client.search_logged_models([exp.experiment_id]) if exp is not None else []
    assert [m for m in models if "no-such-model" in (m.name + str(m.tags))] == []
