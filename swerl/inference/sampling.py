"""The sampling math, as pure functions on a [batch, vocab] logits tensor.

The log-prob an engine reports for a token is taken under the distribution it was drawn
from. With the unbiased defaults that is plain ``log_softmax(logits)``, the same quantity
the trainer recomputes, which is what makes the importance ratio pi_theta / pi_old honest.
"""

from __future__ import annotations

import torch

from swerl.inference.base import SamplingConfig


def sampling_logprobs(logits: torch.Tensor, config: SamplingConfig, previous: list[list[int]] | None = None) -> torch.Tensor:
    """Log-probs of the distribution to sample from, for a [batch, vocab] float tensor.

    Tokens a filter removes get -inf. ``previous`` (ids already in each sequence) is only
    needed for the repetition penalty.
    """
    logits = logits.float()
    if config.repetition_penalty != 1.0 and previous is not None:
        logits = apply_repetition_penalty(logits, previous, config.repetition_penalty)
    if config.temperature != 1.0:
        logits = logits / config.temperature
    logp = torch.log_softmax(logits, dim=-1)
    if config.unbiased:
        return logp
    if config.top_k > 0 and config.top_k < logp.shape[-1]:
        kth = torch.topk(logp, config.top_k, dim=-1).values[:, -1:]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if config.min_p > 0:
        threshold = logp.max(dim=-1, keepdim=True).values + torch.log(torch.tensor(config.min_p))
        logp = logp.masked_fill(logp < threshold, float("-inf"))
    if config.top_p < 1.0:
        sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_logp.exp(), dim=-1) - sorted_logp.exp()
        drop_sorted = mass_before >= config.top_p  # keeps the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = logp.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logp, dim=-1)


def apply_repetition_penalty(logits: torch.Tensor, previous: list[list[int]], penalty: float) -> torch.Tensor:
    """CTRL's penalty, as transformers applies it: divide positive logits, multiply negative ones."""
    out = logits.clone()
    for row, ids in enumerate(previous):
        if not ids:
            continue
        idx = torch.tensor(sorted(set(ids)), dtype=torch.long, device=logits.device)
        vals = out[row, idx]
        out[row, idx] = torch.where(vals > 0, vals / penalty, vals * penalty)
    return out


def draw(logp: torch.Tensor, generators: list[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from ``logp`` [batch, vocab], each row with its own generator.

    Returns (ids, their log-probs). A per-row generator makes a request's tokens depend
    only on its own seed, not on which other requests shared its batch.
    """
    probs = logp.exp()
    ids = torch.empty(logp.shape[0], dtype=torch.long, device=logp.device)
    for row, gen in enumerate(generators):
        ids[row] = torch.multinomial(probs[row], 1, generator=gen)[0]
    return ids, logp.gather(-1, ids[:, None])[:, 0]
