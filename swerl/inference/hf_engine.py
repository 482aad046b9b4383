"""The transformers engine: the default policy server, on CPU or one GPU.

All trajectories share one model. Requests wait in a queue; a worker thread runs a
continuous batch: new requests are prefilled together and merged into the running batch
at the next decode step, finished ones leave it, so every forward pass carries the
pending requests of all concurrent trajectories. A finished request's KV cache is kept under
its trajectory id (``swerl.inference.hf_kv``), so the trajectory's next turn prefills only
the tokens its prompt adds. Sampling is our own loop (not
``model.generate``) so that nothing from the model's generation_config can reshape the
distribution, and the log-prob of each sampled token is read off the exact distribution
it was drawn from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swerl.inference.base import EngineError, Generation, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.config import HFEngineConfig
from swerl.inference.factory import require_model
from swerl.inference.hf_kv import KeptKV, KVStore, cache_layers, past_block, rebuild_cache, row_kv, stack_lpadded
from swerl.inference.sampling import draw, sampling_logprobs
from swerl.inference.weights import load_checkpoint_into

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    request: GenerationRequest
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    generator: torch.Generator | None
    sampling: SamplingConfig  # the engine's when the request came
    max_new: int
    stop: frozenset[int]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return getattr(torch, name)


def sdpa_without_cudnn(device: torch.device):
    """A context in which ``scaled_dot_product_attention`` on CUDA picks flash, memory-efficient or
    math kernels, never cuDNN's; a no-op elsewhere.

    torch 2.11 tries cuDNN attention first on Hopper, and cuDNN builds an execution plan for
    every new shape: each decode step (one more key) and each micro-batch of a new padded
    length. Measured on an H100: 16 ms of CPU per attention call, so a 4-layer model decoded
    145 tokens/s at batch 8. The backend flags are process-wide; the context restores them.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


class HFEngine:
    """InferenceEngine over a transformers causal LM; see the module docstring."""

    name = "hf"

    def __init__(self, config: HFEngineConfig, sampling: SamplingConfig | None = None, policy_version: str = "0") -> None:
        require_model(config.model)
        from swerl.util.model_loading import load_causal_lm

        self.config = config
        self.sampling = sampling or SamplingConfig()  # read as each request comes: replacing it changes later requests
        self.model_path = config.model  # the last checkpoint loaded, after load_weights
        self.device = resolve_device(self.config.device)
        self.dtype = resolve_dtype(self.config.dtype, self.device)
        try:
            self.model = load_causal_lm(
                self.model_path, dtype=self.dtype, attn_implementation=self.config.attn_implementation
            ).to(self.device)
        except (OSError, ValueError) as e:
            raise EngineError(f"cannot load model {self.model_path!r}: {e}. Pass a local folder (e.g. from `swerl model init-tiny`) or a hub name.") from e
        self.model.eval()
        model_max = getattr(self.model.config, "max_position_embeddings", None) or 32768
        self.max_context = min(self.config.max_context or model_max, model_max)
        self.policy_version = policy_version
        self.stats = {"forward_passes": 0, "prefill_tokens": 0, "reused_tokens": 0, "decode_tokens": 0, "max_batch": 0,
                      "prefill_s": 0.0, "decode_s": 0.0, "merge_s": 0.0}
        self.kept = KVStore(self.config.kv_keep_tokens)  # idle trajectories' KV, by trajectory id
        self.worker_threads: int | None = None  # the worker's torch thread count, once it runs
        self._queue: queue.Queue[_Slot] = queue.Queue()
        self._paused = threading.Event()
        self._idle = threading.Condition()
        self._active: list[_Slot] = []
        self._closed = False
        self._submit = threading.Lock()  # nothing is queued once close() has begun: the worker fails what is queued
        self._worker = threading.Thread(target=self._run, name="swerl-hf-engine", daemon=True)
        self._worker.start()

    # ----- the public protocol -------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Generation:
        self._check_open()
        sampling = self.sampling
        limits = request_limits(request, sampling, self.max_context)
        loop = asyncio.get_running_loop()
        gen = None
        if limits.seed is not None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(limits.seed)
        slot = _Slot(request, loop.create_future(), loop, gen, sampling, limits.max_tokens, frozenset(limits.stop_token_ids))
        with self._submit:
            self._check_open()
            self._queue.put(slot)
        return await slot.future

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the hf engine is closed")

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        """Swap in new weights once in-flight requests finish; new requests wait meanwhile."""
        self._check_open()
        self._paused.set()
        try:
            deadline = time.monotonic() + self.config.weight_load_timeout_s
            with self._idle:
                while self._active:
                    if not self._idle.wait(timeout=max(0.0, deadline - time.monotonic())):
                        raise EngineError(f"load_weights: {len(self._active)} requests still running after {self.config.weight_load_timeout_s}s")
            self.kept.clear()  # keys and values of the old weights
            load_checkpoint_into(self.model, Path(checkpoint_dir))
            self.policy_version = policy_version
            self.model_path = str(checkpoint_dir)
        finally:
            self._paused.clear()

    def close(self) -> None:
        """Stop the worker after its current forward pass; requests still pending fail with EngineError."""
        with self._submit:
            self._closed = True
        self._worker.join(timeout=self.config.close_timeout_s)
        if self._worker.is_alive():
            log.warning("the hf engine's worker is still in a forward pass after %ss; its requests fail when it ends",
                        self.config.close_timeout_s)

    # ----- the worker ----------------------------------------------------------------
    def _run(self) -> None:
        # Set here, not in __init__: torch's OpenMP count is the calling thread's. Its MKL count is
        # process-wide, though, so the worker puts it back when it ends and the trainer that runs
        # next in the process gets its threads back. Two threads fighting sandboxes for two cores
        # made each decode step of the tiny model several times slower than one.
        previous = torch.get_num_threads()
        if self.config.torch_threads is not None:
            torch.set_num_threads(self.config.torch_threads)
        self.worker_threads = torch.get_num_threads()
        try:
            self._serve()
        finally:
            if self.config.torch_threads is not None:
                torch.set_num_threads(previous)

    def _serve(self) -> None:
        try:
            self._serve_until_closed()
        finally:  # closed: what is running or queued fails (generate queues nothing after close)
            with self._idle:
                pending, self._active = list(self._active), []
                self._idle.notify_all()
            while True:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for s in pending:
                self._finish(s, error=EngineError("the hf engine was closed before this request finished"))

    def _serve_until_closed(self) -> None:
        state: _Batch | None = None
        while not self._closed:
            new: list[_Slot] = []
            try:
                new = self._take(block=state is None)
                with torch.inference_mode():
                    t0 = time.perf_counter()
                    if new:
                        fresh = self._prefill(new)
                        t1 = time.perf_counter()
                        state = fresh if state is None else state.merge(fresh)
                        self.stats["prefill_s"] += t1 - t0
                        self.stats["merge_s"] += time.perf_counter() - t1
                    elif state is not None:
                        self._decode(state)
                        self.stats["decode_s"] += time.perf_counter() - t0
                    if state is not None:
                        state = self._retire(state)
            except Exception as e:  # one bad batch fails its requests, never the worker
                log.exception("HF engine batch failed")
                failed = {id(s): s for s in (state.slots if state else []) + new}.values()
                for s in failed:
                    self._finish(s, error=EngineError(f"generation failed: {type(e).__name__}: {e}"))
                state = None
            with self._idle:
                self._active = list(state.slots) if state else []
                if not self._active:
                    self._idle.notify_all()

    def _take(self, block: bool) -> list[_Slot]:
        if self._paused.is_set():
            if block:
                time.sleep(0.01)
            return []
        room = self.config.max_batch_size - (len(self._active))
        taken: list[_Slot] = []
        try:
            if block:
                taken.append(self._queue.get(timeout=0.05))
                if self.config.gather_ms:
                    time.sleep(self.config.gather_ms / 1000)
            while len(taken) < room:
                taken.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        with self._idle:
            self._active = self._active + taken
        return taken

    def _prefill(self, slots: list[_Slot]) -> _Batch:
        """One forward pass over the new requests: each row's kept KV (if its trajectory has one that the
        prompt extends) then the prompt tokens past it. Layout per row, left-padded in two blocks:
        [pad, kept KV | pad, new tokens]; the attention mask's holes and explicit positions make the
        padding invisible."""
        kept = [self.kept.take(s.request.trajectory_id, s.request.prompt_ids) for s in slots]
        reused = [len(k.ids) if k else 0 for k in kept]
        news = [s.request.prompt_ids[n:] for s, n in zip(slots, reused)]
        past, width = max(reused), max(len(x) for x in news)
        pad = self.model.config.pad_token_id or 0
        ids = torch.full((len(slots), width), pad, dtype=torch.long)
        mask = torch.zeros((len(slots), past + width), dtype=torch.long)
        for row, (n, new) in enumerate(zip(reused, news)):
            ids[row, width - len(new):] = torch.tensor(new, dtype=torch.long)
            mask[row, past - n:past] = 1
            mask[row, past + width - len(new):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
        from transformers import DynamicCache

        cache = rebuild_cache(past_block(kept, past), self.model.config) if past else DynamicCache(config=self.model.config)
        # logits_to_keep=1: the prompt's full-vocabulary logits are never materialised
        with sdpa_without_cudnn(self.device):
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                             logits_to_keep=1)
        self.stats["forward_passes"] += 1
        self.stats["prefill_tokens"] += sum(len(x) for x in news)
        self.stats["reused_tokens"] += sum(reused)
        batch = _Batch(slots=list(slots), cache=out.past_key_values, mask=mask, config=self.model.config)
        self._sample(batch, out.logits[:, -1, :])
        return batch

    def _decode(self, batch: _Batch) -> None:
        last = torch.tensor([[s.ids[-1]] for s in batch.slots], dtype=torch.long, device=self.device)
        positions = batch.mask.sum(-1, keepdim=True)
        batch.mask = torch.cat([batch.mask, torch.ones_like(last)], dim=-1)
        with sdpa_without_cudnn(self.device):
            out = self.model(input_ids=last, attention_mask=batch.mask, position_ids=positions, past_key_values=batch.cache,
                             use_cache=True)
        batch.cache = out.past_key_values
        self.stats["forward_passes"] += 1
        self.stats["decode_tokens"] += len(batch.slots)
        self.stats["max_batch"] = max(self.stats["max_batch"], len(batch.slots))
        self._sample(batch, out.logits[:, -1, :])

    def _sample(self, batch: _Batch, logits: torch.Tensor) -> None:
        logp = torch.empty_like(logits, dtype=torch.float32)
        for sampling in {s.sampling for s in batch.slots}:  # one config, except right after the engine's was replaced
            rows = [r for r, s in enumerate(batch.slots) if s.sampling == sampling]
            previous = None
            if sampling.repetition_penalty != 1.0:
                previous = [batch.slots[r].request.prompt_ids + batch.slots[r].ids for r in rows]
            logp[rows] = sampling_logprobs(logits[rows], sampling, previous)
        ids, lps = draw(logp, [s.generator for s in batch.slots])
        for s, t, lp in zip(batch.slots, ids.tolist(), lps.tolist()):
            s.ids.append(t)
            s.logprobs.append(lp)

    def _retire(self, batch: _Batch) -> _Batch | None:
        keep = []
        for row, s in enumerate(batch.slots):
            stopped = s.ids[-1] in s.stop
            if stopped or len(s.ids) >= s.max_new:
                self._keep(batch, row)
                self._finish(s, reason="stop" if stopped else "length")
            else:
                keep.append(row)
        if not keep:
            return None
        if len(keep) < len(batch.slots):
            batch.select(keep)
        return batch

    def _keep(self, batch: _Batch, row: int) -> None:
        """Keep a finishing row's KV (its prompt and all sampled tokens but the last, never fed) for its trajectory's next turn."""
        s = batch.slots[row]
        if not s.request.trajectory_id or self.kept.budget_tokens == 0:
            return
        fed = s.request.prompt_ids + s.ids[:-1]
        if int(batch.mask[row].sum()) != len(fed):  # cannot happen; a wrong cache would silently change samples
            log.warning("not keeping the KV of %s: %d cached positions for %d fed tokens", s.request.request_id,
                        int(batch.mask[row].sum()), len(fed))
            return
        self.kept.put(s.request.trajectory_id, KeptKV(fed, row_kv(cache_layers(batch.cache), row, batch.mask[row])))

    def _finish(self, slot: _Slot, reason: str = "length", error: Exception | None = None) -> None:
        if error is not None:
            slot.loop.call_soon_threadsafe(_set_exception, slot.future, error)
            return
        gen = Generation(
            request_id=slot.request.request_id,
            token_ids=slot.ids,
            logprobs=slot.logprobs,
            finish_reason=reason,  # type: ignore[arg-type]
            policy_version=self.policy_version,
            extra={"latency_s": time.perf_counter() - slot.started},
        )
        slot.loop.call_soon_threadsafe(_set_result, slot.future, gen)


def _set_result(fut: asyncio.Future, value: Generation) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, error: Exception) -> None:
    if not fut.done():
        fut.set_exception(error)


@dataclass
class _Batch:
    """The running batch: left-padded attention mask and KV cache, one row per slot."""

    slots: list[_Slot]
    cache: object
    mask: torch.Tensor
    config: object

    def select(self, rows: list[int]) -> None:
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.slots = [self.slots[r] for r in rows]
        self.mask = self.mask.index_select(0, index)
        self.cache.batch_select_indices(index)
        # columns that are padding for every remaining row are dead weight: drop them
        lead = int((self.mask.cumsum(-1) == 0).sum(-1).min())
        if lead:
            self.mask = self.mask[:, lead:]
            self.cache = rebuild_cache([(k[:, :, lead:], v[:, :, lead:]) for k, v in cache_layers(self.cache)], self.config)

    def merge(self, other: _Batch) -> _Batch:
        """Join ``other`` (fresh prefills) to this batch, left-padding the shorter one; one copy of each."""
        layers = [(stack_lpadded(k1, k2), stack_lpadded(v1, v2))
                  for (k1, v1), (k2, v2) in zip(cache_layers(self.cache), cache_layers(other.cache))]
        return _Batch(slots=self.slots + other.slots, cache=rebuild_cache(layers, self.config),
                      mask=stack_lpadded(self.mask, other.mask), config=self.config)
