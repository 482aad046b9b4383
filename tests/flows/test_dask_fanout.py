"""Rollout and grading chunks fanned out on an existing Dask cluster (prefect-dask), its two workers
on two stand-in hosts: network namespaces of this machine, each reaching the scheduler and the
Prefect API only over its own veth link, as a worker on another machine would.

The Prefect server listens on the first link's host address (a worker's tasks report their
states to the flow's API URL); the sandboxes use this machine's Docker daemon through its socket.
"""

from __future__ import annotations

import json

import pytest

from tests.support import netns
from tests.support.dask_cluster import dask_cluster
from tests.support.stacks import own_stack, prefect_api_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]

WORKERS = ("worker-a", "worker-b")


@pytest.fixture(scope="module")
def hosts():
    with netns.stand_in_hosts("swdask", 210) as made:
        yield made


@pytest.fixture(scope="module")
def stack(hosts, tmp_path_factory):
    """A Prefect (and MLflow) server on the first link's host address, so both namespaces reach it."""
    with own_stack(tmp_path_factory.mktemp("dask-stack"), host=hosts[0].host_ip, worker=False) as config:
        yield config


@pytest.fixture(scope="module")
def cluster(hosts, stack, tmp_path_factory):
    """A Dask scheduler on this machine and one single-threaded worker in each namespace."""
    with dask_cluster(hosts, stack.prefect_api_url, tmp_path_factory.mktemp("dask-logs"), WORKERS) as address:
        yield address


def _settings(stack):
    return prefect_api_of(stack.prefect_api_url)


def test_rollout_chunks_run_on_the_workers_of_both_hosts(stack, cluster, docker_ready, demo, task_slice, tiny_model_dir,
                                                         tmp_path):
    from flows.rollout import rollout
    from swerl.orchestration.params import RolloutParams, SamplerParams, TrackingConfig
    from swerl.stages.rollout import stored_trajectories

    params = RolloutParams(model=str(tiny_model_dir), tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "roll", samples=1,
                           sampler=SamplerParams(engine="scripted", agent={"max_turns": 20}, concurrency=1, chunk_size=1,
                                                 dask_address=cluster),
                           tracking=TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    with _settings(stack):
        out = rollout(params)
    assert (out.produced, out.skipped) == (3, 0)  # three chunks of one task
    assert sorted(set(out.ran_on)) == [f"dask:{w}" for w in WORKERS]
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
                         chunk_size=1, grading_sandboxes=1, dask_address=cluster)
    with _settings(stack):
        out = grade(params)
    assert (out.resolved, out.total) == (3, 3)
    assert [json.loads(line)["instance_id"] for line in (tmp_path / "results.jsonl").read_text().splitlines()] == ids


def test_a_dask_address_that_is_no_url_is_refused_naming_the_field():
    from pydantic import ValidationError

    from swerl.orchestration.params import SamplerParams

    with pytest.raises(ValidationError, match="dask_address"):
        SamplerParams(dask_address="10.0.0.5:8786")
    assert SamplerParams(dask_address="tcp://10.0.0.5:8786").dask_address == "tcp://10.0.0.5:8786"
