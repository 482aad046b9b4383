"""Log-probabilities of the action tokens without materialising [T, V] logits.

A 131k-token trajectory with a 152k vocabulary would need 80 GB of fp32 logits. Here the
head is applied only at the requested positions, ``chunk_size`` positions at a time, by one
autograd Function (``_FusedHead``) that keeps nothing vocabulary-sized for the backward
pass: only the positions' hidden states (in the matmul dtype) and one fp32 log-partition
per position. Per chunk, the forward pass does one matmul in the compute dtype (the
autocast dtype, bf16 on a GPU; else the inputs' dtype), casts the logits to fp32 once, and
derives the target log-prob, the log-sum-exp and the entropy from that one buffer in
place. The backward pass recomputes the chunk's logits and turns them, in place, into
``grad x (onehot - softmax) / temperature``, which feeds the two gradient matmuls; the
head weight's gradient accumulates over chunks in fp32. With ``compiled=True`` the
per-chunk softmax math (``_chunk_stats``, ``_logit_grad``) goes through torch.compile, which
fuses its passes over the logits into a few kernels (same figures to 1e-5).

Peak extra memory is one ``[chunk, V]`` fp32 buffer plus the matmul's own ``[chunk, V]``
output when it is narrower than fp32 (6 bytes x chunk x V under bf16, 4 in fp32), plus a
``[V, H]`` fp32 gradient accumulator, whatever the sequence length. The previous head
(plain ops under activation checkpointing, ``swerl.rl.logprobs_reference``) made several
fp32 ``[chunk, V]`` tensors per chunk and ran the forward, entropy included, twice.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_AUTOCAST_ELIGIBLE = (torch.float32, torch.float16, torch.bfloat16)


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmuls run in: what autocast would give ``hidden @ weight.T``."""
    dtype = torch.promote_types(hidden.dtype, weight.dtype)
    device = hidden.device.type
    if torch.is_autocast_enabled(device) and dtype in _AUTOCAST_ELIGIBLE:
        return torch.get_autocast_dtype(device)
    return dtype


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """[c, V] fp32 ``logits / temperature``: one fp32 buffer (the logits' own when they are fp32)."""
    z = logits.float()
    if temperature != 1.0:
        z.div_(temperature)
    return z


def _chunk_stats(logits: torch.Tensor, targets: torch.Tensor,
                 temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log-prob of targets, log-partition, entropy)``, each [c] fp32, from [c, V] logits in the
    matmul dtype. Eager, it works in place in one fp32 buffer; compiled, it fuses into row
    reductions over the logits."""
    z = _tempered(logits, temperature)
    target = z.gather(1, targets[:, None]).squeeze(1)
    peak = z.amax(1, keepdim=True)
    e = z.sub_(peak).exp_()  # exp(z - max), in place
    total = e.sum(1)
    log_total = total.log()
    logz = peak.squeeze(1) + log_total
    # H = -sum p log p with p = e / total: log(total) + sum(-e log e) / total
    return target - logz, logz, log_total + torch.special.entr(e, out=e).sum(1) / total


def _logit_grad(logits: torch.Tensor, logz: torch.Tensor, scale: torch.Tensor, targets: torch.Tensor,
                temperature: float) -> torch.Tensor:
    """``scale x (onehot(targets) - softmax(logits / T))`` ([c, 1] scale = grad / T), in the logits'
    dtype and written into the logits' buffer: the gradient of the chunk's log-probs w.r.t. its logits."""
    z = _tempered(logits, temperature)
    z.sub_(logz[:, None]).exp_().mul_(-scale)  # -grad x softmax
    z.scatter_add_(1, targets[:, None], scale)  # + grad at the target
    return z if z.dtype == logits.dtype else logits.copy_(z)  # back to the matmul dtype, in the matmul's buffer


_COMPILED: dict[str, Callable] = {}


def _kernels(compiled: bool) -> tuple[Callable, Callable]:
    """The per-chunk math, eager or through torch.compile (compiled once per process, for any chunk length)."""
    if not compiled:
        return _chunk_stats, _logit_grad
    if not _COMPILED:
        _COMPILED.update(stats=torch.compile(_chunk_stats, dynamic=True), grad=torch.compile(_logit_grad, dynamic=True))
    return _COMPILED["stats"], _COMPILED["grad"]


class _FusedHead(torch.autograd.Function):
    """``(log-prob of targets, entropy)`` per row of ``hidden`` [n, H], chunk by chunk; see the module doc."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float,
                chunk_size: int, dtype: torch.dtype, compiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        stats, _ = _kernels(compiled)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes are chosen here, explicitly
            h, w = hidden.to(dtype), weight.to(dtype)
            n = h.shape[0]
            logprobs = torch.empty(n, dtype=torch.float32, device=h.device)
            entropy, logz = torch.empty_like(logprobs), torch.empty_like(logprobs)
            for s in range(0, n, chunk_size):
                rows = slice(s, s + chunk_size)
                logprobs[rows], logz[rows], entropy[rows] = stats(h[rows] @ w.T, targets[rows], temperature)
        ctx.save_for_backward(h, weight, targets, logz)
        ctx.temperature, ctx.chunk_size, ctx.dtype, ctx.hidden_dtype = temperature, chunk_size, dtype, hidden.dtype
        ctx.compiled = compiled
        ctx.mark_non_differentiable(entropy)  # a reported metric, never trained on
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor, _grad_entropy: torch.Tensor):
        h, weight, targets, logz = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[:2]
        _, logit_grad = _kernels(ctx.compiled)
        with torch.autocast(h.device.type, enabled=False):
            w = weight.to(ctx.dtype)
            grad_h = torch.empty_like(h) if need_h else None
            grad_w = (torch.zeros(weight.shape, dtype=torch.promote_types(weight.dtype, torch.float32), device=weight.device)
                      if need_w else None)
            scale = (grad_logprobs.float() / ctx.temperature).unsqueeze(1)  # d lp / d logit = (onehot - p) / T
            for s in range(0, h.shape[0], ctx.chunk_size):
                rows = slice(s, s + ctx.chunk_size)
                g = logit_grad(h[rows] @ w.T, logz[rows], scale[rows], targets[rows], ctx.temperature)
                if need_h:
                    torch.mm(g, w, out=grad_h[rows])
                if need_w:
                    if g.dtype == grad_w.dtype:
                        grad_w.addmm_(g.T, h[rows])
                    else:
                        grad_w.add_(g.T @ h[rows])
                del g  # before the next chunk's logits exist, not after
        return (grad_h.to(ctx.hidden_dtype) if need_h else None, grad_w.to(weight.dtype) if need_w else None,
                None, None, None, None, None)


def action_logprobs_and_entropy(
    hidden_states: torch.Tensor,  # [T, H] final hidden states (after the last norm)
    lm_head_weight: torch.Tensor,  # [V, H]
    target_ids: torch.Tensor,  # [T] the token hidden_states[t] predicts
    positions: torch.Tensor,  # [n] indices into T
    chunk_size: int = 1024,
    temperature: float = 1.0,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(target_ids[p] | hidden_states[p]), entropy at p)`` for p in ``positions``: two [n] fp32
    tensors, the entropy detached. The matmuls run in the autocast dtype when autocast is on.
    ``compiled``: the per-chunk softmax math goes through ``torch.compile`` (one fused kernel
    per reduction instead of one pass per op; compiles on first use)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    positions = positions.to(hidden_states.device, torch.long)
    hidden = hidden_states.index_select(0, positions)  # [n, H]
    targets = target_ids.to(hidden_states.device).index_select(0, positions)
    return _FusedHead.apply(hidden, lm_head_weight, targets, float(temperature), chunk_size,
                            _compute_dtype(hidden, lm_head_weight), compiled)


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
    compiled: bool = False,  # see action_logprobs_and_entropy
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
    # nonzero waits for the device: ask before the decoder's kernels are queued, not after (a GPU idle in between)
    rows, cols = mask.nonzero(as_tuple=True)  # action token (b, t), predicted from (b, t - 1)
    # no KV cache: a scoring pass never decodes on, and a cache would copy every layer's keys and values
    # (and, under torch.compile, re-specialise each layer on its cache slot)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # [B, T, H]
    batch, length = input_ids.shape
    targets = torch.cat([input_ids[:, 1:], input_ids[:, :1]], dim=1).reshape(-1)  # targets[b*T + t] = input_ids[b, t + 1]
    lp, ent = action_logprobs_and_entropy(hidden.reshape(batch * length, -1), head.weight, targets,
                                          rows * length + cols - 1, chunk_size, temperature, compiled=compiled)
    zeros = lp.new_zeros(batch, length)
    return zeros.index_put((rows, cols), lp), zeros.index_put((rows, cols), ent)
