"""Micro-batches by token budget, and the normaliser that makes gradient accumulation exact.

Sequences are sorted longest first and packed greedily; a micro-batch costs
``len(batch) x its longest sequence`` tokens, padding included, and never more than
``max_tokens_per_microbatch``. Sorting puts similar lengths together, so little padding is
spent. Every micro-batch's loss is divided by the action tokens of the WHOLE optimiser step
(``action_token_count`` passed to ``dapo_loss(norm_tokens=...)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pack_microbatches(lengths: Sequence[int], max_tokens_per_microbatch: int) -> list[list[int]]:
    """Indices into ``lengths`` grouped into micro-batches, longest sequences first.

    Example: lengths [3, 8, 5, 2] with budget 10 -> [[1], [2, 0], [3]]: 8 alone (8 + 8 > 10),
    then 5 and 3 (2 x 5 = 10), then 2.
    """
    if max_tokens_per_microbatch < 1:
        raise ValueError(f"max_tokens_per_microbatch must be >= 1, got {max_tokens_per_microbatch}")
    too_long = [(i, n) for i, n in enumerate(lengths) if n > max_tokens_per_microbatch]
    if too_long:
        raise ValueError(
            f"sequences longer than max_tokens_per_microbatch={max_tokens_per_microbatch} (index, length): "
            f"{too_long[:5]}; raise the budget to at least the maximum context length")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        # sorted longest first: a batch's first member is its longest, so its padded size is count x that length
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens_per_microbatch:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def action_token_count(action_masks: Iterable[Sequence[int]]) -> int:
    """Action tokens over all sequences of one optimiser step: the loss's ``norm_tokens``."""
    return sum(sum(m) for m in action_masks)
