"""One config type for every engine: ``EngineConfig``, a union tagged by ``kind``.

``hf`` (transformers, in process), ``vllm`` (vLLM, in process), ``openai`` (an
OpenAI-compatible HTTP server) and ``scripted`` (replayed replies, no model). Each variant
holds its own fields only; ``swerl.inference.factory.make_engine`` turns one into an engine.
Each is its ``*EngineSettings`` (what a user sets: ``EngineSettings``, a sampler's ``engine``)
plus the policy's ``model``, which a stage adds; scripted has no model: its config is its settings.
How tokens are drawn is not here but in ``SamplingConfig``, which every engine honours the
same way. Importing this module imports no backend (torch, vLLM, httpx).
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, SecretStr, model_validator

from swerl.inference.base import ContextSettings, ModelRef, WeightLoadSettings
from swerl.inference.vllm_config import VLLMEngineConfig, VLLMEngineSettings, VLLMSettings
from swerl.util.settings import DeviceSettings, DtypeSettings, HostSettings

EngineKind = Literal["hf", "vllm", "openai", "scripted"]


class HFEngineSettings(ContextSettings, WeightLoadSettings, DeviceSettings, DtypeSettings):
    """The transformers engine as a user sets it: on which device, in which dtype ('auto': float32 on CPU, where bf16
    is ~20x slower, and bfloat16 on GPU), batched how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["hf"] = Field("hf", description="Selects the transformers engine.")
    max_batch_size: int = Field(64, ge=1, le=4096, description="Sequences decoded together at most.")
    attn_implementation: Literal["sdpa", "eager"] = Field("sdpa", description="Attention kernel passed to from_pretrained.")
    gather_ms: float = Field(2.0, ge=0, le=1000, description="How long the worker waits for more requests before a prefill.")
    torch_threads: int | None = Field(
        None, ge=1, le=1024, description="torch intra-op threads of the engine's worker thread on CPU; None keeps torch's default. "
        "A small model beside busy sandboxes decodes fastest with 1: bench/bench_engine_threads.py measures it."
    )
    kv_keep_tokens: int = Field(
        131_072, ge=0, le=100_000_000, description="Tokens of KV cache kept for idle trajectories, so that a trajectory's next "
        "turn prefills only what its prompt adds; the least recently used are dropped beyond it; 0 keeps none. "
        "Memory: tokens x layers x 2 x kv heads x head dim x dtype bytes (a 0.5B Qwen2 in bf16: 12 KiB a token)."
    )
    close_timeout_s: float = Field(30, gt=0, le=3600, description="close() waits this long for the worker's current forward pass.")


class HFEngineConfig(HFEngineSettings):
    """The transformers engine: its settings and the model it runs."""

    model: ModelRef = Field(description="A local model folder or a hub id.")


def _default_api_key() -> SecretStr:
    return SecretStr(os.environ.get("OPENAI_API_KEY") or "EMPTY")


class OpenAIClientSettings(ContextSettings, WeightLoadSettings):
    """The HTTP engine's client: which server, and how it talks to it. max_context None: the server's max_model_len
    (GET /v1/models)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai"] = Field("openai", description="Selects the OpenAI-compatible HTTP engine.")
    base_url: str | None = Field(None, min_length=1, max_length=2048, description="The server, e.g. http://127.0.0.1:8000/v1 "
                                 "(/v1 is added to a bare host). A stage whose model is a checkpoint folder reloads it into "
                                 "the server first, unless the server already serves it as the stage's policy version "
                                 "(serve_vllm's servers can). None: the pipeline's own server (sampler.serve).")
    api_key: SecretStr = Field(
        default_factory=_default_api_key, description="Bearer token; default: $OPENAI_API_KEY, else 'EMPTY' (what vLLM accepts without --api-key)."
    )
    request_timeout_s: float = Field(600.0, gt=0, le=86_400, description="Longest wait for one completion (read/write); a timeout is not retried.")
    connect_timeout_s: float = Field(10.0, gt=0, le=600, description="Longest wait to open a connection.")
    max_retries: int = Field(3, ge=0, le=20, description="Extra attempts after a connection error or a 408/429/5xx answer; then EngineError.")
    backoff_initial_s: float = Field(0.5, ge=0, le=60, description="Wait before the first retry; doubled at each further one.")
    backoff_max_s: float = Field(8.0, ge=0, le=600, description="Cap on the wait between two retries.")
    max_concurrency: int = Field(64, ge=1, le=4096, description="Requests in flight at once (per event loop); the rest wait their turn here.")
    require_logprobs: bool = Field(
        True, description="Fail (EngineError) when the server gives no log-prob per token; False: NaN log-probs (never for training)."
    )
    vllm_extensions: bool = Field(
        True,
        description="Send vLLM's extra fields (top_k, min_p, repetition_penalty, stop_token_ids, return_token_ids, ...); "
        "turn off only for a server that rejects unknown fields, which then cannot get exact ids.",
    )


class OpenAIEngineSettings(OpenAIClientSettings):
    """The HTTP engine as a user sets it: the client, and the name the server serves the policy under."""

    served_model: str | None = Field(None, min_length=1, max_length=512, description="The name the server serves the "
                                     "policy under (its --served-model-name); None: the only model it lists when the stage "
                                     "reloads a checkpoint folder into it, else the stage's model.")


class OpenAIEngineConfig(OpenAIClientSettings):
    """The HTTP engine: its client and the model name it requests."""

    model: ModelRef = Field(description="The model name the server serves (vLLM: --served-model-name, else its model path).")

    @model_validator(mode="after")
    def _has_server(self) -> OpenAIEngineConfig:
        if not self.base_url:
            raise ValueError("engine openai needs base_url, the server's address, e.g. http://127.0.0.1:8000/v1")
        return self


class VLLMServeConfig(VLLMSettings, HostSettings):
    """A vLLM OpenAI server the pipeline starts itself (``swerl.inference.policy_server``): once for the whole run,
    on the starting policy (the stages' checkpoints must share its architecture), with swerl's reload extension; every
    stage reloads its own checkpoint into it. ``host``: a private-network address when Dask workers elsewhere sample
    (its dev endpoints run any RPC)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    served_model_name: str = Field("policy", min_length=1, max_length=512, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
                                   description="The name requests use (--served-model-name).")
    port: int | None = Field(None, ge=1, le=65535, description="Port; None: a free one.")
    ready_timeout_s: float = Field(600.0, gt=0, le=7200, description="How long it may take to answer its first completion.")
    extra_args: list[str] = Field(default_factory=list, max_length=64, description="More `vllm serve` options, last (they win).")


class ScriptedEngineConfig(ContextSettings):
    """The scripted policy: which demonstration it replays (the replies come from the tasks' gold patches). It has no
    model, so its settings are its whole config; max_context None: 32768."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["scripted"] = Field("scripted", description="Selects the scripted policy (no model).")
    demo: Literal["edit", "replace"] = Field("edit", description="`edit` explores then edits the gold patch's lines; "
                                             "`replace` opens the file, replaces the smallest unique span, submits.")
    give_up: float = Field(0.0, ge=0.0, le=1.0, description="Demo `replace`: the fraction of trajectories that submit right "
                           "after `open`, unfixed (a noisy demonstrator: the policy it teaches often stops short; see "
                           "ReplaceDemonstrator).")
    after_script: str = Field("Done.\n```\nsubmit\n```", max_length=100_000,
                              description="The reply of a trajectory past the end of its script.")


EngineConfig = Annotated[
    HFEngineConfig | VLLMEngineConfig | OpenAIEngineConfig | ScriptedEngineConfig,
    Field(discriminator="kind"),
]
"""Any engine's config; ``kind`` says which."""

SCRIPTED_MAX_CONTEXT = 32768
"""The scripted policy's context when its max_context is None."""

EngineSettings = Annotated[
    HFEngineSettings | VLLMEngineSettings | OpenAIEngineSettings | ScriptedEngineConfig,
    Field(discriminator="kind"),
]
"""What a user sets of any engine (a sampler's ``engine``): an ``EngineConfig`` without the policy's model, which the
stage adds (``swerl.stages.rollout.engine_config``); ``kind`` says which."""

__all__ = ["EngineConfig", "EngineKind", "EngineSettings", "HFEngineConfig", "HFEngineSettings", "OpenAIClientSettings",
           "OpenAIEngineConfig", "OpenAIEngineSettings", "ScriptedEngineConfig", "VLLMEngineConfig", "VLLMEngineSettings",
           "VLLMServeConfig"]
