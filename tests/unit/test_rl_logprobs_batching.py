"""Chunked action log-probs against the naive full-vocabulary computation, and micro-batch packing."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from swerl.rl.batching import action_token_count, pack_microbatches
from swerl.rl.logprobs import action_logprobs, action_logprobs_and_entropy, sequence_action_logprobs

T, H, V = 10, 8, 16
POSITIONS = torch.tensor([1, 2, 3, 6, 7, 8, 9])


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, H, generator=g, dtype=torch.float64)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64)
    targets = torch.randint(0, V, (T,), generator=g)
    return hidden, weight, targets


def naive(hidden, weight, targets, positions, temperature=1.0):
    logp = torch.log_softmax(hidden @ weight.T / temperature, dim=-1)  # [T, V]: what the chunked version avoids
    entropy = -(logp.exp() * logp).sum(-1)
    return logp[positions, targets[positions]], entropy[positions]


@pytest.mark.parametrize("chunk_size", [3, T, 64])  # smaller than, equal to, larger than T
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_values_and_gradients_equal_the_naive_ones(chunk_size, temperature):
    hidden, weight, targets = inputs()
    h1, w1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = action_logprobs_and_entropy(h1, w1, targets, POSITIONS, chunk_size, temperature)
    h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_lp, ref_ent = naive(h2, w2, targets, POSITIONS, temperature)
    assert torch.allclose(lp, ref_lp.float(), atol=1e-5) and torch.allclose(ent, ref_ent.float(), atol=1e-5)
    assert not ent.requires_grad  # the entropy is a reported metric, never trained on
    upstream = torch.linspace(-1, 1, len(POSITIONS))  # an arbitrary loss over the log-probs
    (lp * upstream).sum().backward()
    (ref_lp * upstream.double()).sum().backward()
    assert torch.allclose(h1.grad, h2.grad, atol=1e-5) and torch.allclose(w1.grad, w2.grad, atol=1e-5)
    assert h1.grad[[0, 4, 5]].eq(0).all()  # positions not asked for get no gradient


def test_forward_keeps_no_vocabulary_sized_tensor_for_backward():
    hidden, weight, targets = inputs()
    saved: list[tuple[int, ...]] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        action_logprobs_and_entropy(hidden.requires_grad_(), weight.requires_grad_(), targets, POSITIONS, chunk_size=3)
    # the weight [V, H] itself is a parameter; no [chunk, V] logits (nor [T, V]) outlive their chunk
    assert all(shape[-1] != V for shape in saved), saved


def test_no_positions_give_an_empty_result():
    hidden, weight, targets = inputs()
    assert action_logprobs(hidden, weight, targets, torch.tensor([], dtype=torch.long)).shape == (0,)


def tiny_qwen(tie: bool) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, tie_word_embeddings=tie)
    return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("tie", [True, False])
def test_sequence_action_logprobs_match_the_full_model_logits(tie):
    model = tiny_qwen(tie)
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tie
    input_ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    action_mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0, 1, 1, 0]])
    lp, ent = sequence_action_logprobs(model, input_ids, action_mask, chunk_size=4)

    logp = torch.log_softmax(model(input_ids).logits.float(), dim=-1)  # [B, T, V]
    expected = torch.zeros(2, 9)
    expected[:, 1:] = logp[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # position t-1 predicts token t
    expected_ent = torch.zeros(2, 9)
    expected_ent[:, 1:] = -(logp.exp() * logp).sum(-1)[:, :-1]
    expected, expected_ent = expected * action_mask, expected_ent * action_mask
    assert torch.allclose(lp, expected, atol=1e-5) and torch.allclose(ent, expected_ent, atol=1e-5)

    # gradients reach the model's weights as through the full logits
    lp.sum().backward()
    chunked = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    (torch.log_softmax(model(input_ids).logits.float(), dim=-1)[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1)
     * action_mask[:, 1:]).sum().backward()
    for name, p in model.named_parameters():
        assert torch.allclose(chunked[name], p.grad, atol=1e-5), name


def test_sequence_action_logprobs_refuse_an_action_token_at_position_zero():
    model = tiny_qwen(False)
    with pytest.raises(ValueError, match="position 0 has no preceding context"):
        sequence_action_logprobs(model, torch.zeros(1, 3, dtype=torch.long), torch.tensor([[1, 1, 0]]))


# --- micro-batches ---------------------------------------------------------------------------


def test_pack_by_padded_token_budget_longest_first():
    # 8 alone (2 x 8 > 10), then 5 with 3 (2 x 5 = 10), then 2 (3 x 5 > 10)
    assert pack_microbatches([3, 8, 5, 2], max_tokens_per_microbatch=10) == [[1], [2, 0], [3]]
    # equal lengths pack by count: 4 x 4 = 16 fits, a fifth does not
    assert pack_microbatches([4] * 6, max_tokens_per_microbatch=16) == [[0, 1, 2, 3], [4, 5]]
    assert pack_microbatches([], max_tokens_per_microbatch=16) == []


def test_pack_refuses_a_sequence_longer_than_the_budget():
    with pytest.raises(ValueError, match=r"\(index, length\): \[\(1, 20\)\]; raise the budget"):
        pack_microbatches([5, 20], max_tokens_per_microbatch=16)


def test_global_action_token_count():
    assert action_token_count([[0, 1, 1, 0], [1, 1, 1], []]) == 5
