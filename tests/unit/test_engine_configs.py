"""One config type for every engine, tagged by kind, and the stage's engine built from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from swerl.inference.base import EngineError, SamplingConfig
from swerl.inference.config import EngineConfig, HFEngineConfig, OpenAIEngineConfig, ScriptedEngineConfig, VLLMEngineConfig
from swerl.inference.factory import make_engine
from swerl.stages.errors import StageInputError
from swerl.stages.rollout import RolloutStage, engine_config, stage_sampling

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


AGENT_FIELDS = ("max_context", "max_new_tokens")


def stage(seed: int | None = 0, **kw) -> RolloutStage:
    """A stage with the sampler's settings given flat (``max_context`` and ``max_new_tokens`` are the agent's)."""
    agent = {k: kw.pop(k) for k in AGENT_FIELDS if k in kw}
    sampler = {**kw, **({"agent": agent} if agent else {})}
    return RolloutStage(tasks=Path("tasks.jsonl"), model="models/tiny", out=Path("out"), seed=seed, sampler=sampler)


def test_the_stage_hands_its_engine_the_fields_that_belong_to_it():
    assert engine_config(stage(torch_threads=1, max_context=4096)) == HFEngineConfig(model="models/tiny", max_context=4096,
                                                                                    torch_threads=1)
    assert engine_config(stage(engine="vllm", max_context=4096)) == VLLMEngineConfig(model="models/tiny", max_model_len=4096)
    assert engine_config(stage(engine="openai", base_url="http://h:1/v1")) == OpenAIEngineConfig(base_url="http://h:1/v1",
                                                                                                 model="models/tiny")
    assert engine_config(stage(engine="scripted", demo="replace", demo_give_up=0.5)) == ScriptedEngineConfig(demo="replace",
                                                                                                          give_up=0.5)
    with pytest.raises(StageInputError, match="engine openai needs base_url"):
        engine_config(stage(engine="openai"))


def test_the_stage_samples_unbiased_with_its_max_new_tokens_and_seed(tok):
    """--max-new-tokens 4096 reaches the engine itself (vLLM used to cap replies at its default of 1024)."""
    sampling = stage_sampling(stage(engine="vllm", max_new_tokens=4096, seed=3))
    assert sampling == SamplingConfig(max_new_tokens=4096, seed=3) and sampling.unbiased
    engine = make_engine(ScriptedEngineConfig(), sampling=sampling, tokenizer=tok, scripts={})
    assert engine.sampling is sampling  # what every engine reads per request (tests/conformance)


def test_a_stage_setting_its_engine_refuses_is_a_stage_input_error():
    with pytest.raises(StageInputError, match="(?s)hf engine settings are invalid.*model"):
        engine_config(stage().model_copy(update={"model": ""}))
