"""Training-step benchmarks: DAPO step throughput, peak memory against length, DeepSpeed vs torch, GPU MFU.

    .venv/bin/python bench/bench_train.py [--steps 3] [--batch 4] [--seq-len 1024] \
        [--lengths 512 1024 2048 4096 8192] [--chunk 1024] [--peak-tflops 989] [--gpu-lengths 8192 16384 32768]

Builds tiny random Qwen2 policies with a 32k vocabulary (``init_tiny``) in a temp folder, then:

1. times the DAPO step (``TorchTrainer``, chunked action log-probs) against a plain SFT step
   on the very same batch and micro-batches: ``objective="sft"`` of the same trainer, and a
   Hugging Face ``model(input_ids, labels=...)`` cross-entropy step with the same AdamW and
   clipping; steps are interleaved so that machine load hits all three alike;
2. measures the peak RSS of one DAPO step per sequence length, each in a fresh subprocess
   (after a 64-token warm-up step that allocates AdamW state), against a naive step that
   materialises full-vocabulary fp32 log-probs (``logits.float().log_softmax(-1)``, gathered)
   on the same model, batch and optimiser, and against the DAPO step with its (metric-only)
   entropy output detached at once, a what-if that isolates the retained per-chunk tensors;
   prints bytes per token, the marginal and fitted slopes and the ``V x T x 4`` bytes of one
   full fp32 logits tensor;
3. times a DeepSpeed ZeRO-3 step (one process, gloo) against the torch backend on the same batch;
4. the log-prob head, the previous one (``checkpointed``: plain ops under activation
   checkpointing, ``swerl.rl.logprobs_reference``) against the fused one side by side in one
   run, and the fused one with its per-chunk math through torch.compile (``compiled=True``,
   ``TrainerConfig.logprob_compiled``): (a) the head alone, forward + backward over n positions: time, peak extra memory
   (CUDA allocator peak; on CPU the allocator's live bytes from torch.profiler's memory
   events), agreement of log-probs / entropy / gradients between the two, the fused head's
   bf16-autocast figures against its fp32 ones, and on CUDA the head's MFU, 6 x n x V x H
   FLOPs (forward 2nVH, backward 4nVH; the backward's recomputed logits are not counted) /
   time / ``--peak-tflops``; (b) the DAPO step with each head: tokens/s and model FLOPs
   utilisation, 6 x params x tokens / step time / ``--peak-tflops``. On a GPU: a ~0.5B
   Qwen2-shaped random model (vocab 151936, hidden 896) at ``--gpu-lengths``, bf16 autocast;
   on CPU: a small random Qwen2 (vocab 32768, hidden 256) at ``--cpu-lengths`` in fp32, where
   only the ratios mean something (no MFU). Further trainers: 'compiled layers' adds
   ``TrainerConfig.compile_layers`` to the compiled head, 'cuDNN attention' adds
   ``cudnn_attention`` to that, and, with checkpointing on, 'keeps attention' adds
   ``checkpoint_keep_attention``; MFU is printed as 6 x params x tokens and again with causal
   attention's products (6 x layers x hidden x n^2) counted. ``--profile VARIANT [--trace FILE]``
   then profiles one step (top kernels; a chrome trace); ``--variants`` keeps some trainers;
   ``--compile-what-if`` is a what-if the trainer does not offer (README: what it gave on an H100).

Ratios are against baselines measured in the same run; nothing is asserted about time.
CPU figures are noisy on a shared machine: the load average is printed with each section.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/swerl/torch_extensions"))  # before deepspeed loads

import psutil
import torch
import torch.nn.functional as F

from swerl.models.tiny import TinyModelConfig, init_tiny
import swerl.rl.logprobs as logprobs_module
from swerl.rl.logprobs import action_logprobs_and_entropy
from swerl.rl.logprobs_reference import checkpointed_action_logprobs_and_entropy
from swerl.rl.loss import dapo_loss
from swerl.train import TrainBatch, TrainerConfig, make_trainer
from swerl.train.step import clip_grad_norm, plan_step
from swerl.util.memory import peak_allocated_bytes

MIB = 1024 * 1024
VOCAB = 32768


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def make_batch(lengths: list[int], vocab: int, seed: int = 0) -> TrainBatch:
    """Random sequences: the first eighth of each is prompt, the rest action tokens, with sampler log-probs and advantages."""
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, vocab, (n,), generator=g) for n in lengths]
    masks = [torch.arange(n) >= max(1, n // 8) for n in lengths]
    old = [torch.where(m, -torch.rand(n, generator=g) * 10 - 5, torch.zeros(n)) for m, n in zip(masks, lengths)]
    adv = torch.randn(len(lengths), generator=g)
    return TrainBatch(ids, masks, old, adv)


def manual_step(trainer, batch: TrainBatch, micro_loss) -> None:
    """One optimiser step outside the trainer's own step, on its model, optimiser and micro-batch plan:
    ``micro_loss(policy, mb, plan)`` gives each padded micro-batch's loss; then the same clipping and AdamW."""
    trainer.optimizer.zero_grad(set_to_none=True)
    plan = plan_step(batch, trainer.config)
    for indices in plan.microbatches:
        micro_loss(trainer.policy, batch.select(indices).padded(trainer.device), plan).backward()
    clip_grad_norm(trainer.policy.parameters(), trainer.config.grad_clip)
    trainer.optimizer.step()


def naive_step(trainer, batch: TrainBatch) -> None:
    """The DAPO step with full-vocabulary fp32 log-probs, ``[B, T, V]``."""
    cfg = trainer.config

    def micro_loss(policy, mb, plan):
        ids = mb["input_ids"]
        logits = policy(input_ids=ids, attention_mask=mb["attention_mask"]).logits.float()  # [B, T, V]
        lp = logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)  # lp[t] predicts ids[t + 1]
        lp = F.pad(lp, (1, 0))  # at t: log p(ids[t]), Trajectory.logprobs' layout
        return dapo_loss(lp, mb["old_logprobs"], mb["advantages"], mb["action_mask"], cfg.loss.eps_low, cfg.loss.eps_high,
                         norm_tokens=plan.norm_tokens)[0]

    manual_step(trainer, batch, micro_loss)


def hf_sft_step(trainer, batch: TrainBatch) -> None:
    """A plain Hugging Face cross-entropy step, ``model(input_ids, labels=...)`` with labels = the action tokens."""
    def micro_loss(policy, mb, plan):
        labels = torch.where(mb["action_mask"], mb["input_ids"], torch.full_like(mb["input_ids"], -100))
        return policy(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], labels=labels,
                      num_items_in_batch=plan.norm_tokens).loss

    manual_step(trainer, batch, micro_loss)


def interleaved(steps: dict[str, callable], repeats: int) -> dict[str, list[float]]:
    """One warm-up call each, then ``repeats`` rounds calling every step once in turn; seconds per call."""
    for fn in steps.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def throughput_section(args, model_dir: Path) -> None:
    lengths = [args.seq_len] * args.batch
    batch = make_batch(lengths, VOCAB)
    tokens = sum(lengths)
    common = dict(optimizer={"lr": 1e-6}, max_tokens_per_microbatch=args.microbatch_tokens, logprob_chunk_size=args.chunk, device="cpu")
    dapo = make_trainer(model_dir, TrainerConfig(**common))
    sft = make_trainer(model_dir, TrainerConfig(objective="sft", **common))
    hf = make_trainer(model_dir, TrainerConfig(objective="sft", **common))  # its model and AdamW only
    n_mb = len(plan_step(batch, dapo.config).microbatches)
    print(f"## 1. DAPO step vs SFT step ({args.batch} x {args.seq_len} tokens, {n_mb} micro-batches of <= "
          f"{args.microbatch_tokens} tokens, {args.steps} interleaved steps after 1 warm-up, load {load()})")
    times = interleaved({"dapo": lambda: dapo.train_step(batch), "sft": lambda: sft.train_step(batch),
                         "hf": lambda: hf_sft_step(hf, batch)}, args.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    rate = {k: tokens / v for k, v in med.items()}
    print(f"DAPO step (chunked log-probs)       median {med['dapo']:6.2f} s (min {best['dapo']:6.2f})  {rate['dapo']:6.0f} tokens/s")
    for key, label in (("sft", "SFT step (objective='sft')  "), ("hf", "HF model(labels=...) CE step")):
        print(f"{label}        median {med[key]:6.2f} s (min {best[key]:6.2f})  {rate[key]:6.0f} tokens/s   "
              f"DAPO/{key.upper()} tokens/s = {rate['dapo'] / rate[key]:.2f}x (on min times {best[key] / best['dapo']:.2f}x)")
    print(f"(load after: {load()})\n")
    for t in (dapo, sft, hf):
        t.close()


class PeakRSS(threading.Thread):
    """Highest RSS of this process sampled every ``interval_s`` while running."""

    def __init__(self, interval_s: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.proc, self.interval_s, self.stop_event = psutil.Process(), interval_s, threading.Event()
        self.peak = self.proc.memory_info().rss

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval_s)

    def stop(self) -> int:
        self.stop_event.set()
        self.join()
        return max(self.peak, self.proc.memory_info().rss)


class DetachedEntropy(torch.nn.Module):
    """What-if for section 2: the trainer's log-prob model with its entropy output detached at once.

    The entropy is a metric only (the objectives use ``ent.detach()``), but the undetached
    output keeps each checkpointed chunk's recomputed [chunk, V] tensors of its branch alive
    through the whole backward pass (they are saved for a backward that never runs).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args):
        lp, ent = self.model(*args)
        return lp, ent.detach()


METHODS = {"ours": "DAPO step (chunked head)", "ours-detached": "same, entropy output detached (what-if)",
           "naive": "full-vocab fp32 log_softmax"}


def memory_worker(method: str, length: int, model_dir: str, chunk: int) -> None:
    """In a fresh process: peak RSS above the pre-step RSS of one step on one ``length``-token sequence; prints JSON."""
    cfg = TrainerConfig(optimizer={"lr": 1e-6}, max_tokens_per_microbatch=max(length, 64), logprob_chunk_size=chunk, device="cpu")
    trainer = make_trainer(model_dir, cfg)
    if method == "ours-detached":
        trainer.model = DetachedEntropy(trainer.model)
    step = (lambda b: naive_step(trainer, b)) if method == "naive" else trainer.train_step
    step(make_batch([64], VOCAB, seed=1))  # AdamW state and first-call allocations out of the measurement
    batch = make_batch([length], VOCAB)
    gc.collect()
    before = psutil.Process().memory_info().rss
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sampler = PeakRSS()
    sampler.start()
    t = time.perf_counter()
    step(batch)
    seconds = time.perf_counter() - t
    sampled = sampler.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = max(sampled, maxrss if maxrss > maxrss_before else 0)  # ru_maxrss counts only if this step raised it
    print(json.dumps({"delta": peak - before, "before": before, "seconds": seconds}))


def measure_memory(method: str, length: int, model_dir: Path, chunk: int) -> dict:
    cmd = [sys.executable, __file__, "--memory-worker", method, str(length), str(model_dir), str(chunk)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"memory worker {method} {length} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of ys against xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def memory_section(args, model_dir: Path, hidden: int, layers: int) -> None:
    print(f"## 2. peak RSS of one DAPO step against sequence length (1 sequence, 7/8 action tokens, vocab {VOCAB}, "
          f"hidden {hidden}, {layers} layers, chunk {args.chunk}; fresh process each, delta over pre-step RSS; load {load()})")
    for m, what in METHODS.items():
        print(f"  {m:13s} {what}")
    rows = {m: {n: measure_memory(m, n, model_dir, args.chunk) for n in args.lengths} for m in METHODS}
    print(f"{'tokens':>7} | " + " | ".join(f"{m + ' MiB':>18} {'B/token':>8} {'s':>5}" for m in METHODS)
          + f" | {'naive/ours':>10} | {'V x T x 4 MiB':>13}")
    for n in args.lengths:
        cells = [f"{rows[m][n]['delta'] / MIB:18.1f} {rows[m][n]['delta'] / n:8.0f} {rows[m][n]['seconds']:5.1f}" for m in METHODS]
        ratio = rows["naive"][n]["delta"] / max(rows["ours"][n]["delta"], 1)
        print(f"{n:7d} | " + " | ".join(cells) + f" | {ratio:9.2f}x | {VOCAB * n * 4 / MIB:13.1f}")
    print("marginal bytes/token between consecutive lengths (constant = linear):")
    for m in METHODS:
        d = [rows[m][n]["delta"] for n in args.lengths]
        steps = [(d[i + 1] - d[i]) / (args.lengths[i + 1] - args.lengths[i]) for i in range(len(d) - 1)]
        print(f"  {m:13s} " + "  ".join(f"{a}->{b}: {s:7.0f}" for a, b, s in zip(args.lengths, args.lengths[1:], steps)))
    long = [n for n in args.lengths if n >= args.chunk]
    for m in METHODS:
        all_fit = fit_slope(args.lengths, [rows[m][n]["delta"] for n in args.lengths])
        line = f"fitted slope {m:13s}: {all_fit:7.0f} B/token over all lengths = {all_fit / (VOCAB * 4):.2f} x (V x 4)"
        if len(long) >= 2:
            line += f"; {fit_slope(long, [rows[m][n]['delta'] for n in long]):7.0f} B/token over lengths >= chunk"
        print(line)
    print(f"one full fp32 logits row is V x 4 = {VOCAB * 4} B/token; pre-step RSS (shortest length) "
          + ", ".join(f"{m} {rows[m][args.lengths[0]]['before'] / MIB:.0f} MiB" for m in METHODS))
    print(f"(load after: {load()})\n")


def deepspeed_section(args, model_dir: Path) -> None:
    lengths = [args.seq_len] * args.batch
    batch = make_batch(lengths, VOCAB)
    tokens = sum(lengths)
    common = dict(optimizer={"lr": 1e-6}, max_tokens_per_microbatch=args.microbatch_tokens, logprob_chunk_size=args.chunk)
    print(f"## 3. DeepSpeed ZeRO-3 (1 process, CPU, gloo) vs torch backend, DAPO step ({args.batch} x {args.seq_len} tokens, "
          f"load {load()})")
    torch_trainer = make_trainer(model_dir, TrainerConfig(device="cpu", **common))
    t = time.perf_counter()
    ds = make_trainer(model_dir, TrainerConfig(backend="deepspeed", zero_stage=3, **common))
    init_s = time.perf_counter() - t
    times = interleaved({"torch": lambda: torch_trainer.train_step(batch), "ds": lambda: ds.train_step(batch)}, args.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(f"torch backend        median {med['torch']:6.2f} s (min {best['torch']:6.2f})  {tokens / med['torch']:6.0f} tokens/s")
    print(f"DeepSpeed ZeRO-3     median {med['ds']:6.2f} s (min {best['ds']:6.2f})  {tokens / med['ds']:6.0f} tokens/s   "
          f"step time ZeRO-3/torch = {med['ds'] / med['torch']:.2f}x (on min times {best['ds'] / best['torch']:.2f}x)   "
          f"(ZeRO-3 engine init {init_s:.1f} s)")
    print(f"(load after: {load()})\n")
    ds.close()
    torch_trainer.close()


def qwen_05b_config(vocab: int = 151936, hidden: int = 896, layers: int = 24, heads: int = 14, kv_heads: int = 2,
                    intermediate: int = 4864, max_positions: int = 32768):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                       tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})


HEADS = {"checkpointed": checkpointed_action_logprobs_and_entropy, "fused": action_logprobs_and_entropy,
         "fused+compile": functools.partial(action_logprobs_and_entropy, compiled=True)}
# the DAPO step with each head: (what replaces swerl.rl.logprobs.action_logprobs_and_entropy, logprob_compiled)
STEP_HEADS = {"checkpointed": (lambda *args, compiled=False: checkpointed_action_logprobs_and_entropy(*args), False),
              "fused": (action_logprobs_and_entropy, False), "fused+compile": (action_logprobs_and_entropy, True)}
# ... then the whole step's fastest forms: the decoder layers compiled too (TrainerConfig.compile_layers), and with
# them cuDNN's attention (TrainerConfig.cudnn_attention); with checkpointing on, the last also keeps each layer's
# attention output (TrainerConfig.checkpoint_keep_attention). name -> (head, the TrainerConfig fields it sets)
STEP_VARIANTS = {name: (head, {"logprob_compiled": compiled}) for name, (head, compiled) in STEP_HEADS.items()} | {
    "compiled layers": (action_logprobs_and_entropy, {"logprob_compiled": True, "compile_layers": True}),
    "cuDNN attention": (action_logprobs_and_entropy, {"logprob_compiled": True, "compile_layers": True,
                                                      "cudnn_attention": True}),
    "keeps attention": (action_logprobs_and_entropy, {"logprob_compiled": True, "compile_layers": True,
                                                      "cudnn_attention": True, "checkpoint_keep_attention": True})}


def variant_config(name: str, args, device: str, n: int) -> TrainerConfig | None:
    """The trainer config of a step variant at n tokens, or None where the variant needs checkpointing and it is off."""
    fields = STEP_VARIANTS[name][1]
    if fields.get("checkpoint_keep_attention") and not args.gpu_checkpointing:
        return None
    return TrainerConfig(optimizer={"lr": 1e-6}, device=device, max_tokens_per_microbatch=n, logprob_chunk_size=args.chunk,
                         gradient_checkpointing=args.gpu_checkpointing, **fields)


def step_flops(params: int, n: int, qwen_config) -> tuple[float, float]:
    """(6 x params x tokens, the same plus causal attention's score and value matmuls): forward 2 n^2 d per layer
    (half of QK^T and of PV, each 2 n^2 d), backward twice that; recomputation under checkpointing not counted."""
    attention = 6 * qwen_config.num_hidden_layers * qwen_config.hidden_size * n * n
    return 6 * params * n, 6 * params * n + attention


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def head_run(head, hidden, weight, targets, upstream, chunk: int, autocast: bool, device: str):
    """Forward + backward of ``sum(lp * upstream)``; returns (lp, entropy, d hidden, d weight)."""
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
        lp, ent = head(h, w, targets, torch.arange(len(targets), device=device), chunk)
    (lp * upstream).sum().backward()
    sync(device)
    return lp.detach(), ent.detach(), h.grad, w.grad


def agreement(a, b) -> str:
    cos = torch.nn.functional.cosine_similarity
    return (f"log-prob max |diff| {(a[0] - b[0]).abs().max():.2e} (mean {(a[0] - b[0]).abs().mean():.2e}), "
            f"entropy max {(a[1] - b[1]).abs().max():.2e}, gradient cosine hidden "
            f"{cos(a[2].flatten().double(), b[2].flatten().double(), 0):.6f} weight {cos(a[3].flatten().double(), b[3].flatten().double(), 0):.6f}")


def head_section(args, device: str, lengths: list[int], vocab: int, hidden_size: int, autocast: bool) -> None:
    cuda = device.startswith("cuda")
    print(f"### 4a. the head alone: [n, {hidden_size}] fp32 hidden states, [{vocab}, {hidden_size}] fp32 head, chunk "
          f"{args.chunk}, {'bf16 autocast' if autocast else 'fp32'}, forward + backward (median of {args.gpu_steps}, interleaved)")
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(vocab, hidden_size, generator=g) / hidden_size ** 0.5).to(device)
    for n in lengths:
        hidden = torch.randn(n, hidden_size, generator=g).mul(2).to(device)  # logits of std ~2
        targets = torch.randint(0, vocab, (n,), generator=g).to(device)
        upstream = torch.randn(n, generator=g).to(device)
        results, peaks = {}, {}
        for name, head in HEADS.items():
            head_run(head, hidden, weight, targets, upstream, args.chunk, autocast, device)  # compiles, if it does
            peaks[name] = peak_allocated_bytes(lambda: results.__setitem__(name, head_run(head, hidden, weight, targets, upstream,
                                                                                       args.chunk, autocast, device)), device)
        times = interleaved({name: (lambda head=head: head_run(head, hidden, weight, targets, upstream, args.chunk, autocast, device))
                             for name, head in HEADS.items()}, args.gpu_steps)
        logits_mib = n * vocab * 4 / MIB
        print(f"n={n}: one [n, V] fp32 logits tensor would be {logits_mib:.0f} MiB; [chunk, V] fp32 {args.chunk * vocab * 4 / MIB:.0f} MiB")
        for name in HEADS:
            sec = statistics.median(times[name])
            mfu = f"  head MFU {6 * n * vocab * hidden_size / sec / (args.peak_tflops * 1e12) * 100:5.1f}%" if cuda else ""
            print(f"  {name:13s} {sec * 1e3:9.1f} ms  {n / sec:9.0f} positions/s  peak extra {peaks[name] / MIB:8.1f} MiB{mfu}")
        old = statistics.median(times["checkpointed"])
        for name in ("fused", "fused+compile"):
            print(f"  {name} / checkpointed: time x{statistics.median(times[name]) / old:.2f}, "
                  f"peak memory x{peaks[name] / peaks['checkpointed']:.2f}")
            print(f"  {name} vs checkpointed: {agreement(results[name], results['checkpointed'])}")
        if autocast or not cuda:  # bf16 against fp32, the same fused head
            fp32 = head_run(action_logprobs_and_entropy, hidden, weight, targets, upstream, args.chunk, False, device)
            bf16 = results["fused"] if autocast else head_run(action_logprobs_and_entropy, hidden, weight, targets, upstream,
                                                               args.chunk, True, device)
            print(f"  fused bf16 autocast vs fp32: {agreement(bf16, fp32)}")
        results.clear()
        gc.collect()
    print()


def step_section(args, work: Path, qwen_config, device: str, lengths: list[int]) -> None:
    """Tokens/s and MFU of the DAPO step with each head (bf16 autocast on a GPU, fp32 master weights)."""
    from transformers import Qwen2ForCausalLM

    model_dir = work / f"qwen-{qwen_config.hidden_size}-random"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        Qwen2ForCausalLM(qwen_config).save_pretrained(model_dir)
    cuda = device.startswith("cuda")
    name = torch.cuda.get_device_name() if cuda else device
    print(f"### 4b. DAPO step on a random Qwen2 ({qwen_config.hidden_size} hidden, {qwen_config.num_hidden_layers} layers, "
          f"vocab {qwen_config.vocab_size}) on {name}{f', peak {args.peak_tflops} TFLOPS' if cuda else ''}, gradient checkpointing "
          f"{'on' if args.gpu_checkpointing else 'off'}, chunk {args.chunk}; the {len(STEP_VARIANTS)} trainers' steps interleaved; "
          f"'compiled layers': the fused+compile head and TrainerConfig.compile_layers")
    for n in lengths:
        trainers, steps = {}, {}
        batch = make_batch([n], qwen_config.vocab_size)
        try:
            for head_name, (head, _) in STEP_VARIANTS.items():
                if (config := variant_config(head_name, args, device, n)) is None:
                    continue
                trainers[head_name] = make_trainer(model_dir, config)

                def step(trainer=trainers[head_name], head=head):
                    with mock.patch.object(logprobs_module, "action_logprobs_and_entropy", head):
                        trainer.train_step(batch)
                    sync(device)

                steps[head_name] = step
            params = sum(p.numel() for p in next(iter(trainers.values())).policy.parameters())
            times = interleaved(steps, args.gpu_steps)  # one warm-up step each, then rounds over the heads
            peaks = {k: peak_allocated_bytes(fn, device) for k, fn in steps.items()} if cuda else {}
        except torch.cuda.OutOfMemoryError:
            print(f"{n:6d} tokens: out of GPU memory with {len(trainers)} trainers (peak allocated "
                  f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB)")
            continue
        finally:
            for trainer in trainers.values():
                trainer.close()
            trainers.clear()
            steps.clear()
            gc.collect()
        seconds = {k: statistics.median(v) for k, v in times.items()}
        dense, with_attention = step_flops(params, n, qwen_config)
        for head_name, sec in seconds.items():
            mfu = (f"MFU {dense / sec / (args.peak_tflops * 1e12) * 100:5.1f}% (6 x {params / 1e6:.0f}M params x tokens), "
                   f"{with_attention / sec / (args.peak_tflops * 1e12) * 100:5.1f}% with attention") if cuda else ""
            peak = f"step's peak above resident {peaks[head_name] / 2**30:5.1f} GiB" if cuda else ""
            print(f"{n:6d} tokens, {head_name:15s}: median {sec:7.3f} s  {n / sec:8.0f} tokens/s  {mfu}  {peak}")
        for name in [k for k in seconds if k != "checkpointed" and "checkpointed" in seconds]:
            print(f"{n:6d} tokens: {name} / checkpointed step time x{seconds[name] / seconds['checkpointed']:.2f}")
    print()


def profile_section(args, work: Path, qwen_config, device: str, n: int) -> None:
    """Where one DAPO step's time goes: torch.profiler's kernels, the top 25 by device time."""
    from torch.profiler import ProfilerActivity, profile, record_function

    head = STEP_VARIANTS[args.profile][0]
    config = variant_config(args.profile, args, device, n)
    if config is None:
        raise SystemExit(f"--profile {args.profile!r} needs gradient checkpointing on")
    trainer = make_trainer(work / f"qwen-{qwen_config.hidden_size}-random", config)
    batch = make_batch([n], qwen_config.vocab_size)
    with mock.patch.object(logprobs_module, "action_logprobs_and_entropy", head):
        trainer.train_step(batch)  # warm-up (and compilation)
        sync(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=activities) as prof:
            with record_function("dapo_step"):
                trainer.train_step(batch)
            sync(device)
    trainer.close()
    if args.trace:
        prof.export_chrome_trace(str(args.trace))
        print(f"chrome trace of the step: {args.trace}")
    sort = "cuda_time_total" if device.startswith("cuda") else "cpu_time_total"
    print(f"### 4c. one DAPO step, head {args.profile}, {n} tokens: top kernels by {sort}")
    print(prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=70))


def what_ifs(args) -> None:
    """Section 4's what-if (``--compile-what-if``) and ``--variants``, for the rest of the run."""
    if args.compile_what_if:
        import swerl.train.torch_trainer as trainer_module

        def compile_instead(model) -> int:
            if args.compile_what_if == "decoder":
                model.get_decoder().compile(dynamic=None)
            else:
                for layer in model.get_decoder().layers:
                    layer.compile(mode="reduce-overhead")
            return 1

        mock.patch.object(trainer_module, "compile_decoder_layers", compile_instead).start()
        print(f"what-if: 'compiled layers' compiles {args.compile_what_if}\n")
    for name in set(STEP_VARIANTS) - set(args.variants or STEP_VARIANTS):
        del STEP_VARIANTS[name]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="timed steps per variant (after one warm-up)")
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (sections 1 and 3)")
    ap.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (sections 1 and 3)")
    ap.add_argument("--microbatch-tokens", type=int, default=2048, help="max_tokens_per_microbatch (sections 1 and 3)")
    ap.add_argument("--chunk", type=int, default=1024, help="logprob_chunk_size")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192], help="section 2")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="GPU peak for MFU (H100 dense bf16: 989)")
    ap.add_argument("--gpu-lengths", type=int, nargs="+", default=[8192, 16384, 32768], help="section 4 on a GPU")
    ap.add_argument("--cpu-lengths", type=int, nargs="+", default=[1024, 2048], help="section 4 on CPU")
    ap.add_argument("--gpu-steps", type=int, default=3, help="timed repetitions per variant in section 4")
    ap.add_argument("--gpu-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--compile-what-if", choices=["decoder", "layers-cudagraphs"], help="section 4 what-if for the "
                    "'compiled layers' trainer: compile the whole decoder as one graph, or each layer with CUDA graphs "
                    "(mode reduce-overhead)")
    ap.add_argument("--variants", nargs="+", choices=sorted(STEP_VARIANTS), help="section 4b: only these trainers")
    ap.add_argument("--trace", type=Path, help="with --profile: also write the step's chrome trace here")
    ap.add_argument("--head-alone", action=argparse.BooleanOptionalAction, default=True, help="section 4a (the head alone)")
    ap.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--profile", choices=sorted(STEP_VARIANTS), help="section 4: after the table, profile one DAPO step with this "
                    "head at the first length and print the kernels that took the most time")
    ap.add_argument("--memory-worker", nargs=4, metavar=("METHOD", "LENGTH", "MODEL_DIR", "CHUNK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_worker:
        method, length, model_dir, chunk = args.memory_worker
        memory_worker(method, int(length), model_dir, int(chunk))
        return

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-train-"))
    print(f"# swerl training benchmarks (CPU x{os.cpu_count()}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load average {load()})\n")
    if 1 in args.sections or 3 in args.sections:
        step_model = init_tiny(work / "tiny-256", TinyModelConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4,
                                                                  num_attention_heads=4, num_key_value_heads=2,
                                                                  intermediate_size=1024))
        print(f"step model: hidden 256, 4 layers, vocab {VOCAB}, "
              f"{json.loads((step_model / 'swerl_model.json').read_text())['parameters'] / 1e6:.1f}M parameters (tied head)\n")
    if 1 in args.sections:
        throughput_section(args, step_model)
    if 2 in args.sections:
        mem_model = init_tiny(work / "tiny-128", TinyModelConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=512))
        memory_section(args, mem_model, 128, 2)
    if 3 in args.sections:
        deepspeed_section(args, step_model)
    if 4 in args.sections:
        what_ifs(args)
    if 4 in args.sections:
        if torch.cuda.is_available():
            print("## 4. the log-prob head: checkpointed (previous) against fused, ~0.5B Qwen2 shapes, bf16 autocast\n")
            if args.head_alone:
                head_section(args, "cuda", args.gpu_lengths, 151936, 896, autocast=True)
            step_section(args, work, qwen_05b_config(), "cuda", args.gpu_lengths)
            if args.profile:
                profile_section(args, work, qwen_05b_config(), "cuda", args.gpu_lengths[0])
        else:
            print("## 4. the log-prob head: checkpointed (previous) against fused, on CPU in fp32 (no GPU: no MFU; "
                  "ratios only)\n")
            if args.head_alone:
                head_section(args, "cpu", args.cpu_lengths, VOCAB, 256, autocast=False)
            step_section(args, work, qwen_05b_config(vocab=VOCAB, hidden=256, layers=2, heads=4, kv_heads=2, intermediate=1024),
                         "cpu", args.cpu_lengths)
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
