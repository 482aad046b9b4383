"""The optimiser step both backends share: plan micro-batches, accumulate gradients, schedule the lr.

A step's loss is normalised by the action tokens (or sequences) of the WHOLE batch, counted
once before any forward pass, so splitting it into micro-batches, or over processes, gives
the gradient of the single-batch loss (up to float summation order). Each micro-batch runs
the chunked action log-probs (never [T, V] logits), then the objective, then ``backward``;
the backend owns gradient reduction, clipping and the optimiser.

Data parallelism: every process runs the same number of micro-batches (ZeRO-3 gathers
weights in each forward, collectively); a process with fewer real ones runs a dummy, a
real sequence with no action token, whose gradient is exactly zero. Backends average
gradients over processes, so each process scales its loss by the world size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from swerl.inference.hf_engine import resolve_device  # noqa: F401  the engines' rule, re-exported
from swerl.inference.hf_engine import resolve_dtype as compute_dtype  # noqa: F401  fp32 on CPU, bf16 on GPU
from swerl.inference.hf_engine import sdpa_without_cudnn
from swerl.rl.batching import pack_microbatches
from swerl.rl.logprobs import sequence_action_logprobs
from swerl.rl.loss import dapo_loss, masked_mean, masked_sum
from swerl.train.attention import cudnn_first
from swerl.train.base import TrainBatch, TrainerConfig

# Per-token metrics averaged over the step's action tokens (weights: each micro-batch's count).
WEIGHTED_METRICS = ("clip_frac_low", "clip_frac_high", "approx_kl", "ratio_mean", "entropy", "neg_capped_frac", "ref_kl",
                    "is_weight_mean", "is_truncated_frac")


def learning_rate(step: int, cfg: TrainerConfig) -> float:
    """The lr of optimiser step ``step`` (0-based).

    Warm-up of 2 steps at lr 1e-6: 3.3e-7, 6.7e-7, then 1e-6. Cosine over total_steps 12 with
    2 warm-up steps: step 2 -> 1e-6, step 7 -> 5e-7, step 12 -> 0.
    """
    opt = cfg.optimizer
    if step < opt.warmup_steps:
        return opt.lr * (step + 1) / (opt.warmup_steps + 1)
    if opt.lr_schedule == "constant":
        return opt.lr
    progress = min(1.0, (step - opt.warmup_steps) / (cfg.total_steps - opt.warmup_steps))
    if opt.lr_schedule == "cosine":
        return opt.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    return opt.lr * (1.0 - progress)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices (and embeddings), none on norms and biases (1-D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    matrix = [len(getattr(p, "ds_shape", p.shape)) >= 2 for p in params]  # ZeRO-3 partitions are flat: ds_shape is the real one
    return [{"params": [p for p, m in zip(params, matrix) if m], "weight_decay": weight_decay},
            {"params": [p for p, m in zip(params, matrix) if not m], "weight_decay": 0.0}]


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> float:
    """The gradients' global L2 norm; when ``max_norm`` > 0 they are scaled by ``min(1, max_norm / (norm + 1e-6))``
    (torch's and DeepSpeed's rule). On CPU the norm accumulates in float64: torch's float32
    CPU norm of a 262k-entry embedding gradient is off by 5e-5 relative, DeepSpeed's is not."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads and all(g.device == grads[0].device and g.dtype == torch.float32 for g in grads) and grads[0].device.type != "cpu":
        # one device: multi-tensor kernels, a handful of launches instead of two per parameter
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2)), 2)
        if max_norm > 0:
            torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
        return float(norm)
    norms = [torch.linalg.vector_norm(g, 2, dtype=torch.float64 if g.device.type == "cpu" else torch.float32) for g in grads]
    norm = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]), 2) if norms else torch.zeros(())
    if max_norm > 0:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.device, g.dtype))
    return float(norm)


def compile_decoder_layers(model: nn.Module) -> int:
    """``torch.compile`` each decoder layer in place (``nn.Module.compile``): the layers share one
    graph, so it compiles once for all of them. Returns how many were compiled; a model
    whose decoder has no ``layers`` list is refused."""
    layers = _decoder_layers(model, "compile_layers", "compile")
    for layer in layers:
        layer.compile(dynamic=None)
    return len(layers)


def _decoder_layers(model: nn.Module, option: str, verb: str) -> nn.ModuleList:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"{option}: {type(model).__name__} has no decoder.layers to {verb}; turn {option} off")
    return layers


@functools.cache
def _attention_ops() -> frozenset:
    """The attention kernels' ops (those this torch build has): looked up once, not at every op the policy sees."""
    aten = torch.ops.aten
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_fused_attention_overrideable")
    return frozenset(getattr(aten, name).default for name in names if hasattr(aten, name))


def _keep_attention_policy(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _attention_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_decoder_layers(model: nn.Module) -> int:
    """Selective activation checkpointing of each decoder layer: backward recomputes the layer
    from its input, except the attention kernel, whose output (and softmax statistics) the
    forward keeps. At n tokens that costs n x hidden per layer and spares the recomputation
    that grows as n^2. The checkpoint wraps each layer's ``forward``, inside the module call,
    so ``compile_decoder_layers`` afterwards compiles it with the layer (the partitioner honours
    the policy). Returns how many layers were wrapped."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    context_fn = functools.partial(create_selective_checkpoint_contexts, _keep_attention_policy)
    layers = _decoder_layers(model, "gradient checkpointing", "checkpoint")
    for layer in layers:
        forward = layer.forward

        def checkpointed(*args, _forward=forward, **kwargs):
            return checkpoint(_forward, *args, use_reentrant=False, context_fn=context_fn, **kwargs)

        layer.forward = checkpointed
    return len(layers)


class ActionLogprobModel(nn.Module):
    """A causal LM whose forward returns ``(logprobs, entropy)`` of the action tokens, [B, T] each.

    The chunked head reads the output embedding's weight outside that module's own forward;
    wrapping the computation in one module lets ZeRO-3 gather that weight for it (the
    backend registers it as an external parameter of this module).
    """

    def __init__(self, policy: nn.Module, chunk_size: int, compiled: bool = False) -> None:
        super().__init__()
        self.policy = policy
        self.chunk_size = chunk_size
        self.compiled = compiled

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sequence_action_logprobs(self.policy, input_ids, action_mask, self.chunk_size, 1.0, attention_mask,
                                        compiled=self.compiled)


def sft_loss(logprobs: torch.Tensor, action_mask: torch.Tensor, aggregation: str = "token",
             norm_tokens: int | None = None, norm_sequences: int | None = None) -> torch.Tensor:
    """Minus the mean log-prob of the action tokens ([B, T] inputs): the RFT objective.

    Token aggregation divides the sum by ``norm_tokens`` (the step's action tokens); sequence
    aggregation averages each sequence's tokens, then divides by ``norm_sequences``.
    """
    mask = action_mask.bool()
    if aggregation == "token":
        return -masked_sum(logprobs, mask) / (norm_tokens if norm_tokens is not None else mask.sum().clamp(min=1))
    per_sequence = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(-1) / mask.sum(-1).clamp(min=1)
    return -per_sequence.sum() / (norm_sequences if norm_sequences is not None else mask.any(-1).sum().clamp(min=1))


def _dapo(lp, ent, mb: dict, cfg: TrainerConfig, norm_tokens: int, norm_sequences: int):
    if "old_logprobs" not in mb or "advantages" not in mb:
        raise ValueError("the dapo objective needs old_logprobs and advantages in the TrainBatch")
    token = cfg.loss.loss_aggregation == "token"
    return dapo_loss(lp, mb["old_logprobs"], mb["advantages"], mb["action_mask"], cfg.loss.eps_low, cfg.loss.eps_high,
                     norm_tokens=norm_tokens if token else None, aggregation=cfg.loss.loss_aggregation,
                     entropy=ent.detach(), norm_sequences=None if token else norm_sequences,
                     neg_prob_cap=cfg.loss.neg_prob_cap, kl_coef=cfg.loss.kl_coef, prox_logprobs=mb.get("prox_logprobs"),
                     is_cap=cfg.loss.is_cap)


def _sft(lp, ent, mb: dict, cfg: TrainerConfig, norm_tokens: int, norm_sequences: int):
    mask = mb["action_mask"].bool()
    loss = sft_loss(lp, mask, cfg.loss.loss_aggregation, norm_tokens, norm_sequences)
    return loss, {"action_tokens": mask.sum(), "entropy": masked_mean(ent.detach(), mask)}


OBJECTIVES: dict[str, Callable] = {"dapo": _dapo, "sft": _sft}


@dataclass(frozen=True)
class StepPlan:
    """This process's share of one optimiser step."""

    microbatches: list[list[int]]  # indices into the batch; [] is a dummy (no action token)
    norm_tokens: int  # action tokens of the whole step, all processes
    norm_sequences: int  # sequences with at least one action token, all processes
    world_size: int


def plan_step(batch: TrainBatch, cfg: TrainerConfig, rank: int = 0, world_size: int = 1) -> StepPlan:
    """Pack the batch by token budget and deal the micro-batches to processes.

    Micro-batches go, largest padded cost first, to the process with the least work so far;
    every process then gets the same count (dummies fill the gap). Deterministic: all
    processes compute the same plan from the same batch.
    """
    lengths = batch.lengths
    packed = pack_microbatches(lengths, cfg.max_tokens_per_microbatch)
    load = [0] * world_size
    shares: list[list[list[int]]] = [[] for _ in range(world_size)]
    for mb in sorted(packed, key=lambda m: -len(m) * lengths[m[0]]):  # stable: pack order breaks ties
        r = min(range(world_size), key=lambda k: (load[k], len(shares[k]), k))
        shares[r].append(mb)
        load[r] += len(mb) * lengths[mb[0]]
    count = max(len(s) for s in shares)
    mine = shares[rank] + [[]] * (count - len(shares[rank]))
    return StepPlan(mine, batch.action_tokens, sum(1 for m in batch.action_mask if m.any()), world_size)


def _microbatch(batch: TrainBatch, indices: list[int], device: torch.device) -> dict[str, torch.Tensor]:
    """Padded tensors of one micro-batch; ``[]`` gives a dummy (the shortest sequence, no action token).

    ``logprob_mask`` says where log-probs are computed. It is the action mask, except in a
    micro-batch without action tokens: there it marks one token, whose log-prob the loss
    then masks out, so the loss still depends on every weight (ZeRO-3 needs each backward to
    run through the model on every process) and its gradient is exactly zero.
    """
    mb = batch.select(indices or [min(range(len(batch)), key=lambda i: batch.lengths[i])]).padded(device)
    if not indices:
        mb["action_mask"] = torch.zeros_like(mb["action_mask"])
    mb["logprob_mask"] = mb["action_mask"]
    if not mb["action_mask"].any():
        mb["logprob_mask"] = torch.zeros_like(mb["action_mask"])
        mb["logprob_mask"][0, batch.lengths[indices[0]] - 1 if indices else -1] = True
    return mb


def attention_kernels(cfg: TrainerConfig, device: torch.device):
    """The attention kernels the trainer's passes run on (``cfg.cudnn_attention``): every forward and backward of one
    trainer picks the same, so checkpointed layers recompute what their forward computed."""
    return cudnn_first(device) if cfg.cudnn_attention else sdpa_without_cudnn(device)


def accumulate_gradients(model: Callable, batch: TrainBatch, plan: StepPlan, cfg: TrainerConfig,
                         backward: Callable[[torch.Tensor], None], device: torch.device,
                         autocast_dtype: torch.dtype | None = None) -> dict[str, float]:
    """Forward and backward over this process's micro-batches; gradients accumulate in the model.

    ``model(input_ids, attention_mask, action_mask) -> (logprobs, entropy)`` (an
    ``ActionLogprobModel`` or an engine wrapping one). Returns SUMS over this process
    (``loss``, ``tokens``, ``action_tokens``, ``sequences``, ``microbatches``, and
    ``<metric>_sum`` weighted by action tokens) for the caller to reduce over processes and
    pass to ``finish_metrics``.
    """
    objective = OBJECTIVES[cfg.objective]
    sums: dict[str, float] = {"loss": 0.0, "tokens": 0.0, "action_tokens": 0.0, "sequences": 0.0, "microbatches": 0.0}
    for indices in plan.microbatches:
        mb = _microbatch(batch, indices, device)
        # backward too: checkpointed layers recompute their attention there, and must pick the same kernel
        with attention_kernels(cfg, device):
            with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
                lp, ent = model(mb["input_ids"], mb["attention_mask"], mb["logprob_mask"])
            loss, metrics = objective(lp, ent, mb, cfg, plan.norm_tokens, plan.norm_sequences)
            backward(loss * plan.world_size)  # backends average over processes; the loss is already global
        n = float(metrics["action_tokens"])
        sums["loss"] += float(loss.detach())
        sums["tokens"] += float(mb["attention_mask"].sum()) if indices else 0.0
        sums["action_tokens"] += n
        sums["sequences"] += len(indices)
        sums["microbatches"] += 1.0 if indices else 0.0
        for key in WEIGHTED_METRICS:
            if key in metrics:
                sums[f"{key}_sum"] = sums.get(f"{key}_sum", 0.0) + float(metrics[key]) * n
    return sums


def forward_logprobs(model: Callable, policy: nn.Module, batch: TrainBatch, cfg: TrainerConfig, device: torch.device,
                     autocast_dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Each sequence's action-token log-probs under ``model`` (``accumulate_gradients``'s callable; ``policy`` the LM
    inside it, switched to eval mode meanwhile), one sequence at a time, without a gradient, float32 on the CPU, on
    the attention kernels the trainer's steps use.
    Under ZeRO-3 each forward is collective: every process passes the same batch and computes all of it."""
    out = []
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad(), attention_kernels(cfg, device):
            for i in range(len(batch)):
                mb = batch.select([i]).padded(device)
                with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
                    lp, _ = model(mb["input_ids"], mb["attention_mask"], mb["action_mask"])
                out.append(lp[0].float().cpu())
    finally:
        policy.train(was_training)
    return out


def finish_metrics(sums: dict[str, float], grad_norm: float, lr: float, seconds: float) -> dict[str, float]:
    """Step metrics from the (process-reduced) sums of ``accumulate_gradients``."""
    n = max(sums["action_tokens"], 1.0)
    out = {k: v for k, v in sums.items() if not k.endswith("_sum")}
    out.update({k[:-4]: v / n for k, v in sums.items() if k.endswith("_sum")})
    out.update(grad_norm=grad_norm, lr=lr, step_seconds=seconds, tokens_per_s=sums["tokens"] / max(seconds, 1e-9))
    return out

