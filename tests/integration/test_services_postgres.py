"""`swerl up --postgres`: a real PostgreSQL cluster (initdb, postgres) under the stack's home,
a real Prefect server and MLflow server keeping their tables there, the pipeline's tracking
tasks run in a Prefect flow against both, `down`, and `up` again with every record kept;
then a second stack given plain PostgreSQL URLs.

One stack serves the module, its tests run in file order (the last ones stop and restart
it). As root the cluster runs as the `postgres` account, so the home is a folder under the
temp folder that account may enter (pytest's own tmp folders are root's, mode 0700).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from prefect import flow
from typer.testing import CliRunner

from swerl.cli import app
from swerl.orchestration.params import TrackingConfig
from swerl.services import ServicesConfig, ServicesError, down, status, up
from swerl.services import processes
from tests.support.stacks import query

pytestmark = pytest.mark.slow

NAMES = ["postgres", "prefect-server", "mlflow"]
EXPERIMENT = "pg-tracking"
MODEL = "swerl-policy-pg"
shared: dict = {}  # what an earlier test recorded for a later one to find again


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int) -> bool:
    return not processes.is_running(pid)


def tables(config: ServicesConfig, database: str) -> set[str]:
    return {name for (name,) in query(config, database, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


@pytest.fixture(scope="module")
def home():
    folder = Path(tempfile.mkdtemp(prefix="swerl-pg-"))
    folder.chmod(0o711)  # the cluster's account may enter it
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def config(home) -> ServicesConfig:
    return ServicesConfig(home=home, postgres=True, postgres_port=free_port(), prefect_port=free_port(),
                          mlflow_port=free_port(), worker=False, work_pool="swerl-pg-test", startup_timeout_s=180)


@pytest.fixture(scope="module")
def stack(config):
    statuses = up(config)
    yield statuses
    down(config)  # a safety net when a test stopped half-way


@pytest.fixture
def api(config):
    from tests.support.stacks import prefect_api_of

    with prefect_api_of(config.prefect_api_url) as url:
        yield url


def fake_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 4}))
    (folder / "model.safetensors").write_bytes(b"not really weights")
    return folder


@flow(name="tracked-on-postgres")
def tracked(tracking: TrackingConfig, tasks: Path, checkpoint: Path) -> dict:
    """What a pipeline's RFT stage records: parent and stage runs, lineage, metrics, a registered checkpoint."""
    from tasks import tracking as tr

    parent = tr.pipeline_run(tracking, "pg", {"seed": 3})
    stage = tr.stage_run(tracking, parent.run_id, "rft")
    digest = tr.log_lineage(tracking, stage, tasks=tasks).tasks
    tr.log_metrics(tracking, stage, {"train/loss": 0.25, "rollout/mean_reward": 0.5}, step=1)
    tr.log_metrics(tracking, parent.run_id, {"eval/pass_at_1": 0.5}, step=1)
    registered = tr.register_checkpoint(tracking, stage, checkpoint, name="rft", policy_version="rft-1", step=1)
    promoted = tr.promote(tracking, registered["version"], 0.5)
    tr.finish_run(tracking, stage)
    tr.finish_run(tracking, parent.run_id)
    return {"parent": parent.run_id, "stage": stage, "tasks_digest": digest, "version": registered["version"],
            "promoted": promoted}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's cluster runs under another account")
def test_a_home_the_cluster_s_account_cannot_enter_is_refused_before_anything_starts(tmp_path):
    # pytest's tmp folders sit under /tmp/pytest-of-root, mode 0700
    c = ServicesConfig(home=tmp_path / "svc", postgres=True, postgres_port=free_port(), prefect_port=free_port(),
                       mlflow_port=free_port(), worker=False)
    with pytest.raises(ServicesError) as e:
        up(c)
    message = str(e.value)
    assert message.startswith("the PostgreSQL cluster runs as 'postgres' (initdb refuses root), which may not enter /")
    assert "choose a --home under folders others may enter, or allow it with `chmod o+x /" in message
    assert not (c.postgres_dir / "data").exists() and not c.run_dir.exists() and not (c.home / "services.json").exists()


def test_up_makes_the_cluster_and_both_servers_keep_their_tables_in_it(stack, config):
    assert [(s.name, s.healthy, s.detail) for s in stack] == [(n, True, "") for n in NAMES]
    assert stack[0].url == f"postgresql://swerl@127.0.0.1:{config.postgres_port}"
    assert stack[0].log == config.home / "logs" / "postgres.log"
    log = stack[0].log.read_text()
    assert "initdb -D" in log and "database system is ready to accept connections" in log
    data = config.home / "postgres" / "data"
    assert (data / "PG_VERSION").read_text().strip() == "15"
    assert data.stat().st_mode & 0o777 == 0o700
    assert (config.home / "postgres" / "pgpass").stat().st_mode & 0o777 == 0o600
    pg = stack[0].pid
    record = json.loads((config.home / "run" / "postgres.json").read_text())
    assert record["pid"] == pg and processes.cmdline(pg) == record["command"] and os.getpgid(pg) == pg
    if os.geteuid() == 0:  # initdb refuses root: the cluster is the postgres account's
        uid = pwd.getpwnam("postgres").pw_uid
        assert data.stat().st_uid == uid and Path(f"/proc/{pg}").stat().st_uid == uid
    # every table is in PostgreSQL, none in a SQLite file
    assert {"flow_run", "task_run", "work_pool", "alembic_version"} <= tables(config, "prefect")
    assert {"experiments", "runs", "metrics", "registered_models", "alembic_version"} <= tables(config, "mlflow")
    assert query(config, "prefect", "SELECT name, type FROM work_pool WHERE name = %s", ("swerl-pg-test",)) == [
        ("swerl-pg-test", "process")]
    assert list(config.home.rglob("*.db")) == []
    # reachable on loopback only, by password
    assert query(config, "postgres", "SHOW listen_addresses") == [("127.0.0.1",)]
    assert query(config, "postgres", "SHOW password_encryption") == [("scram-sha-256",)]


def test_the_pipeline_s_tracking_in_a_prefect_flow_lands_in_postgres(stack, config, api, demo, tmp_path):
    from mlflow import MlflowClient

    tracking = TrackingConfig(tracking_uri=config.mlflow_url, experiment=EXPERIMENT, registered_model=MODEL)
    state = tracked(tracking, demo.tasks_file, fake_checkpoint(tmp_path / "step-1"), return_state=True)
    assert state.is_completed(), state
    out = state.result()
    assert out["version"] == "1" and out["promoted"] is True
    flow_run_id = str(state.state_details.flow_run_id)
    shared.update(out, flow_run_id=flow_run_id)
    # Prefect's server wrote the flow run and its task runs to PostgreSQL
    assert query(config, "prefect", "SELECT name, state_type FROM flow_run WHERE id = %s", (flow_run_id,))[0][1] == "COMPLETED"
    task_runs = query(config, "prefect", "SELECT state_type, count(*) FROM task_run WHERE flow_run_id = %s GROUP BY 1",
                      (flow_run_id,))
    assert task_runs == [("COMPLETED", 9)]
    # MLflow's server wrote the runs, metrics, dataset input, registered version and aliases there
    runs = dict(query(config, "mlflow", "SELECT name, status FROM runs"))
    assert runs == {"pipeline pg": "FINISHED", "rft": "FINISHED"}
    metrics = query(config, "mlflow", "SELECT key, value, step FROM metrics WHERE run_uuid = %s ORDER BY key", (out["stage"],))
    assert metrics == [("rollout/mean_reward", 0.5, 1), ("train/loss", 0.25, 1)]
    [(digest,)] = query(config, "mlflow", "SELECT digest FROM datasets WHERE name = 'tasks'")
    assert out["tasks_digest"].startswith(digest)  # MLflow keeps its first 36 characters
    aliases = query(config, "mlflow", "SELECT alias, version FROM registered_model_aliases WHERE name = %s ORDER BY alias",
                    (MODEL,))
    assert aliases == [("candidate", 1), ("champion", 1)]
    tags = dict(query(config, "mlflow", "SELECT key, value FROM tags WHERE run_uuid = %s", (out["parent"],)))
    assert tags["prefect.flow_run_id"] == flow_run_id and tags["swerl.pipeline_id"] == "pg"
    # and a client reads it back through the server
    client = MlflowClient(config.mlflow_url)
    assert client.get_model_version_by_alias(MODEL, "champion").run_id == out["stage"]


def test_status_reports_the_cluster_and_its_urls(stack, config):
    assert [(s.name, s.pid, s.healthy) for s in status(config)] == [(s.name, s.pid, True) for s in stack]
    result = CliRunner().invoke(app, ["status", "--home", str(config.home)])
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stderr.split())
    assert f"Prefect postgresql+asyncpg://swerl@127.0.0.1:{config.postgres_port}/prefect" in text
    assert f"MLflow postgresql://swerl@127.0.0.1:{config.postgres_port}/mlflow" in text
    assert f"(their password: PGPASSFILE={config.home}/postgres/pgpass)" in text


def test_a_stack_given_postgresql_urls_keeps_its_tables_there(stack, config, tmp_path):
    """The other way: URLs of a PostgreSQL server someone else runs (here the cluster above, whose databases
    a second pair of servers then shares with the first, as replicas would)."""
    from mlflow import MlflowClient

    password = (config.home / "postgres" / "pgpass").read_text().strip().rsplit(":", 1)[1]
    where = f"swerl:{password}@127.0.0.1:{config.postgres_port}"
    given = ServicesConfig(home=tmp_path / "given", prefect_port=free_port(), mlflow_port=free_port(), worker=False,
                           work_pool="swerl-given", prefect_database_url=f"postgresql+asyncpg://{where}/prefect",
                           mlflow_backend_store_uri=f"postgresql://{where}/mlflow", startup_timeout_s=180)
    try:
        assert [(s.name, s.healthy) for s in up(given)] == [("prefect-server", True), ("mlflow", True)]
        MlflowClient(given.mlflow_url).create_experiment("given")
        assert query(config, "prefect", "SELECT name FROM work_pool WHERE name = 'swerl-given'") == [("swerl-given",)]
        assert query(config, "mlflow", "SELECT name FROM experiments WHERE name = 'given'") == [("given",)]
        # the first stack's server sees what the second one wrote
        assert MlflowClient(config.mlflow_url).get_experiment_by_name("given") is not None
        assert list(given.home.rglob("*.db")) == []
    finally:
        assert down(given) == ["mlflow", "prefect-server"]


def test_down_stops_the_cluster_and_up_again_keeps_every_record(stack, config, api):
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client

    pids = [s.pid for s in stack]
    data = config.home / "postgres" / "data"
    made = (data / "PG_VERSION").stat().st_mtime_ns
    assert down(config) == ["mlflow", "prefect-server", "postgres"]
    assert [gone(pid) for pid in pids] == [True, True, True]
    assert list((config.home / "run").glob("*.json")) == []
    assert "database system is shut down" in (config.home / "logs" / "postgres.log").read_text()
    assert [(s.name, s.pid, s.healthy) for s in status(config)][0] == ("postgres", None, False)

    # without its password file the cluster is refused by name, before anything starts
    password_file = config.home / "postgres" / "pgpass"
    password_file.rename(config.home / "pgpass.aside")
    with pytest.raises(ServicesError) as e:
        up(config)
    assert str(e.value) == (f"the PostgreSQL cluster in {data} exists but its password file {password_file} is gone; "
                            f"restore it, or remove {config.home}/postgres to start a new, empty cluster")
    assert list((config.home / "run").glob("*.json")) == []
    (config.home / "pgpass.aside").rename(password_file)

    again = up(config)
    assert [(s.name, s.healthy) for s in again] == [(n, True) for n in NAMES]
    assert (data / "PG_VERSION").stat().st_mtime_ns == made
    assert (config.home / "logs" / "postgres.log").read_text().count("initdb -D") == 1  # the cluster was reused
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(shared["flow_run_id"]).state.is_completed()
    mlflow = MlflowClient(config.mlflow_url)
    assert mlflow.get_run(shared["stage"]).data.metrics == {"train/loss": 0.25, "rollout/mean_reward": 0.5}
    assert mlflow.get_model_version_by_alias(MODEL, "champion").version == shared["version"]
    assert down(config) == ["mlflow", "prefect-server", "postgres"]
    assert gone(again[0].pid)
