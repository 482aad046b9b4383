"""Peak allocator memory of a call, on CUDA and on CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch


def peak_allocated_bytes(fn: Callable[[], object], device: str = "cpu") -> int:
    """Peak bytes allocated while ``fn`` runs, above what was live before it.

    CUDA: the caching allocator's peak counter. CPU keeps no such counter, so the peak is
    replayed from torch.profiler's memory events (every allocation and free, with its size):
    deterministic, unlike RSS, which also counts freed pages the allocator keeps.
    """
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak
