"""Rollout and grading chunks fanned out on an existing Dask cluster (prefect-dask), its two workers
on two stand-in hosts: network namespaces of this machine, each reaching the scheduler and the
Prefect API only over its own veth link, as a worker on another machine would.

The Prefect server listens on the first link's host address (a worker's tasks report their
states to the flow's API URL); the sandboxes use this machine's Docker daemon through its socket.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.stacks import free_port, own_stack, prefect_api_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ("worker-a", "worker-b")


def _wait_for(check, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")


@pytest.fixture(scope="module")
def hosts():
    tag = uuid.uuid4().hex[:4]
    made = []
    try:
        for i in range(2):
            made.append(netns.make(f"swdask{tag}{i}", f"10.{210 + i}.{random.randint(1, 250)}"))
    except (RuntimeError, FileNotFoundError) as e:
        for ns in made:
            netns.remove(ns)
        netns.unavailable("network namespaces", e)
    yield made
    for ns in made:
        netns.remove(ns)


@pytest.fixture(scope="module")
def stack(hosts, tmp_path_factory):
    """A Prefect (and MLflow) server on the first link's host address, so both namespaces reach it."""
    with own_stack(tmp_path_factory.mktemp("dask-stack"), host=hosts[0].host_ip, worker=False) as config:
        yield config


@pytest.fixture(scope="module")
def cluster(hosts, stack, tmp_path_factory):
    """A Dask scheduler on this machine and one single-threaded worker in each namespace."""
    from distributed import Client

    logs = tmp_path_factory.mktemp("dask-logs")
    address = f"tcp://{hosts[0].host_ip}:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": stack.prefect_api_url, "DO_NOT_TRACK": "1",
           "PREFECT_HOME": str(logs / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", host, "--port", port,
                               "--no-dashboard"], cwd=ROOT, env=env, stdout=(logs / "scheduler.log").open("w"),
                              stderr=subprocess.STDOUT)]
    for ns, name in zip(hosts, WORKERS):
        procs.append(subprocess.Popen(ns.argv([sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name,
                                               "--host", ns.ip, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                               "--no-nanny"]),
                                      cwd=ROOT, env=env, stdout=(logs / f"{name}.log").open("w"), stderr=subprocess.STDOUT))
    try:
        with Client(address, timeout=60) as client:
            _wait_for(lambda: len(client.scheduler_info()["workers"]) == len(WORKERS), "both Dask workers joining")
            yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def _settings(stack):
    return prefect_api_of(stack.prefect_api_url)


def test_rollout_chunks_run_on_the_workers_of_both_hosts(stack, cluster, docker_ready, demo, task_slice, tiny_model_dir,
                                                         tmp_path):
    from flows.rollout import rollout
    from swerl.orchestration.params import RolloutParams, SamplerParams, TrackingParams
    from swerl.stages.rollout import stored_trajectories

    params = RolloutParams(model=str(tiny_model_dir), tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "roll", samples=1,
                           sampler=SamplerParams(engine="scripted", agent={"max_turns": 20}, concurrency=1, chunk_size=1,
                                                 dask_address=cluster),
                           tracking=TrackingParams(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    with _settings(stack):
        out = rollout(params)
    assert (out["produced"], out["skipped"]) == (3, 0)  # three chunks of one task
    assert sorted(set(out["ran_on"])) == [f"dask:{w}" for w in WORKERS]
    stored = stored_trajectories(tmp_path / "roll" / "trajectories")
    assert len(stored) == 3 and all(t.resolved for t in stored)  # graded in the workers' sandboxes
    # each chunk is a Prefect task run in the flow's API, completed
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    with _settings(stack), get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="rollout-chunk")))
    assert sorted(r.state_type.value for r in runs) == ["COMPLETED"] * 3


def test_grade_chunks_run_on_the_dask_cluster_and_merge_in_order(stack, cluster, docker_ready, demo, demo_tasks, task_slice,
                                                                 tmp_path):
    from flows.grade import grade
    from swerl.orchestration.params import GradeParams

    ids = [json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines()]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "gold",
                                               "model_patch": demo_tasks[i].patch}) + "\n" for i in ids))
    params = GradeParams(predictions=predictions, tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "results.jsonl",
                         chunk_size=1, concurrency=1, dask_address=cluster)
    with _settings(stack):
        out = grade(params)
    assert (out["resolved"], out["total"]) == (3, 3)
    assert [json.loads(line)["instance_id"] for line in (tmp_path / "results.jsonl").read_text().splitlines()] == ids


def test_a_dask_address_that_is_no_url_is_refused_naming_the_field():
    from pydantic import ValidationError

    from swerl.orchestration.params import SamplerParams

    with pytest.raises(ValidationError, match="dask_address"):
        SamplerParams(dask_address="10.0.0.5:8786")
    assert SamplerParams(dask_address="tcp://10.0.0.5:8786").dask_address == "tcp://10.0.0.5:8786"
