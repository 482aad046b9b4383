"""The paper's DAPO loss, a pure function over padded [B, T] tensors.

Per action token: ``rho = pi_theta / pi_old``, objective
``min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``; the loss is minus the sum over
ALL action tokens of the batch divided by their number (token-level aggregation). A
micro-batch passes ``norm_tokens`` = the action tokens of the whole optimiser step, so that
summing micro-batch losses (and gradients) reproduces the single-batch value exactly.
Observation tokens (mask 0) never enter the loss and get exactly zero gradient. As in the
paper there is no KL term to a reference policy unless ``kl_coef`` > 0 asks for GRPO's:
``kl_coef * k3(log pi_ref - log pi_theta)`` per action token, aggregated as the policy term,
with pi_ref the policy that began the iteration (the sampler: ``old_logprobs``).

``neg_prob_cap`` < 1 (not in the paper) leaves out of the gradient the negative-advantage
tokens the sampler drew with probability above the cap, as a clipped token is left out: they
still count in the normaliser. A failed run's sure tokens (fences, the end-of-turn, the
command's name) are rarely why it failed, yet at a small model's learning rate the push on
them generalises until the policy stops ending its turns; the uncertain tokens, where the
run went another way, keep their negative signal.

Off-policy (decoupled PPO, as AReaL does it; verl's truncated importance sampling): trajectories
sampled by an older policy than the one that starts the update, ``pi_behav`` (the sampler's log-probs,
``old_logprobs``) and ``pi_prox`` (``prox_logprobs``: the update's starting policy, recomputed by the
trainer). Then ``rho = pi_theta / pi_prox`` is clipped as above, and each token's objective is weighted
by ``w = min(pi_prox / pi_behav, is_cap)`` (no gradient through it): the clip keeps the update near the
policy it starts from, the weight corrects for the data coming from another, and the cap bounds the
variance a token the old policy found unlikely would bring. Without ``prox_logprobs`` (staleness 0: the
behaviour policy is the update's start) the loss is the synchronous one, computed as it always was.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Aggregation = Literal["token", "sequence"]


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is set; masked-out values (even inf or nan) do not leak."""
    return torch.where(mask, x, torch.zeros_like(x)).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the set entries of ``mask``; 0 when none is set."""
    return masked_sum(x, mask) / mask.sum().clamp(min=1)


def clipped_objective(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """Per-token ``min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)`` (to be maximised)."""
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    return torch.min(ratio * advantages, clipped * advantages)


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(q || p) from ``log_ratio = log p - log q`` at samples of q: (r - 1) - log r."""
    return torch.expm1(log_ratio) - log_ratio


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, aggregation: Aggregation,
               norm_tokens: int | None, norm_sequences: int | None) -> torch.Tensor:
    """Mean over the batch of a per-token quantity, token-level or sequence-level."""
    if aggregation == "token":
        denominator = norm_tokens if norm_tokens is not None else mask.sum().clamp(min=1)
        return masked_sum(per_token, mask) / denominator
    # sequence: mean over each sequence's action tokens, then mean over sequences that have any
    per_sequence = torch.where(mask, per_token, torch.zeros_like(per_token)).sum(-1) / mask.sum(-1).clamp(min=1)
    has_tokens = mask.any(-1)
    denominator = norm_sequences if norm_sequences is not None else has_tokens.sum().clamp(min=1)
    return masked_sum(per_sequence, has_tokens) / denominator


def _check_aggregation(aggregation: str, norm_tokens: int | None, norm_sequences: int | None) -> None:
    """Refuse an unknown aggregation, or the other aggregation's denominator (it would be silently ignored)."""
    if aggregation not in ("token", "sequence"):
        raise ValueError(f"aggregation must be 'token' or 'sequence', got {aggregation!r}")
    if aggregation == "token" and norm_sequences is not None or aggregation == "sequence" and norm_tokens is not None:
        raise ValueError("norm_tokens goes with aggregation='token', norm_sequences with aggregation='sequence'")


def neg_capped(mask: torch.Tensor, advantages: torch.Tensor, old_logprobs: torch.Tensor, neg_prob_cap: float) -> torch.Tensor:
    """Action tokens of negative advantage that pi_old drew with probability above ``neg_prob_cap``."""
    return mask & (advantages < 0) & (old_logprobs > math.log(neg_prob_cap))


def truncated_is_weight(prox_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor,
                        cap: float) -> torch.Tensor:
    """Per-token ``min(pi_prox / pi_behav, cap)``, detached; 1 where ``mask`` is not set."""
    if not cap >= 1.0:
        raise ValueError(f"is_cap must be at least 1 (a weight below 1 for every token is no correction), got {cap}")
    with torch.no_grad():
        log_weight = torch.where(mask, prox_logprobs - behaviour_logprobs, torch.zeros_like(prox_logprobs))
        return torch.exp(log_weight.clamp(max=math.log(cap)))


def _dapo_metrics(ratio: torch.Tensor, log_ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                  eps_low: float, eps_high: float, entropy: torch.Tensor | None, capped: torch.Tensor | None,
                  ref_kl: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """``dapo_loss``'s metrics but ``pg_loss``, detached, over action tokens only (see its docstring)."""
    metrics: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        adv_full = adv.expand_as(ratio)
        n = mask.sum()
        metrics["action_tokens"] = n
        metrics["clip_frac_low"] = masked_mean(((adv_full < 0) & (ratio < 1 - eps_low)).to(ratio.dtype), mask)
        metrics["clip_frac_high"] = masked_mean(((adv_full > 0) & (ratio > 1 + eps_high)).to(ratio.dtype), mask)
        metrics["approx_kl"] = masked_mean(k3(log_ratio), mask)
        metrics["ratio_mean"] = masked_mean(ratio, mask)
        one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
        metrics["ratio_min"] = torch.where(n > 0, torch.where(mask, ratio, torch.inf).amin(), one)
        metrics["ratio_max"] = torch.where(n > 0, torch.where(mask, ratio, -torch.inf).amax(), one)
        if entropy is not None:
            metrics["entropy"] = masked_mean(entropy, mask)
        if capped is not None:
            metrics["neg_capped_frac"] = masked_mean(capped.to(ratio.dtype), mask)
        if ref_kl is not None:
            metrics["ref_kl"] = masked_mean(ref_kl, mask)
    return metrics


def dapo_loss(
    logprobs: torch.Tensor,  # [B, T] log pi_theta(token), with grad
    old_logprobs: torch.Tensor,  # [B, T] log pi_old(token) from the sampler
    advantages: torch.Tensor,  # [B] one per trajectory, or [B, T]
    action_mask: torch.Tensor,  # [B, T] 1 where the policy sampled the token
    eps_low: float = 0.2,
    eps_high: float = 0.3,
    norm_tokens: int | None = None,
    aggregation: Aggregation = "token",
    entropy: torch.Tensor | None = None,  # [B, T] per-token entropy of pi_theta, for the metric only
    norm_sequences: int | None = None,
    neg_prob_cap: float = 1.0,
    kl_coef: float = 0.0,
    prox_logprobs: torch.Tensor | None = None,  # [B, T] log pi_prox(token): the update's starting policy (off-policy data)
    is_cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(loss, metrics)``; metrics are detached scalars over action tokens only.

    ``norm_tokens`` (token aggregation) / ``norm_sequences`` (sequence aggregation): the
    denominator to use instead of this call's own count, for gradient accumulation.
    ``neg_prob_cap``: negative-advantage tokens with ``pi_old > neg_prob_cap`` get no gradient (1.0: none left out).
    ``kl_coef``: GRPO's penalty ``kl_coef * k3(old_logprobs - logprobs)`` per action token, the sampler's
    policy as the reference (0: none, DAPO). Every action token carries it, capped ones too.
    ``prox_logprobs``: off-policy data (see the module's docstring): ``rho`` and the KL reference are against it, and
    each token's objective is weighted by ``min(pi_prox / pi_behav, is_cap)``; None: the synchronous loss, unchanged.
    Metrics: ``clip_frac_low`` (A < 0 and rho < 1 - eps_low: the low clip is what stops the
    gradient), ``clip_frac_high`` (A > 0 and rho > 1 + eps_high), ``approx_kl`` (k3 estimate of
    KL(pi_old || pi_theta)), ``ratio_mean/min/max``, ``entropy`` when it is given, ``neg_capped_frac``
    (action tokens left out by ``neg_prob_cap``, when it is below 1), ``ref_kl`` (the penalised k3 mean, when ``kl_coef`` > 0),
    ``is_weight_mean`` and ``is_truncated_frac`` (with ``prox_logprobs``: the correction's mean weight, and the share of
    action tokens whose weight the cap cut), and ``action_tokens`` (to weight metrics across micro-batches).
    """
    _check_aggregation(aggregation, norm_tokens, norm_sequences)
    mask = action_mask.bool()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    start = old_logprobs if prox_logprobs is None else prox_logprobs  # the policy the update starts from
    # where, not multiplication: masked positions get ratio 1 and exactly zero gradient
    log_ratio = torch.where(mask, logprobs - start, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    objective = clipped_objective(ratio, adv, eps_low, eps_high)
    weight = None
    if prox_logprobs is not None:
        weight = truncated_is_weight(prox_logprobs, old_logprobs, mask, is_cap)
        objective = weight * objective
    capped = None
    if neg_prob_cap < 1.0:
        capped = neg_capped(mask, adv, old_logprobs, neg_prob_cap)
        objective = torch.where(capped, torch.zeros_like(objective), objective)
    pg_loss = -_aggregate(objective, mask, aggregation, norm_tokens, norm_sequences)
    loss, ref_kl = pg_loss, None
    if kl_coef > 0:
        ref_kl = k3(-log_ratio)  # log pi_ref - log pi_theta, pi_ref the update's start; 0 where masked
        loss = pg_loss + kl_coef * _aggregate(ref_kl, mask, aggregation, norm_tokens, norm_sequences)
    metrics = {"pg_loss": pg_loss.detach(),
               **_dapo_metrics(ratio, log_ratio, adv, mask, eps_low, eps_high, entropy, capped, ref_kl)}
    if weight is not None:
        metrics["is_weight_mean"] = masked_mean(weight, mask)
        cut = (prox_logprobs - old_logprobs) > math.log(is_cap)
        metrics["is_truncated_frac"] = masked_mean(cut.to(weight.dtype), mask)
    return loss, metrics
