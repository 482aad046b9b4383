"""The HF engine's KV caches: the running batch's, and the one kept for each idle trajectory.

A trajectory's next prompt is its previous prompt, the reply, then the new observation:
its KV for the shared prefix is the same whatever follows (attention is causal), so the
engine keeps each finished request's KV under its ``trajectory_id`` and the next request of
that trajectory prefills only the tokens past the longest common prefix (verified token by
token; nothing shared: a full prefill). The kept caches are bounded by
``HFEngineConfig.kv_keep_tokens``: the least recently used go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [batch, heads, time, head_dim]


@dataclass
class KeptKV:
    """One trajectory's KV: ``layers`` hold the keys and values of ``ids``, batch 1, no padding."""

    ids: list[int]
    layers: Layers

    def crop(self, n: int) -> KeptKV:
        return KeptKV(self.ids[:n], [(k[:, :, :n], v[:, :, :n]) for k, v in self.layers])


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (the prompt extends the kept ids), at C speed
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect, each slice compared at C speed
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class KVStore:
    """Kept KV caches by trajectory id; the least recently used are evicted beyond ``budget_tokens``."""

    def __init__(self, budget_tokens: int) -> None:
        self.budget_tokens = budget_tokens
        self._entries: OrderedDict[str, KeptKV] = OrderedDict()
        self._lock = threading.Lock()  # the worker puts and takes; load_weights clears
        self.tokens = 0
        self.evictions = 0

    def take(self, key: str, prompt: list[int]) -> KeptKV | None:
        """Remove ``key``'s entry and return its part that ``prompt`` starts with, leaving at least one
        prompt token to prefill (its logits give the first draw); None when nothing is shared."""
        if not key:
            return None
        with self._lock:
            kept = self._entries.pop(key, None)
            if kept is None:
                return None
            self.tokens -= len(kept.ids)
        n = min(common_prefix(kept.ids, prompt), len(prompt) - 1)
        if n <= 0:
            return None
        return kept if n == len(kept.ids) else kept.crop(n)

    def put(self, key: str, kept: KeptKV) -> None:
        if not key or len(kept.ids) > self.budget_tokens:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.tokens -= len(old.ids)
            self._entries[key] = kept
            self.tokens += len(kept.ids)
            while self.tokens > self.budget_tokens:
                _, evicted = self._entries.popitem(last=False)
                self.tokens -= len(evicted.ids)
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries


def past_block(kept: list[KeptKV | None], width: int) -> Layers:
    """The kept caches of a prefill's rows as one left-padded [rows, heads, width, head_dim] block per layer
    (zeros for rows with nothing kept): one allocation per layer, one copy per row."""
    sample = next(k for k in kept if k is not None)
    layers = []
    for li, (k0, v0) in enumerate(sample.layers):
        keys = k0.new_zeros((len(kept), k0.shape[1], width, k0.shape[3]))
        values = v0.new_zeros((len(kept), v0.shape[1], width, v0.shape[3]))
        for row, kv in enumerate(kept):
            if kv is not None:
                k, v = kv.layers[li]
                keys[row, :, width - k.shape[2]:] = k[0]
                values[row, :, width - v.shape[2]:] = v[0]
        layers.append((keys, values))
    return layers


def row_kv(layers: Layers, row: int, mask_row: torch.Tensor) -> Layers:
    """Row ``row``'s keys and values at the columns ``mask_row`` marks real, as a batch of 1 (a copy)."""
    cols = mask_row.nonzero()[:, 0]
    first, n = int(cols[0]), len(cols)
    if int(cols[-1]) - first + 1 == n:  # contiguous: a slice, cloned so that the batch's tensors can be freed
        return [(k[row:row + 1, :, first:first + n].clone(), v[row:row + 1, :, first:first + n].clone()) for k, v in layers]
    return [(k[row:row + 1].index_select(2, cols), v[row:row + 1].index_select(2, cols)) for k, v in layers]


def cache_layers(cache) -> Layers:
    return [(layer.keys, layer.values) for layer in cache.layers]


def rebuild_cache(layers: Layers, config) -> object:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers, config=config)


def stack_lpadded(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` over ``b`` on the batch axis, each left-padded with zeros to the wider sequence axis (dim 2
    for KV [B,H,T,D], dim 1 for a [B,T] mask): one allocation, each input copied once."""
    axis = 2 if a.dim() == 4 else 1
    width = max(a.shape[axis], b.shape[axis])
    shape = list(a.shape)
    shape[0], shape[axis] = a.shape[0] + b.shape[0], width
    out = a.new_zeros(shape)
    out[:a.shape[0]].narrow(axis, width - a.shape[axis], a.shape[axis]).copy_(a)
    out[a.shape[0]:].narrow(axis, width - b.shape[axis], b.shape[axis]).copy_(b)
    return out
