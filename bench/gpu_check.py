"""GPU checks of the paths CPU tests never run: the HF engine on cuda and the torch trainer's bf16 step.

    python bench/gpu_check.py [--work DIR] [--new-tokens 256] [--steps 4] [--big-engine]
    python bench/gpu_check.py --deepspeed [--work DIR]   # after a first run: the same batch through ZeRO-2/3

Prints figures and a CHECK line per assertion; exits 1 if any check failed. Needs a GPU.

1. engine: ``HFEngine(HFEngineConfig(model=..., device='cuda'))`` (bf16) on a tiny Qwen2 from ``init_tiny`` whose final
   norm is scaled up (x ``--sharpen``) so that its next-token distributions are peaked like a
   trained model's (a random model's are nearly uniform, which hides precision errors);
   decode tokens/s at batch 8 and 64 (varied prompt lengths, so left padding and merges run),
   and the returned log-probs against a fresh unpadded forward pass in bf16 and in fp32.
   ``--big-engine`` adds tokens/s of a ~0.5B random Qwen2 (bench_train's shape).
2. trainer: the batch-64 generations become a DAPO batch (old_logprobs = the engine's); the
   per-token log-probs of the trainer's bf16 autocast path against fp32 on the same weights
   (also a what-if with the head in fp32), the bf16 vs fp32 gradient cosine, a few DAPO
   steps and one SFT step (finite losses), a DAPO step with ``neg_prob_cap`` 0.5 (its ``neg_capped_frac`` against
   the engine's log-probs), and save -> load -> step on cuda.
3. ``--deepspeed``: one DAPO step of ZeRO-2 and ZeRO-3 (one process, nccl) on that batch
   against the torch backend's first step from the same weights.

Measured on an H100 (torch 2.11, transformers 5.17, sharpen 20): engine 1050 / 3640 tokens/s at
batch 8 / 64 (tiny), 274 / 2103 (~0.5B); engine vs fp32 log-probs mean |diff| 0.0008 (max 0.31);
trainer bf16 vs fp32 mean 0.00075 (max 0.16, p99 0.012); gradient cosine 0.995; resume bit-exact;
ZeRO-2/3 first-step loss within 2e-4 of the torch backend. Before attention left cuDNN
(``sdpa_without_cudnn``) the engine gave 145 / 1130 and 100 / 718 tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import sys
import time
from pathlib import Path

import torch

from swerl.inference.base import GenerationRequest, SamplingConfig
from swerl.inference.hf_engine import HFEngine, HFEngineConfig, sdpa_without_cudnn
from swerl.models.tiny import TinyModelConfig, init_tiny
from swerl.train import DeepSpeedTrainerConfig, TrainBatch, TrainerConfig, make_trainer
from swerl.train.step import ActionLogprobModel, accumulate_gradients, plan_step

FAILED: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"CHECK {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILED.append(what)


def tiny_model(work: Path, sharpen: float) -> Path:
    """init_tiny (vocab 8192, hidden 256, 4 layers), final norm scaled by ``sharpen``, saved in place."""
    from transformers import AutoModelForCausalLM

    out = work / "tiny"
    if (out / "config.json").is_file():
        return out
    init_tiny(out, TinyModelConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=1024), overwrite=True)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
    model.save_pretrained(out)
    return out


def requests(n: int, vocab: int, new_tokens: int, min_prompt: int, max_prompt: int, seed: int) -> list[GenerationRequest]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(min_prompt, max_prompt + 1, (1,), generator=g))
        prompt = torch.randint(0, vocab, (length,), generator=g).tolist()
        out.append(GenerationRequest(f"r{seed}-{i}", prompt, max_new_tokens=new_tokens, seed=seed * 1000 + i))
    return out


def generate(engine: HFEngine, reqs: list[GenerationRequest]):
    async def all_of():
        return await asyncio.gather(*(engine.generate(r) for r in reqs))

    torch.cuda.synchronize()
    t = time.perf_counter()
    gens = asyncio.run(all_of())
    torch.cuda.synchronize()
    return gens, time.perf_counter() - t


def fresh_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    with torch.no_grad():
        ids = torch.tensor([prompt + completion], device=model.device)
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    pos = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(completion), device=model.device)
    return logp[pos, torch.tensor(completion, device=model.device)].cpu()


def engine_throughput(engine: HFEngine, vocab: int, args, label: str, prompt_range: tuple[int, int]):
    generate(engine, requests(8, vocab, 16, *prompt_range, seed=99))  # warm-up
    results = {}
    for n in (8, 64):
        before = dict(engine.stats)
        gens, sec = generate(engine, requests(n, vocab, args.new_tokens, *prompt_range, seed=n))
        tokens = sum(len(g.token_ids) for g in gens)
        passes = engine.stats["forward_passes"] - before["forward_passes"]
        print(f"{label} batch {n:3d}: {tokens} tokens in {sec:6.2f} s = {tokens / sec:8.0f} tokens/s "
              f"({passes} forward passes, max batch {engine.stats['max_batch']}, prompts {prompt_range[0]}-{prompt_range[1]}, "
              f"{args.new_tokens} new each; peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB)", flush=True)
        check(all(len(g.token_ids) == args.new_tokens for g in gens), f"{label} batch {n}: every request got its {args.new_tokens} tokens")
        check(all(math.isfinite(x) for g in gens for x in g.logprobs), f"{label} batch {n}: all log-probs finite")
        results[n] = gens
    return results


def engine_section(args, work: Path, model_dir: Path) -> tuple[list, list]:
    from transformers import AutoModelForCausalLM

    print(f"## 1. HF engine on cuda ({torch.cuda.get_device_name()}, dtype auto = bf16)", flush=True)
    engine = HFEngine(HFEngineConfig(model=model_dir, device="cuda"), SamplingConfig())
    check(engine.device.type == "cuda" and engine.model.dtype == torch.bfloat16,
          f"engine on {engine.device}, dtype {engine.model.dtype}")
    vocab = engine.model.config.vocab_size
    gens = engine_throughput(engine, vocab, args, "tiny (8192 vocab, 256 hidden, 4 layers)", (16, 256))
    reqs = requests(64, vocab, args.new_tokens, 16, 256, seed=64)
    fp32 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("cuda").eval()
    d16, d32, lps = [], [], []
    for r, g in zip(reqs, gens[64]):
        got = torch.tensor(g.logprobs)
        d16.append((got - fresh_logprobs(engine.model, r.prompt_ids, g.token_ids)).abs())
        d32.append((got - fresh_logprobs(fp32, r.prompt_ids, g.token_ids)).abs())
        lps.append(got)
    d16, d32, lps = torch.cat(d16), torch.cat(d32), torch.cat(lps)
    print(f"engine log-probs (batch 64, {lps.numel()} tokens, mean log-prob {lps.mean():.3f}, median {lps.median():.3f}):\n"
          f"  vs fresh unpadded bf16 forward: max |diff| {d16.max():.4f}, mean {d16.mean():.5f}, p99 {d16.quantile(0.99):.4f}\n"
          f"  vs fresh fp32 forward:          max |diff| {d32.max():.4f}, mean {d32.mean():.5f}, p99 {d32.quantile(0.99):.4f}", flush=True)
    check(float(d32.mean()) < 0.1 and bool(torch.isfinite(d32).all()), "engine bf16 log-probs within mean |diff| 0.1 of fp32")
    # weights reload on cuda (load_weights copies a checkpoint into the live bf16 model)
    engine.load_weights(model_dir, "reloaded")
    again, _ = generate(engine, reqs[:2])
    check(all(math.isfinite(x) for g in again for x in g.logprobs) and again[0].policy_version == "reloaded",
          "engine.load_weights on cuda, then generate")
    engine.close()
    del engine, fp32
    torch.cuda.empty_cache()
    return reqs, gens[64]


def big_engine_section(args, work: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_train import qwen_05b_config
    from transformers import Qwen2ForCausalLM

    out = work / "qwen-0.5b-bf16"
    if not (out / "config.json").is_file():
        with torch.device("cuda"):
            torch.manual_seed(0)
            Qwen2ForCausalLM(qwen_05b_config()).to(torch.bfloat16).save_pretrained(out)
    torch.cuda.reset_peak_memory_stats()
    engine = HFEngine(HFEngineConfig(model=out, device="cuda"), SamplingConfig())
    engine_throughput(engine, engine.model.config.vocab_size, args, "~0.5B random Qwen2", (128, 512))
    engine.close()
    del engine
    torch.cuda.empty_cache()


def make_batch(reqs, gens, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    ids, masks, olds = [], [], []
    for r, gen in zip(reqs, gens):
        p, c = len(r.prompt_ids), len(gen.token_ids)
        ids.append(torch.tensor(r.prompt_ids + gen.token_ids))
        masks.append(torch.arange(p + c) >= p)
        olds.append(torch.cat([torch.zeros(p), torch.tensor(gen.logprobs)]))
    return TrainBatch(ids, masks, olds, torch.randn(len(ids), generator=g))


def per_token_logprobs(model: ActionLogprobModel, batch: TrainBatch, cfg: TrainerConfig, autocast: torch.dtype | None,
                       fp32_head: bool = False) -> torch.Tensor:
    """The action tokens' log-probs as the trainer computes them (grad enabled, checkpointed chunks), flattened."""
    from swerl.rl.logprobs import action_logprobs_and_entropy

    out: dict[int, torch.Tensor] = {}
    for indices in plan_step(batch, cfg).microbatches:
        mb = batch.select(indices).padded("cuda")
        with sdpa_without_cudnn(torch.device("cuda")), torch.autocast("cuda", dtype=autocast or torch.float32,
                                                                      enabled=autocast is not None):
            if not fp32_head:
                lp, _ = model(mb["input_ids"], mb["attention_mask"], mb["action_mask"])
            else:
                policy = model.policy
                hidden = policy.get_decoder()(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).last_hidden_state
        if fp32_head:
            b, t = mb["input_ids"].shape
            rows, cols = mb["action_mask"].nonzero(as_tuple=True)
            targets = torch.cat([mb["input_ids"][:, 1:], mb["input_ids"][:, :1]], dim=1).reshape(-1)
            flat, _ = action_logprobs_and_entropy(hidden.float().reshape(b * t, -1), policy.get_output_embeddings().weight,
                                                  targets, rows * t + cols - 1, cfg.logprob_chunk_size)
            lp = torch.zeros(b, t, device="cuda").index_put((rows, cols), flat)
        for row, i in enumerate(indices):
            out[i] = lp[row][mb["action_mask"][row]].detach().float().cpu()
    return torch.cat([out[i] for i in range(len(batch))])  # batch order, as old_logprobs


def grads(trainer, batch: TrainBatch, autocast: torch.dtype | None) -> torch.Tensor:
    trainer.optimizer.zero_grad(set_to_none=True)
    accumulate_gradients(trainer.model, batch, plan_step(batch, trainer.config), trainer.config, torch.Tensor.backward,
                         trainer.device, autocast)
    flat = torch.cat([p.grad.reshape(-1) for p in trainer.policy.parameters() if p.grad is not None]).double()
    trainer.optimizer.zero_grad(set_to_none=True)
    return flat


def stats(d: torch.Tensor) -> str:
    return f"max |diff| {d.max():.4f}, mean {d.mean():.5f}, p99 {d.quantile(0.99):.4f}"


def trainer_section(args, work: Path, model_dir: Path, batch: TrainBatch) -> None:
    print(f"\n## 2. TorchTrainer on cuda: bf16 autocast (dtype auto), fp32 master weights; batch {len(batch)} sequences, "
          f"{sum(batch.lengths)} tokens, {batch.action_tokens} action tokens", flush=True)
    cfg = TrainerConfig(optimizer={"lr": args.lr}, device="cuda", max_tokens_per_microbatch=4096, logprob_chunk_size=512)
    trainer = make_trainer(model_dir, cfg)
    check(trainer.autocast_dtype == torch.bfloat16 and next(trainer.policy.parameters()).dtype == torch.float32,
          f"trainer autocast {trainer.autocast_dtype}, master weights {next(trainer.policy.parameters()).dtype}")
    n_mb = len(plan_step(batch, cfg).microbatches)
    lp16 = per_token_logprobs(trainer.model, batch, cfg, torch.bfloat16)
    lp32 = per_token_logprobs(trainer.model, batch, cfg, None)
    lp16h = per_token_logprobs(trainer.model, batch, cfg, torch.bfloat16, fp32_head=True)
    old = torch.cat([o[m] for o, m in zip(batch.old_logprobs, batch.action_mask)])
    print(f"per-token log-probs of {lp32.numel()} action tokens ({n_mb} micro-batches; fp32 mean {lp32.mean():.3f}, "
          f"median {lp32.median():.3f}):\n"
          f"  trainer bf16 autocast vs fp32 (same weights, cuda): {stats((lp16 - lp32).abs())}\n"
          f"  what-if bf16 decoder + fp32 head vs fp32:          {stats((lp16h - lp32).abs())}\n"
          f"  engine (bf16 weights) vs trainer fp32:             {stats((old - lp32).abs())}\n"
          f"  engine vs trainer bf16 (the step's ratio at step 0): {stats((old - lp16).abs())}; "
          f"ratio exp(diff) in [{(lp16 - old).exp().min():.3f}, {(lp16 - old).exp().max():.3f}], "
          f"outside [0.8, 1.3]: {((lp16 - old).exp() < 0.8).float().mean() * 100 + ((lp16 - old).exp() > 1.3).float().mean() * 100:.2f}%",
          flush=True)
    check(bool(torch.isfinite(lp16).all()), "bf16 log-probs finite")
    check(float((lp16 - lp32).abs().mean()) < 0.1, "trainer bf16 log-probs within mean |diff| 0.1 of fp32")
    g16, g32 = grads(trainer, batch, torch.bfloat16), grads(trainer, batch, None)
    cos = float(g16 @ g32 / (g16.norm() * g32.norm()))
    print(f"gradient bf16 vs fp32: cosine {cos:.5f}, norms {g16.norm():.4g} vs {g32.norm():.4g}, "
          f"relative L2 diff {(g16 - g32).norm() / g32.norm():.4f}", flush=True)
    check(cos > 0.99, "bf16 gradient cosine to fp32 > 0.99")

    torch.cuda.reset_peak_memory_stats()
    losses = []
    for i in range(args.steps):
        m = trainer.train_step(batch)
        torch.cuda.synchronize()
        losses.append(m["loss"])
        print(f"  step {int(m['step'])}: loss {m['loss']:+.6f} grad_norm {m['grad_norm']:.4f} ratio_mean {m['ratio_mean']:.4f} "
              f"clip low/high {m['clip_frac_low']:.4f}/{m['clip_frac_high']:.4f} approx_kl {m['approx_kl']:.2e} "
              f"entropy {m['entropy']:.3f} {m['step_seconds']:.3f} s {m['tokens_per_s']:.0f} tokens/s", flush=True)
        check(all(math.isfinite(v) for v in m.values()), f"DAPO step {i + 1}: all metrics finite")
    print(f"  peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    ckpt = trainer.save(work / "ckpt-torch", iteration=1, data_position={"offset": 3})
    check((ckpt / "model.safetensors").is_file() and (ckpt / "tokenizer.json").is_file(), "checkpoint written from cuda")
    from safetensors import safe_open

    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    check(dtypes == {"F32"}, f"checkpoint weights fp32 (got {dtypes})")
    after = trainer.train_step(batch)
    resumed = make_trainer(model_dir, cfg)
    state = resumed.load(ckpt)
    check(state.step == args.steps and state.data_position == {"offset": 3}, f"resume state {state}")
    again = resumed.train_step(batch)
    wdiff = max((a - b).abs().max().item() for a, b in zip(trainer.policy.parameters(), resumed.policy.parameters()))
    print(f"resume on cuda: step {args.steps + 1} loss {after['loss']:+.8f} (original) vs {again['loss']:+.8f} (resumed), "
          f"grad_norm {after['grad_norm']:.6f} vs {again['grad_norm']:.6f}, max weight diff after the step {wdiff:.3e}", flush=True)
    check(abs(after["loss"] - again["loss"]) < 1e-5 and abs(after["grad_norm"] - again["grad_norm"]) < 1e-3 * after["grad_norm"],
          "resumed step matches the original on cuda (loss, grad norm)")
    resumed.close()
    trainer.close()

    sft = make_trainer(model_dir, cfg.model_copy(update={"objective": "sft"}))
    m = sft.train_step(batch)
    print(f"SFT step on cuda: loss {m['loss']:.4f} (mean -log-prob), grad_norm {m['grad_norm']:.4f}", flush=True)
    check(math.isfinite(m["loss"]) and abs(m["loss"] + float(lp32.mean())) < 0.05, "SFT loss finite and = -mean fp32 log-prob")
    sft.close()
    # dapo.loss.neg_prob_cap: the batch's advantages are random normals, so about half its action tokens are
    # negative ones; those the engine drew with p > cap get no gradient but stay in the normaliser
    capped = make_trainer(model_dir, cfg.model_copy(update={"loss": cfg.loss.model_copy(update={"neg_prob_cap": 0.5})}))
    m = capped.train_step(batch)
    negative = batch.advantages.repeat_interleave(torch.stack([mk.sum() for mk in batch.action_mask])) < 0  # old's layout
    expected = float((negative & (old > math.log(0.5))).float().mean())
    print(f"DAPO step with neg_prob_cap 0.5 on cuda: loss {m['loss']:+.6f}, neg_capped_frac {m['neg_capped_frac']:.4f} "
          f"(engine log-probs say {expected:.4f})", flush=True)
    check(math.isfinite(m["loss"]) and abs(m["neg_capped_frac"] - expected) < 1e-5,
          "capped DAPO step finite; neg_capped_frac = the share of action tokens negative and drawn with p > 0.5")
    capped.close()
    f32 = make_trainer(model_dir, cfg.model_copy(update={"dtype": "float32"}))
    m = f32.train_step(batch)
    check(f32.autocast_dtype is None and math.isfinite(m["loss"]), f"fp32 trainer on cuda: loss {m['loss']:+.6f}")
    f32.close()

    engine = HFEngine(HFEngineConfig(model=ckpt, device="cuda"), SamplingConfig())
    gens, _ = generate(engine, [GenerationRequest("c", batch.input_ids[0][:32].tolist(), 8, seed=1)])
    check(len(gens[0].token_ids) == 8, "the cuda trainer's checkpoint serves in the cuda engine")
    engine.close()


def deepspeed_section(args, work: Path, model_dir: Path, batch: TrainBatch) -> None:
    import deepspeed

    print(f"\n## 3. DeepSpeed {deepspeed.__version__} (1 process, nccl) vs torch backend: first DAPO step on cuda", flush=True)
    base = TrainerConfig(optimizer={"lr": args.lr}, device="cuda", max_tokens_per_microbatch=4096, logprob_chunk_size=512)
    ref = make_trainer(model_dir, base)
    m_ref = ref.train_step(batch)
    w_ref = {k: v.detach().float().cpu() for k, v in ref.policy.state_dict().items()}
    ref.close()
    for stage in (2, 3):
        t = time.perf_counter()
        ds = make_trainer(model_dir, base.model_copy(update={"trainer": DeepSpeedTrainerConfig(zero_stage=stage)}))
        init = time.perf_counter() - t
        m = ds.train_step(batch)
        out = ds.save(work / f"ckpt-ds{stage}")
        ds.close()
        from swerl.inference.weights import checkpoint_tensors

        wd = max((w_ref[k] - v.float()).abs().max().item() for k, v in checkpoint_tensors(out) if k in w_ref)
        print(f"ZeRO-{stage}: loss {m['loss']:+.6f} vs torch {m_ref['loss']:+.6f}, grad_norm {m['grad_norm']:.5f} vs "
              f"{m_ref['grad_norm']:.5f}, step {m['step_seconds']:.3f} s, init {init:.1f} s, max weight diff after the step "
              f"{wd:.3e} (checkpoint in the compute dtype)", flush=True)
        check(abs(m["loss"] - m_ref["loss"]) < 1e-3 and abs(m["grad_norm"] - m_ref["grad_norm"]) < 0.02 * m_ref["grad_norm"],
              f"ZeRO-{stage} first step matches the torch backend")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/swerl-gpu-check"))
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--sharpen", type=float, default=20.0, help="scale of the final norm (peaked distributions)")
    ap.add_argument("--big-engine", action="store_true")
    ap.add_argument("--deepspeed", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a GPU: torch.cuda.is_available() is False")
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    model_dir = tiny_model(args.work, args.sharpen)
    batch_file = args.work / "batch.pt"
    if args.deepspeed:
        deepspeed_section(args, args.work, model_dir, TrainBatch.load(batch_file))
    else:
        reqs, gens = engine_section(args, args.work, model_dir)
        batch = make_batch(reqs, gens)
        batch.save(batch_file)
        if args.big_engine:
            big_engine_section(args, args.work)
        trainer_section(args, args.work, model_dir, batch)
        shutil.rmtree(args.work / "ckpt-torch", ignore_errors=True)
    print(f"\n{len(FAILED)} checks failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
