"""Which attention kernel the trainer's forward and backward run.

By default the trainer lets SDPA pick flash, memory-efficient or math kernels and keeps cuDNN's
out (``sdpa_without_cudnn``): cuDNN plans each new shape once, about 16 ms of CPU per attention
call on an H100, which micro-batches of varying lengths pay over and over.

``TrainerConfig.cudnn_attention`` turns cuDNN's kernel on, first in SDPA's priority. cuDNN's
kernel takes no grouped-query form (``enable_gqa``), so the policy's attention goes through
``repeated_kv_sdpa``, registered with transformers as ``REPEATED_KV_SDPA``: the key and value
heads are repeated to the query heads' count before SDPA, as transformers' own ``sdpa`` does
when it cannot pass ``enable_gqa``. On an H100 a DAPO step of a ~0.5B Qwen2 at 16k-32k tokens
runs 1.22-1.27x faster with it (README: "On a GPU").
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

REPEATED_KV_SDPA = "swerl_repeated_kv_sdpa"


def repeated_kv_sdpa(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: [B, heads, T, d] query, [B, kv_heads, T, d] key and
    value; returns the [B, T, heads, d] output. Causal without a mask, as transformers' ``sdpa``."""
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
                                         is_causal=causal)
    return out.transpose(1, 2).contiguous(), None


def attention_implementation(cudnn_attention: bool) -> str | None:
    """The ``attn_implementation`` to load the policy with: ``REPEATED_KV_SDPA`` (registered with
    transformers' attention and mask interfaces, the mask being ``sdpa``'s) or the default."""
    if not cudnn_attention:
        return None
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(REPEATED_KV_SDPA, repeated_kv_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(REPEATED_KV_SDPA, sdpa_mask)
    return REPEATED_KV_SDPA


def cudnn_first(device: torch.device):
    """A context in which SDPA on CUDA tries cuDNN's attention first, then flash, memory-efficient
    and math; a no-op elsewhere."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH], set_priority=True)
