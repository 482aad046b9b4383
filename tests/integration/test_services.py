"""`swerl up` / `down` / `status`: a real Prefect server, worker and MLflow server on free ports.

One stack is started for the module (Prefect and MLflow take 10-40 s to come up on 2 cores)
and the tests run against it in file order; the last one stops it. Refusals (a taken port,
changed settings, a failing service) are checked before or beside it and start nothing
that outlives them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.services import ServicesConfig, ServicesError, down, env, load_config, status, up
from swerl.services import processes

OFFLINE = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
NAMES = ["prefect-server", "mlflow", "prefect-worker"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module", autouse=True)
def offline(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in OFFLINE.items():
            mp.setenv(k, v)
        mp.setenv("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))
        yield


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> ServicesConfig:
    home = tmp_path_factory.mktemp("services")
    # an explicit database URL, to see it reach the server (the default is Prefect's own: PREFECT_HOME/prefect.db)
    return ServicesConfig(home=home, prefect_port=free_port(), mlflow_port=free_port(), work_pool="swerl-test",
                          prefect_database_url=f"sqlite+aiosqlite:///{home}/orchestration.db", startup_timeout_s=180)


@pytest.fixture(scope="module")
def stack(config):
    statuses = up(config)
    yield statuses
    down(config)  # a safety net when a test stopped half-way; a no-op after test_down


# ---------------------------------------------------------------- fast: no server


def test_config_defaults_and_client_urls(tmp_path):
    c = ServicesConfig(home=tmp_path)
    assert (c.host, c.prefect_port, c.mlflow_port, c.work_pool, c.worker) == ("127.0.0.1", 4200, 5000, "swerl-local", True)
    assert env(c) == {"PREFECT_API_URL": "http://127.0.0.1:4200/api", "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}
    assert c.mlflow_store_uri() == f"sqlite:///{tmp_path}/mlflow.db"
    assert c.mlflow_artifacts() == f"{tmp_path}/mlartifacts"
    # a wildcard bind is reached through loopback
    assert env(ServicesConfig(home=tmp_path, host="0.0.0.0"))["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"


def test_config_is_bounded_and_strict(tmp_path):
    for bad in ({"prefect_port": 0}, {"mlflow_port": 65536}, {"startup_timeout_s": 0}, {"work_pool": "a/b"}, {"typo": 1}):
        with pytest.raises(ValueError):
            ServicesConfig(home=tmp_path, **bad)


def test_relative_home_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ServicesConfig(home=Path("svc")).home == tmp_path / "svc"


def test_a_pid_file_naming_another_program_is_dropped_without_killing_it(tmp_path):
    c = ServicesConfig(home=tmp_path)
    # this very test process, recorded with a command it does not run: a recycled pid
    processes.PidRecord("prefect-server", os.getpid(), ["prefect", "server", "start"], 4200, 0.0).write(c.run_dir)
    dead = subprocess.Popen(["true"])
    dead.wait()
    processes.PidRecord("mlflow", dead.pid, ["true"], 5000, 0.0).write(c.run_dir)
    assert [(s.name, s.pid, s.healthy, s.detail) for s in status(c)] == [
        ("prefect-server", None, False, "not running"), ("mlflow", None, False, "not running"),
        ("prefect-worker", None, False, "not running")]
    assert down(c) == []
    assert sorted(p.name for p in c.run_dir.iterdir()) == []
    assert not gone(os.getpid())


@pytest.mark.parametrize("service,field,option", [("prefect-server", "prefect_port", "--prefect-port"),
                                                   ("mlflow", "mlflow_port", "--mlflow-port")])
def test_a_port_taken_by_another_program_is_refused_before_anything_starts(tmp_path, service, field, option):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        c = ServicesConfig(home=tmp_path, **{"prefect_port": free_port(), "mlflow_port": free_port(), field: port})
        with pytest.raises(ServicesError) as e:
            up(c)
    assert str(e.value) == (
        f"port {port} on 127.0.0.1 is already in use by another program, so {service} cannot listen there; "
        f"choose a free port with {option} (ServicesConfig.{field}), or stop what holds it")
    assert not (tmp_path / "run").exists()  # no pid file was ever written
    assert not (tmp_path / "services.json").exists()


def test_status_of_a_home_never_started_exits_1(tmp_path):
    result = CliRunner().invoke(app, ["status", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stdout == "export PREFECT_API_URL=http://127.0.0.1:4200/api MLFLOW_TRACKING_URI=http://127.0.0.1:5000\n"


def test_up_refuses_a_bad_option_naming_it():
    result = CliRunner().invoke(app, ["up", "--prefect-port", "70000"])
    assert result.exit_code == 2
    assert "--prefect-port 70000: Input should be less than or equal to 65535" in result.stderr


# ---------------------------------------------------------------- slow: real servers


@pytest.mark.slow
def test_a_service_that_fails_to_start_is_reported_with_its_log_and_the_rest_stopped(tmp_path):
    c = ServicesConfig(home=tmp_path, prefect_port=free_port(), mlflow_port=free_port(), worker=False,
                       mlflow_backend_store_uri="mysql://nowhere/db", startup_timeout_s=180)
    with pytest.raises(ServicesError) as e:
        up(c)
    message = str(e.value)
    assert message.startswith(f"mlflow exited with code 1 while starting; last lines of {tmp_path}/logs/mlflow.log:\n")
    assert "MySQLdb" in message.split("\n", 1)[1]  # MLflow's own complaint (no MySQL driver here), quoted
    # the Prefect server it started beside MLflow is stopped again and forgotten
    assert list(c.run_dir.glob("*.json")) == []
    assert (tmp_path / "logs" / "prefect-server.log").exists()


@pytest.mark.slow
def test_up_starts_every_service_healthy(stack, config):
    assert [(s.name, s.healthy, s.detail) for s in stack] == [(n, True, "") for n in NAMES]
    assert [s.url for s in stack] == [config.prefect_url, config.mlflow_url,
                                      f"{config.prefect_url}/work-pools/work-pool/swerl-test"]
    assert [s.log for s in stack] == [config.home / "logs" / f"{n}.log" for n in NAMES]
    assert all(s.startup_s is not None and 0 < s.startup_s <= 180 for s in stack)
    for s in stack:
        record = json.loads((config.home / "run" / f"{s.name}.json").read_text())
        assert record["pid"] == s.pid and record["command"][:3] == [sys.executable, "-m", s.name.split("-")[0]]
        assert processes.cmdline(s.pid) == record["command"]
        assert os.getpgid(s.pid) == s.pid  # its own process group
    assert json.loads((config.home / "run" / "prefect-server.json").read_text())["port"] == config.prefect_port
    assert load_config(config.home) == config
    assert (config.home / "orchestration.db").is_file() and not (config.home / "prefect" / "prefect.db").exists()
    assert (config.home / "mlflow.db").is_file()


@pytest.mark.slow
def test_prefect_has_the_process_pool_with_our_worker_online(stack, config):
    api = env(config)["PREFECT_API_URL"]
    with httpx.Client(trust_env=False, timeout=10) as client:
        assert client.get(f"{api}/health").json() is True
        pools = client.post(f"{api}/work_pools/filter", json={}).json()
        assert [(p["name"], p["type"]) for p in pools if p["name"] == "swerl-test"] == [("swerl-test", "process")]
        workers = client.post(f"{api}/work_pools/swerl-test/workers/filter", json={}).json()
    assert [(w["name"], w["status"]) for w in workers] == [("swerl-test-worker", "ONLINE")]
    # it polls for scheduled runs every worker_poll_s (2 s), not Prefect's 10 s
    worker = next(s for s in stack if s.name == "prefect-worker")
    environ = dict(v.split("=", 1) for v in Path(f"/proc/{worker.pid}/environ").read_text().split("\0") if "=" in v)
    assert environ["PREFECT_WORKER_QUERY_SECONDS"] == str(config.worker_poll_s) == "2.0"


@pytest.mark.slow
def test_mlflow_tracks_experiments_and_stores_artifacts_in_home(stack, config):
    from mlflow.tracking import MlflowClient

    uri = env(config)["MLFLOW_TRACKING_URI"]
    assert httpx.get(f"{uri}/health", trust_env=False).text == "OK"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("services-test")
    assert client.get_experiment_by_name("services-test").experiment_id == experiment_id
    run = client.create_run(experiment_id)
    client.log_text(run.info.run_id, "hello", "note.txt")
    stored = config.home / "mlartifacts" / experiment_id / run.info.run_id / "artifacts" / "note.txt"
    assert stored.read_text() == "hello"


@pytest.mark.slow
def test_a_second_up_leaves_the_running_services_alone(stack, config):
    again = up(config)
    assert [(s.name, s.pid, s.healthy, s.startup_s) for s in again] == [(s.name, s.pid, True, None) for s in stack]


@pytest.mark.slow
def test_up_with_other_settings_refuses_while_the_stack_runs(stack, config):
    changed = config.model_copy(update={"mlflow_workers": 2})
    with pytest.raises(ServicesError) as e:
        up(changed)
    assert str(e.value).startswith(f"mlflow already runs (pid {stack[1].pid}) with other settings: ")
    assert str(e.value).endswith(f"run `swerl down --home {config.home}` first to restart it with the new ones")
    assert [s.pid for s in status(config)] == [s.pid for s in stack]


@pytest.mark.slow
def test_status_lists_every_service_and_exports_the_urls(stack, config):
    assert [(s.name, s.pid, s.healthy) for s in status(config)] == [(s.name, s.pid, True) for s in stack]
    result = CliRunner().invoke(app, ["status", "--home", str(config.home)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (f"export PREFECT_API_URL=http://127.0.0.1:{config.prefect_port}/api "
                             f"MLFLOW_TRACKING_URI=http://127.0.0.1:{config.mlflow_port}\n")
    for s in stack:
        assert s.name in result.stderr and str(s.pid) in result.stderr


@pytest.mark.slow
def test_down_stops_every_process_and_a_second_down_does_nothing(stack, config):
    pids = [s.pid for s in stack]
    assert down(config) == ["prefect-worker", "mlflow", "prefect-server"]
    assert [gone(pid) for pid in pids] == [True, True, True]
    assert [processes.group_members(pid) for pid in pids] == [[], [], []]
    assert list((config.home / "run").glob("*.json")) == []
    assert down(config) == []
    assert [(s.name, s.pid, s.healthy) for s in status(config)] == [(n, None, False) for n in NAMES]
