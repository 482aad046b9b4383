"""Log-probabilities of the action tokens without materialising [T, V] logits.

A 131k-token trajectory with a 152k vocabulary would need 80 GB of fp32 logits. Here the
head is applied only at the requested positions, ``chunk_size`` positions at a time, and
each chunk runs under activation checkpointing: the forward pass keeps only the chunk's
[chunk, H] hidden states, and the backward pass recomputes that chunk's logits. Peak extra
memory is therefore ``chunk_size x V`` fp32 values (times a small constant for softmax and
its gradient), whatever the sequence length.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
           temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of ``targets`` (with grad) and entropy (a detached metric), from [c, H] hidden states."""
    logits = (hidden @ weight.T).float() / temperature  # [c, V]
    logz = torch.logsumexp(logits, dim=-1)  # [c]
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    # no graph for the entropy: it is only reported, and a graph here would keep two [c, V]
    # fp32 tensors per chunk alive until the step ends (a vocab x length memory term)
    with torch.no_grad():
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logprobs, entropy


def action_logprobs_and_entropy(
    hidden_states: torch.Tensor,  # [T, H] final hidden states (after the last norm)
    lm_head_weight: torch.Tensor,  # [V, H]
    target_ids: torch.Tensor,  # [T] the token hidden_states[t] predicts
    positions: torch.Tensor,  # [n] indices into T
    chunk_size: int = 1024,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(target_ids[p] | hidden_states[p]), entropy at p)`` for p in ``positions``: two [n] fp32 tensors."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    positions = positions.to(hidden_states.device, torch.long)
    out_lp, out_ent = [], []
    for start in range(0, positions.numel(), chunk_size):
        idx = positions[start:start + chunk_size]
        h, t = hidden_states[idx], target_ids[idx]
        if torch.is_grad_enabled() and (h.requires_grad or lm_head_weight.requires_grad):
            lp, ent = checkpoint(_chunk, h, lm_head_weight, t, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk(h, lm_head_weight, t, temperature)
        out_lp.append(lp)
        out_ent.append(ent)
    if not out_lp:
        empty = hidden_states.new_zeros(0, dtype=torch.float32)
        return empty, empty.clone()
    return torch.cat(out_lp), torch.cat(out_ent)


def action_logprobs(hidden_states: torch.Tensor, lm_head_weight: torch.Tensor, target_ids: torch.Tensor,
                    positions: torch.Tensor, chunk_size: int = 1024, temperature: float = 1.0) -> torch.Tensor:
    """[n] fp32 log-probs of ``target_ids[p]`` given ``hidden_states[p]`` for p in ``positions``."""
    return action_logprobs_and_entropy(hidden_states, lm_head_weight, target_ids, positions, chunk_size, temperature)[0]


def sequence_action_logprobs(
    model: torch.nn.Module,  # a Hugging Face causal LM (e.g. Qwen2ForCausalLM)
    input_ids: torch.Tensor,  # [B, T] prompt + response, right-padded
    action_mask: torch.Tensor,  # [B, T] 1 on policy-sampled tokens
    chunk_size: int = 1024,
    temperature: float = 1.0,
    attention_mask: torch.Tensor | None = None,  # [B, T] 1 on real tokens
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, entropy)``, each [B, T] fp32: at action token t, the log-prob of ``input_ids[t]``
    from the hidden state at t - 1 (and that distribution's entropy); 0.0 elsewhere. This is
    the layout of ``Trajectory.logprobs``.

    Runs the base model only, then the chunked head: never the full [B, T, V] logits. Heads
    with a bias or logit soft-capping are refused rather than silently mis-scored.
    """
    if action_mask.shape != input_ids.shape:
        raise ValueError(f"action_mask {tuple(action_mask.shape)} and input_ids {tuple(input_ids.shape)} differ in shape")
    mask = action_mask.bool()
    if mask[:, 0].any():
        raise ValueError("an action token at position 0 has no preceding context to be predicted from; "
                         "every trajectory starts with its prompt")
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None or getattr(model.config, "final_logit_softcapping", None):
        raise ValueError(f"{type(model).__name__}: a head with a bias or logit soft-capping is not supported")
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, T, H]
    batch, length = input_ids.shape
    rows, cols = mask.nonzero(as_tuple=True)  # action token (b, t), predicted from (b, t - 1)
    targets = torch.cat([input_ids[:, 1:], input_ids[:, :1]], dim=1).reshape(-1)  # targets[b*T + t] = input_ids[b, t + 1]
    lp, ent = action_logprobs_and_entropy(hidden.reshape(batch * length, -1), head.weight, targets,
                                          rows * length + cols - 1, chunk_size, temperature)
    zeros = lp.new_zeros(batch, length)
    return zeros.index_put((rows, cols), lp), zeros.index_put((rows, cols), ent)
