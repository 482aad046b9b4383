"""The trainer seam: one ``Trainer`` protocol, its config, and the batch it trains on.

Two siblings implement it: ``TorchTrainer`` (one process, CPU or one GPU) and
``DeepSpeedTrainer`` (ZeRO-2/3, one or many processes). Both run the same micro-batch step
(``swerl.train.step``) and write the same checkpoint layout (``swerl.train.checkpoint``), so
a run can move between them and any engine can load what either writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from swerl.train.config import (DeepSpeedTrainerConfig, LossConfig, OptimizerConfig, TorchTrainerConfig,  # noqa: F401
                                TrainerBackend, TrainerConfig, TrainerSettings)


def _sequences(name: str, rows: Sequence | torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    if isinstance(rows, torch.Tensor) and rows.dim() != 2:
        raise ValueError(f"{name} must be [B, T] or a list of sequences, got shape {tuple(rows.shape)}")
    return [torch.as_tensor(r, dtype=dtype).detach().cpu().reshape(-1) for r in rows]


@dataclass
class TrainBatch:
    """One optimiser step's sequences, unpadded: each row is prompt + response of one trajectory.

    ``action_mask`` is 1 on policy-sampled tokens (the only ones in the loss), 0 on the prompt
    and on environment observations. ``old_logprobs`` holds the sampler's log-prob at each
    action token (0 elsewhere: ``Trajectory.logprobs``'s layout). ``advantages`` has one value
    per sequence. The ``sft`` objective needs neither. Build from padded tensors with
    ``from_padded``.
    """

    input_ids: list[torch.Tensor]  # B x [T_b] int64
    action_mask: list[torch.Tensor]  # B x [T_b] bool
    old_logprobs: list[torch.Tensor] | None = None  # B x [T_b] float32
    advantages: torch.Tensor | None = None  # [B] float32
    pad_token_id: int = 0
    meta: dict[str, Any] = field(default_factory=dict)  # caller's bookkeeping (ids, iteration); not used in the math
    prox_logprobs: list[torch.Tensor] | None = None  # B x [T_b] float32: the update's start policy (off-policy data only)

    def __post_init__(self) -> None:
        self.input_ids = _sequences("input_ids", self.input_ids, torch.long)
        self.action_mask = _sequences("action_mask", self.action_mask, torch.bool)
        if self.old_logprobs is not None:
            self.old_logprobs = _sequences("old_logprobs", self.old_logprobs, torch.float32)
        if self.prox_logprobs is not None:
            self.prox_logprobs = _sequences("prox_logprobs", self.prox_logprobs, torch.float32)
        if self.advantages is not None:
            self.advantages = torch.as_tensor(self.advantages, dtype=torch.float32).detach().cpu().reshape(-1)
        n = len(self.input_ids)
        if n == 0:
            raise ValueError("a TrainBatch needs at least one sequence")
        for name in ("action_mask", "old_logprobs", "advantages", "prox_logprobs"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} rows, input_ids has {n}")
        for name in ("action_mask", "old_logprobs", "prox_logprobs"):
            rows = getattr(self, name)
            for i, row in enumerate(rows or []):
                if row.numel() != self.input_ids[i].numel():
                    raise ValueError(f"sequence {i}: {name} has {row.numel()} entries, input_ids {self.input_ids[i].numel()}")
        for i, m in enumerate(self.action_mask):
            if m.numel() < 2 or m[0]:
                raise ValueError(f"sequence {i} has {m.numel()} tokens and action_mask[0]={bool(m[0]) if m.numel() else None}: "
                                 f"every sequence starts with a prompt token and has at least 2 tokens")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        """Tokens per sequence."""
        return [t.numel() for t in self.input_ids]

    @property
    def action_tokens(self) -> int:
        """Action tokens in the whole batch."""
        return int(sum(int(m.sum()) for m in self.action_mask))

    @classmethod
    def from_padded(cls, input_ids: torch.Tensor, action_mask: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    old_logprobs: torch.Tensor | None = None, advantages: torch.Tensor | Sequence[float] | None = None,
                    pad_token_id: int = 0) -> TrainBatch:
        """From right-padded [B, T] tensors; ``attention_mask`` (1 on real tokens) gives each row's length."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        counts = attention_mask.sum(-1, keepdim=True)
        if not torch.equal(attention_mask.bool(), torch.arange(input_ids.shape[1]) < counts):
            raise ValueError("attention_mask must be right padding: ones, then zeros")
        lengths = counts.squeeze(-1).tolist()

        def cut(x: torch.Tensor | None) -> list[torch.Tensor] | None:
            return None if x is None else [row[:n] for row, n in zip(x, lengths)]

        return cls(cut(input_ids), cut(action_mask), cut(old_logprobs), advantages, pad_token_id)

    def select(self, indices: Sequence[int]) -> TrainBatch:
        """The sub-batch of the given rows, in that order."""
        def pick(rows):
            return None if rows is None else [rows[i] for i in indices]

        adv = None if self.advantages is None else self.advantages[list(indices)]
        return TrainBatch(pick(self.input_ids), pick(self.action_mask), pick(self.old_logprobs), adv, self.pad_token_id,
                          prox_logprobs=pick(self.prox_logprobs))

    def padded(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Right-padded [B, T] tensors (``input_ids``, ``attention_mask``, ``action_mask``,
        ``old_logprobs``, ``prox_logprobs``) and [B] ``advantages``, the absent ones left out."""
        width = max(self.lengths)

        def pad(rows: list[torch.Tensor], value) -> torch.Tensor:
            out = torch.full((len(rows), width), value, dtype=rows[0].dtype)
            for i, r in enumerate(rows):
                out[i, :r.numel()] = r
            return out.to(device)

        out = {"input_ids": pad(self.input_ids, self.pad_token_id), "action_mask": pad(self.action_mask, False),
               "attention_mask": pad([torch.ones(n, dtype=torch.long) for n in self.lengths], 0)}
        if self.old_logprobs is not None:
            out["old_logprobs"] = pad(self.old_logprobs, 0.0)
        if self.prox_logprobs is not None:
            out["prox_logprobs"] = pad(self.prox_logprobs, 0.0)
        if self.advantages is not None:
            out["advantages"] = self.advantages.to(device)
        return out

    def save(self, path: Path) -> Path:
        """Write the batch to one file (``torch.save`` of tensors only), for a trainer in another process."""
        state = {k: getattr(self, k) for k in ("input_ids", "action_mask", "old_logprobs", "advantages", "prox_logprobs")}
        torch.save({**{k: v for k, v in state.items() if v is not None}, "pad_token_id": self.pad_token_id}, path)
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> TrainBatch:
        """Read a file written by ``save``."""
        return cls(**torch.load(path, weights_only=True))


@dataclass(frozen=True)
class ResumeState:
    """What ``Trainer.load`` hands back to the caller's loop."""

    step: int  # optimiser steps taken
    iteration: int  # the caller's outer-loop counter at save time
    data_position: dict[str, Any]  # the caller's place in its data (file, offset, epoch, ...)


@runtime_checkable
class Trainer(Protocol):
    """Anything that takes optimiser steps on ``TrainBatch``es and checkpoints exactly.

    ``train_step`` runs one optimiser step over the whole batch (split into micro-batches by
    token budget; the loss is normalised by the batch's action tokens however it is split).
    ``save(out)`` writes ``out`` atomically: a Hugging Face model folder that engines load
    (``HFEngine(HFEngineConfig(model=out))``, ``engine.load_weights(out, version)``) plus ``out/trainer_state``;
    ``load(out)`` restores weights, optimiser, step, RNG and the caller's position exactly.
    ``action_logprobs(batch)`` gives each sequence's action-token log-probs under the weights it holds (the layout of
    ``old_logprobs``), computed as its own forward pass is (device, compute dtype, ZeRO partitions), without a gradient;
    every process passes the same batch.
    """

    config: TrainerConfig
    step: int  # optimiser steps taken so far

    def train_step(self, batch: TrainBatch) -> dict[str, float]: ...

    def save(self, out: Path, *, iteration: int = 0, data_position: Mapping[str, Any] | None = None) -> Path: ...

    def load(self, checkpoint: Path) -> ResumeState: ...

    def action_logprobs(self, batch: TrainBatch) -> list[torch.Tensor]: ...

    def close(self) -> None: ...
