"""Attention on CUDA runs without cuDNN's SDPA backend, in the engine's forward passes and the trainer's
forward and backward passes.

Why: torch 2.11 tries cuDNN attention first on Hopper, and cuDNN builds an execution plan for every
new shape. Measured on an H100 (bench/gpu_check.py): HF engine decoding went from 145 to 980
tokens/s (tiny model, batch 8) without it, and a DAPO step over varied-length micro-batches of a
0.5B model from 6.3k to 20.4k tokens/s. The wiring is checked here on CPU with a recording stand-in.
"""

from __future__ import annotations

import asyncio
import contextlib

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import swerl.inference.hf_engine as hf_engine
import swerl.train.step as step
from swerl.inference.base import GenerationRequest
from swerl.train.attention import cudnn_first
from swerl.train.base import TrainBatch, TrainerConfig


class Recorder:
    """A stand-in for ``sdpa_without_cudnn``: counts entries and says whether a call is inside one."""

    def __init__(self) -> None:
        self.entered = 0
        self.depth = 0

    @contextlib.contextmanager
    def __call__(self, device):
        self.entered += 1
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


def test_cudnn_is_excluded_on_cuda_and_restored_after():
    before = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
              torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    with hf_engine.sdpa_without_cudnn(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    after = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
             torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    assert after == before
    with hf_engine.sdpa_without_cudnn(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before[0]


def test_the_trainer_runs_forward_and_backward_inside_it(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(step, "sdpa_without_cudnn", recorder)
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)).train()
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    backward_inside: list[bool] = []
    policy.model.layers[0].self_attn.q_proj.weight.register_hook(lambda g: backward_inside.append(recorder.depth > 0))
    lengths = [12, 9, 7]
    batch = TrainBatch([torch.randint(0, 64, (n,)) for n in lengths], [torch.arange(n) >= 3 for n in lengths],
                       [torch.full((n,), -4.0) for n in lengths], torch.tensor([1.0, -0.5, 0.3]))
    cfg = TrainerConfig(max_tokens_per_microbatch=12)
    plan = step.plan_step(batch, cfg)
    step.accumulate_gradients(step.ActionLogprobModel(policy, 4), batch, plan, cfg, torch.Tensor.backward,
                              torch.device("cpu"))
    assert recorder.entered == len(plan.microbatches) == 3
    assert backward_inside == [True] * 3  # the checkpointed layer's recomputation and gradient, inside too


def test_cudnn_attention_puts_cudnn_first_on_cuda_and_restores_the_order_after():
    from torch.nn.attention import SDPBackend

    before = torch._C._get_sdp_priority_order()
    with cudnn_first(torch.device("cuda")):
        assert torch._C._get_sdp_priority_order()[:4] == [int(b) for b in (
            SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)]
        assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert torch._C._get_sdp_priority_order() == before
    with cudnn_first(torch.device("cpu")):
        assert torch._C._get_sdp_priority_order() == before


def test_a_trainer_with_cudnn_attention_runs_forward_and_backward_inside_cudnn_first(monkeypatch):
    without, first = Recorder(), Recorder()
    monkeypatch.setattr(step, "sdpa_without_cudnn", without)
    monkeypatch.setattr(step, "cudnn_first", first)
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)).train()
    backward_inside: list[bool] = []
    policy.model.layers[0].self_attn.q_proj.weight.register_hook(lambda g: backward_inside.append(first.depth > 0))
    batch = TrainBatch([torch.randint(0, 64, (12,))], [torch.arange(12) >= 3], [torch.full((12,), -4.0)], torch.tensor([1.0]))
    cfg = TrainerConfig(max_tokens_per_microbatch=12, cudnn_attention=True)
    step.accumulate_gradients(step.ActionLogprobModel(policy, 4), batch, step.plan_step(batch, cfg), cfg,
                              torch.Tensor.backward, torch.device("cpu"))
    assert (first.entered, without.entered, backward_inside) == (1, 0, [True])


def test_the_engine_runs_its_forward_passes_inside_it(tiny_model_dir, monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(hf_engine, "sdpa_without_cudnn", recorder)
    engine = hf_engine.HFEngine(hf_engine.HFEngineConfig(model=tiny_model_dir))
    inside: list[bool] = []
    forward = engine.model.forward
    engine.model.forward = lambda *a, **k: (inside.append(recorder.depth > 0), forward(*a, **k))[1]
    try:
        async def both():
            return await asyncio.gather(*(engine.generate(GenerationRequest(f"r{i}", list(range(10, 20 + i)), 5, seed=i))
                                          for i in range(2)))

        gens = asyncio.run(both())
    finally:
        engine.close()
    assert [len(g.token_ids) for g in gens] == [5, 5]
    assert len(inside) >= 5 and all(inside)  # prefill(s) and every decode step
