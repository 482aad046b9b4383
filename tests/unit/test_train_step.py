"""The shared optimiser step: exact gradient accumulation, observation tokens out of the loss,
the micro-batch plan across processes, the lr schedule, and the batch and config contracts."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from swerl.rl.loss import dapo_loss
from swerl.train.base import TrainBatch, TrainerConfig
from swerl.train.checkpoint import begin, latest_checkpoint, publish, step_checkpoints, step_dir
from swerl.train.step import (ActionLogprobModel, accumulate_gradients, checkpoint_decoder_layers, clip_grad_norm,
                              compile_decoder_layers, learning_rate, plan_step, sft_loss)

V = 128


def policy() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).train()


def batch(seed: int = 0, n: int = 5) -> TrainBatch:
    """Prompt (mask 0), then action / observation / action turns; the last sequence ends on an observation."""
    g = torch.Generator().manual_seed(seed)
    ids, masks, olds = [], [], []
    for i in range(n):
        length = 9 + 3 * i
        mask = torch.zeros(length, dtype=torch.bool)
        mask[3:6] = True  # first reply
        mask[8:length - 2] = True  # second reply, after an observation at 6-7
        ids.append(torch.randint(0, V, (length,), generator=g))
        masks.append(mask)
        olds.append(torch.where(mask, -math.log(V) + 0.2 * torch.randn(length, generator=g), torch.zeros(length)))
    return TrainBatch(ids, masks, olds, torch.randn(n, generator=g))


def gradients(cfg: TrainerConfig, b: TrainBatch, model: Qwen2ForCausalLM | None = None) -> dict[str, torch.Tensor]:
    model = model or policy()
    accumulate_gradients(ActionLogprobModel(model, chunk_size=7), b, plan_step(b, cfg), cfg, torch.Tensor.backward,
                         torch.device("cpu"))
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("objective", ["dapo", "sft"])
@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_one_microbatch_and_many_give_the_same_gradients(objective, aggregation):
    b = batch()
    one = TrainerConfig(objective=objective, loss={"loss_aggregation": aggregation}, max_tokens_per_microbatch=10_000)
    many = one.model_copy(update={"max_tokens_per_microbatch": 30})
    assert plan_step(b, many).microbatches == [[2, 1], [4], [3], [0]]  # padded tokens 30 (15 + 12), 21, 18, 9
    assert max_diff(gradients(one, b), gradients(many, b)) < 1e-6  # measured: <= 1.1e-7 on gradients up to 0.23 (float32 summation order)


def test_gradient_checkpointing_changes_memory_not_gradients():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    recomputed = policy()
    recomputed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert max_diff(gradients(cfg, b), gradients(cfg, b, recomputed)) < 1e-6


class AttentionKernelCount(TorchDispatchMode):
    """Counts the attention kernels that run (forward ones, not their backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.__name__.startswith("_scaled_dot_product") and "backward" not in func.__name__
        return func(*args, **(kwargs or {}))


def attention_recomputed_in_backward(model: Qwen2ForCausalLM, b: TrainBatch) -> int:
    p = b.padded()
    lp, _ = ActionLogprobModel(model, chunk_size=7)(p["input_ids"], p["attention_mask"], p["action_mask"])
    loss, _ = dapo_loss(lp, p["old_logprobs"], p["advantages"], p["action_mask"], 0.2, 0.3)
    with AttentionKernelCount() as counter:
        loss.backward()
    return counter.count


def test_checkpointing_that_keeps_attention_recomputes_no_attention_and_gives_the_same_gradients():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    selective = policy()
    assert checkpoint_decoder_layers(selective) == 2
    assert max_diff(gradients(cfg, b), gradients(cfg, b, selective)) < 1e-6
    full = policy()
    full.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert attention_recomputed_in_backward(full, batch(n=1)) == 2  # one per layer
    assert attention_recomputed_in_backward(policy(), batch(n=1)) == 0
    kept = policy()
    checkpoint_decoder_layers(kept)
    assert attention_recomputed_in_backward(kept, batch(n=1)) == 0


def test_checkpointing_that_keeps_attention_inside_compiled_layers_gives_the_eager_gradients():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    model = policy()
    checkpoint_decoder_layers(model)
    compile_decoder_layers(model)
    assert max_diff(gradients(cfg, b), gradients(cfg, b, model)) < 1e-5


def test_keeping_attention_is_an_option_of_gradient_checkpointing():
    with pytest.raises(ValidationError, match="checkpoint_keep_attention chooses what gradient checkpointing keeps; "
                                              "turn gradient_checkpointing on"):
        TrainerConfig(checkpoint_keep_attention=True)
    assert TrainerConfig(gradient_checkpointing=True, checkpoint_keep_attention=True).checkpoint_keep_attention
    with pytest.raises(ValueError, match="Linear has no decoder.layers to checkpoint; turn gradient checkpointing off"):
        checkpoint_decoder_layers(torch.nn.Linear(2, 2))


def test_compiled_decoder_layers_give_the_eager_gradients_over_varying_lengths():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)  # four micro-batches of three padded lengths: one recompile, no more
    compiled = policy()
    assert compile_decoder_layers(compiled) == 2
    assert max_diff(gradients(cfg, b), gradients(cfg, b, compiled)) < 1e-5  # measured: 2.2e-8 (inductor's fused float32 order)


def test_compiling_a_model_without_decoder_layers_is_refused_by_name():
    with pytest.raises(ValueError, match="Linear has no decoder.layers to compile; turn compile_layers off"):
        compile_decoder_layers(torch.nn.Linear(2, 2))


def test_accumulated_gradient_equals_the_full_logits_reference():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    got = gradients(cfg, b)
    model = policy()  # the slow way: one padded batch, [B, T, V] logits, the paper's loss over the whole batch
    p = b.padded()
    logits = model(input_ids=p["input_ids"], attention_mask=p["attention_mask"]).logits.float()
    logp = torch.zeros_like(p["old_logprobs"])
    logp[:, 1:] = torch.log_softmax(logits, -1)[:, :-1].gather(-1, p["input_ids"][:, 1:, None]).squeeze(-1)
    loss, _ = dapo_loss(logp, p["old_logprobs"], p["advantages"], p["action_mask"], 0.2, 0.3)
    loss.backward()
    assert max_diff(got, {n: q.grad for n, q in model.named_parameters()}) < 1e-5


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_grpos_kl_penalty_reaches_the_step_over_microbatches_as_over_one_batch(aggregation):
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30, loss={"kl_coef": 0.04, "loss_aggregation": aggregation})
    model = policy()
    sums = accumulate_gradients(ActionLogprobModel(model, chunk_size=7), b, plan_step(b, cfg), cfg, torch.Tensor.backward,
                                torch.device("cpu"))
    got = {n: q.grad.clone() for n, q in model.named_parameters()}
    reference = policy()
    p = b.padded()
    logits = reference(input_ids=p["input_ids"], attention_mask=p["attention_mask"]).logits.float()
    logp = torch.zeros_like(p["old_logprobs"])
    logp[:, 1:] = torch.log_softmax(logits, -1)[:, :-1].gather(-1, p["input_ids"][:, 1:, None]).squeeze(-1)
    loss, metrics = dapo_loss(logp, p["old_logprobs"], p["advantages"], p["action_mask"], 0.2, 0.3, aggregation=aggregation,
                              kl_coef=0.04)
    loss.backward()
    assert max_diff(got, {n: q.grad for n, q in reference.named_parameters()}) < 1e-5
    # old log-probs here are ~log(1/V) + noise, so the penalty is far from 0 and the test would see it missing
    assert sums["ref_kl_sum"] / sums["action_tokens"] == pytest.approx(metrics["ref_kl"].item(), rel=1e-5)
    assert metrics["ref_kl"].item() > 0.01


def test_values_at_observation_positions_change_nothing():
    b = batch()
    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    tampered = TrainBatch(b.input_ids, b.action_mask,
                          [torch.where(m, old, torch.full_like(old, float("nan"))) for m, old in zip(b.action_mask, b.old_logprobs)],
                          b.advantages)
    reference = gradients(cfg, b)
    assert all(torch.equal(reference[k], v) for k, v in gradients(cfg, tampered).items())


def test_trailing_observation_tokens_get_exactly_zero_gradient_through_the_whole_model():
    b = batch(n=2)
    model = policy()
    hidden: list[torch.Tensor] = []

    def keep(module, args, out):
        out.last_hidden_state.retain_grad()
        hidden.append(out.last_hidden_state)

    model.model.register_forward_hook(keep)
    gradients(TrainerConfig(), b, model)
    (h,) = hidden  # one micro-batch [2, T, H], longest sequence first
    assert plan_step(b, TrainerConfig()).microbatches == [[1, 0]]
    for row, mask in enumerate([b.action_mask[1], b.action_mask[0]]):
        last_action = int(mask.nonzero().max())  # the hidden state at t predicts token t + 1
        assert h.grad[row, :last_action].abs().sum() > 0
        assert torch.equal(h.grad[row, last_action:], torch.zeros_like(h.grad[row, last_action:]))  # observations, padding


def test_a_microbatch_without_action_tokens_contributes_exactly_zero():
    b = batch()
    silent = TrainBatch(b.input_ids, [torch.zeros_like(m) for m in b.action_mask], b.old_logprobs, b.advantages)
    grads = gradients(TrainerConfig(max_tokens_per_microbatch=30), silent)  # backward still runs through the model
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads.values())


def test_clip_scales_gradients_to_the_max_norm_only_when_above_it():
    big, small = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    big.grad, small.grad = torch.tensor([3.0, 4.0]), torch.tensor([0.3, 0.4])
    assert clip_grad_norm([big], 1.0) == pytest.approx(5.0)
    assert torch.allclose(big.grad, torch.tensor([0.6, 0.8]))  # x 1 / (5 + 1e-6)
    assert clip_grad_norm([small], 1.0) == pytest.approx(0.5) and torch.equal(small.grad, torch.tensor([0.3, 0.4]))
    assert clip_grad_norm([big], 0.0) == pytest.approx(1.0)  # 0 disables clipping; the norm is still reported


def test_sft_loss_is_minus_the_mean_action_logprob_over_the_step():
    logprobs = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -3.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]])
    assert sft_loss(logprobs, mask).item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3 tokens
    assert sft_loss(logprobs, mask, norm_tokens=6).item() == pytest.approx(1.0)  # a micro-batch of a 6-token step
    assert sft_loss(logprobs, mask, "sequence").item() == pytest.approx(2.25)  # (1.5 + 3) / 2 sequences


def test_plan_deals_microbatches_evenly_and_pads_with_dummies():
    lengths = [10, 8, 8, 5, 3]
    b = TrainBatch([torch.arange(n) for n in lengths], [torch.arange(n) >= 2 for n in lengths])
    cfg = TrainerConfig(max_tokens_per_microbatch=16)
    # packed: [0] (10 tokens), [1, 2] (16), [3, 4] (10); largest first to the least-loaded process
    assert plan_step(b, cfg, rank=0, world_size=2).microbatches == [[1, 2], []]  # [] is a dummy: same pass count
    assert plan_step(b, cfg, rank=1, world_size=2).microbatches == [[0], [3, 4]]
    plan = plan_step(b, cfg, rank=1, world_size=2)
    assert (plan.norm_tokens, plan.norm_sequences, plan.world_size) == (24, 5, 2)  # the whole step's counts


def test_learning_rate_warms_up_then_follows_the_schedule():
    warm = TrainerConfig(optimizer={"lr": 1e-6, "warmup_steps": 2})
    assert [learning_rate(s, warm) for s in range(4)] == pytest.approx([1e-6 / 3, 2e-6 / 3, 1e-6, 1e-6])
    cosine = TrainerConfig(optimizer={"lr": 1e-6, "warmup_steps": 2, "lr_schedule": "cosine"}, total_steps=12)
    assert [learning_rate(s, cosine) for s in (2, 7, 12, 20)] == pytest.approx([1e-6, 5e-7, 0.0, 0.0], abs=1e-15)
    linear = TrainerConfig(optimizer={"lr": 1e-6, "lr_schedule": "linear"}, total_steps=4)
    assert [learning_rate(s, linear) for s in range(5)] == pytest.approx([1e-6, 7.5e-7, 5e-7, 2.5e-7, 0.0])


def test_config_defaults_are_the_papers_and_bad_settings_are_refused():
    cfg = TrainerConfig()
    opt, loss = cfg.optimizer, cfg.loss
    assert (opt.lr, opt.betas, opt.weight_decay, opt.grad_clip, loss.eps_low, loss.eps_high) == (1e-6, (0.9, 0.999), 0.1, 1.0, 0.2, 0.3)
    with pytest.raises(ValidationError, match="set total_steps"):
        TrainerConfig(optimizer={"lr_schedule": "cosine"})
    with pytest.raises(ValidationError, match=r"betas must each be in \[0, 1\)"):
        TrainerConfig(optimizer={"betas": (0.9, 1.0)})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TrainerConfig(learning_rate=1e-5)


def test_batch_from_padded_strips_padding_and_checks_its_rows():
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0]])
    b = TrainBatch.from_padded(ids, torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]]), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]),
                               old_logprobs=torch.zeros(2, 4), advantages=[1.0, -1.0])
    assert b.lengths == [3, 2] and b.action_tokens == 3
    assert torch.equal(b.padded()["input_ids"], ids[:, :3])  # padded to the longest row
    with pytest.raises(ValueError, match="action_mask has 1 rows, input_ids has 2"):
        TrainBatch([[1, 2], [1, 2]], [[0, 1]])
    with pytest.raises(ValueError, match=r"sequence 0 has 2 tokens and action_mask\[0\]=True"):
        TrainBatch([[1, 2]], [[1, 1]])


def test_batch_file_round_trip(tmp_path):
    b = batch()
    again = TrainBatch.load(b.save(tmp_path / "b.pt"))
    assert all(torch.equal(x, y) for x, y in zip(b.input_ids + b.old_logprobs, again.input_ids + again.old_logprobs))
    assert torch.equal(b.advantages, again.advantages) and again.pad_token_id == b.pad_token_id


def test_latest_checkpoint_is_the_highest_published_step(tmp_path):
    for name in ("step-000010", "step-000002", "step-1000000", ".step-000011.partial", "step-notanumber"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-000012").write_text("a file, not a checkpoint")
    # by step number, not by name; a crash mid-save leaves only a hidden .partial
    assert step_checkpoints(tmp_path) == [step_dir(tmp_path, 2), step_dir(tmp_path, 10), step_dir(tmp_path, 1_000_000)]
    assert latest_checkpoint(tmp_path) == step_dir(tmp_path, 1_000_000)
    assert latest_checkpoint(tmp_path / "missing") is None


def test_publishing_a_checkpoint_replaces_the_old_one_and_clears_a_crashed_attempt(tmp_path):
    out = tmp_path / "step-000001"
    (begin(out) / "junk").write_text("left by a killed save")
    staging = begin(out)  # the crashed attempt's folder is emptied
    assert staging == tmp_path / ".step-000001.partial" and not (staging / "junk").exists()
    (staging / "config.json").write_text("first")
    publish(staging, out)
    staging = begin(out)
    (staging / "config.json").write_text("second")
    publish(staging, out)
    assert (out / "config.json").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]  # no partial, no old copy left behind


def test_attention_with_repeated_key_value_heads_gives_the_sdpa_gradients():
    """cudnn_attention's attention function (cuDNN's kernel has no grouped-query form) against transformers' sdpa,
    padded micro-batches (a mask) and single sequences (causal, no mask) alike."""
    from swerl.train.attention import REPEATED_KV_SDPA, attention_implementation

    cfg = TrainerConfig(max_tokens_per_microbatch=30)
    for b in (batch(), batch(seed=1, n=1)):
        repeated = policy()
        repeated.set_attn_implementation(attention_implementation(True))
        assert repeated.config._attn_implementation == REPEATED_KV_SDPA
        assert max_diff(gradients(cfg, b), gradients(cfg, b, repeated)) < 1e-6
