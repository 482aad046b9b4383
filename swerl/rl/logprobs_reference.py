"""The previous log-prob head: plain autograd ops per chunk under activation checkpointing.

Kept as the baseline that the tests and ``bench/bench_train.py --sections 4`` measure the
fused head of ``swerl.rl.logprobs`` against (values, gradients, peak memory, time). Per
chunk it makes several full ``[chunk, V]`` fp32 tensors (the cast, the temperature
division, log-sum-exp, softmax and their gradients) and recomputes the whole chunk,
entropy included, in the backward pass.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
           temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (hidden @ weight.T).float() / temperature  # [c, V]
    logz = torch.logsumexp(logits, dim=-1)  # [c]
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    with torch.no_grad():
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logprobs, entropy


def checkpointed_action_logprobs_and_entropy(
    hidden_states: torch.Tensor, lm_head_weight: torch.Tensor, target_ids: torch.Tensor, positions: torch.Tensor,
    chunk_size: int = 1024, temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``swerl.rl.logprobs.action_logprobs_and_entropy``."""
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
