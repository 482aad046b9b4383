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
from typing import Annotated, Any, Literal, Protocol, Union, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator


class OptimizerConfig(BaseModel):
    """AdamW and its learning-rate schedule. Defaults are the paper's DAPO settings; RFT's are a preset
    (``swerl.stages.train.RFT_TRAIN``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(1e-6, gt=0, le=1, description="Peak AdamW learning rate (paper: 1e-6 for DAPO, 5e-6 for RFT).")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="After warm-up: hold the peak ('constant'), or decay to 0 at the run's last step ('cosine', 'linear'; RFT uses cosine).")
    warmup_steps: int = Field(0, ge=0, description="Optimiser steps of linear warm-up from lr / (warmup_steps + 1) to lr "
                              "(a training stage caps it below the run's step count).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2), each in [0, 1).")
    adam_eps: float = Field(1e-8, gt=0, le=1e-2, description="AdamW epsilon added to sqrt(v).")
    weight_decay: float = Field(0.1, ge=0, le=1, description="Decoupled weight decay, applied to matrices only (not to norms or biases).")
    grad_clip: float = Field(1.0, ge=0, description="Clip the global gradient norm to this; 0 disables clipping.")

    @model_validator(mode="after")
    def _betas(self) -> OptimizerConfig:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {self.betas}")
        return self


class LossConfig(BaseModel):
    """The policy loss: DAPO's clip range (clip-higher) and how per-token terms are aggregated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps_low: float = Field(0.2, ge=0, lt=1, description="DAPO lower clip: the ratio is clipped at 1 - eps_low.")
    eps_high: float = Field(0.3, ge=0, le=10, description="DAPO upper clip (clip-higher): the ratio is clipped at 1 + eps_high (0.26 in stage 2).")
    loss_aggregation: Literal["token", "sequence"] = Field(
        "token", description="'token': sum over the step's action tokens / their count (DAPO, the paper); 'sequence': mean per "
        "sequence, then over sequences (GRPO).")
    neg_prob_cap: float = Field(1.0, gt=0, le=1, description="Negative-advantage tokens the sampler drew with probability above "
                                "this get no gradient (they still count in the normaliser, as clipped tokens do). 1.0: every "
                                "token, as the paper. Below 1 keeps a small policy at a high learning rate from unlearning "
                                "its sure tokens (fences, end-of-turn) from failed runs; see swerl.rl.loss.")
    kl_coef: float = Field(0.0, ge=0, le=10, description="GRPO's KL penalty (DeepSeekMath: 0.04): beta times the k3 "
                           "estimate of KL(pi_theta || pi_ref) per action token, aggregated as the policy term. pi_ref is "
                           "the policy that began the iteration (DeepSeekMath's Algorithm 1 resets pi_ref to pi_theta each "
                           "iteration, and an iteration here samples once), so the sampler's log-probs serve and no "
                           "reference model is loaded. 0: no KL term, as DAPO and the paper.")


class TorchTrainerConfig(BaseModel):
    """The torch backend: one process, on the CPU or one GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["torch"] = Field("torch", description="'torch': one process.")
    device: str = Field("auto", description="'cpu', 'cuda', 'cuda:N', or 'auto' (the first GPU if any, else CPU).")


class DeepSpeedTrainerConfig(BaseModel):
    """The DeepSpeed backend: ZeRO data parallelism over every launched process, each on its local rank's GPU
    (or the CPU, over gloo)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["deepspeed"] = Field("deepspeed", description="'deepspeed': ZeRO over every launched process.")
    zero_stage: Literal[1, 2, 3] = Field(3, description="ZeRO stage: 3 partitions weights, gradients and optimiser state.")


TrainerBackend = Annotated[Union[TorchTrainerConfig, DeepSpeedTrainerConfig], Field(discriminator="backend")]

# the fields each backend's config had when they sat flat beside the other trainer settings
_FLAT_BACKEND = {"torch": ("device",), "deepspeed": ("zero_stage",)}


class TrainerSettings(BaseModel):
    """What a user chooses about the trainer: backend (with its own fields), memory, optimiser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trainer: TrainerBackend = Field(default_factory=TorchTrainerConfig, description="The backend, tagged by `backend`: "
                                    "`{backend: torch, device: auto}` or `{backend: deepspeed, zero_stage: 3}`.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Compute dtype: 'auto' is float32 on CPU and bfloat16 on GPU. Master weights and optimiser state stay float32.")
    max_tokens_per_microbatch: int = Field(16384, ge=1, description="Padded tokens (sequences x longest) per forward pass; must hold the longest sequence.")
    logprob_chunk_size: int = Field(1024, ge=1, le=1_000_000, description="Positions whose vocabulary logits exist at once in the chunked log-prob head.")
    logprob_compiled: bool = Field(False, description="Run the log-prob head's per-chunk softmax math through torch.compile (fused kernels; compiles on the first step). Same figures as eager to 1e-5; compare speed with bench/bench_train.py --sections 4 before turning it on.")
    gradient_checkpointing: bool = Field(False, description="Recompute decoder activations in backward (activation memory ~ one layer).")
    checkpoint_keep_attention: bool = Field(False, description="With gradient_checkpointing: keep each layer's attention output and "
                                            "softmax statistics (n x hidden in the compute dtype per layer) so backward recomputes "
                                            "the matmuls and pointwise work but never the attention kernel, most of the recomputation "
                                            "at 16k+ tokens. Same gradients. Torch backend only; works with compile_layers.")
    cudnn_attention: bool = Field(False, description="On a GPU, run attention through cuDNN's kernel, first in SDPA's priority (key "
                                  "and value heads repeated to the query heads', as cuDNN has no grouped-query form): a DAPO step "
                                  "of a ~0.5B Qwen2 at 16k-32k tokens ran 1.22-1.27x faster on an H100. cuDNN plans each new shape once "
                                  "(~16 ms of CPU per attention call), so it pays where micro-batch shapes repeat. Off: flash, "
                                  "memory-efficient or math kernels, never cuDNN's.")
    compile_layers: bool = Field(False, description="torch.compile each decoder layer (regional compilation: one graph, reused by every layer; "
                                 "norms, rotary, SiLU and the autocast casts fuse, and far fewer kernels launch). Compiles on the first "
                                 "step (and once more when sequence lengths first vary). Torch backend only; "
                                 "measure with bench/bench_train.py --sections 4.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW and its learning-rate schedule.")

    @model_validator(mode="before")
    @classmethod
    def _flat_backend(cls, data: Any) -> Any:
        """The older flat form (``backend``, ``device``, ``zero_stage`` beside the other settings, as older YAML
        files and the CLI's options give them) as ``trainer``; the fields the chosen backend has no use for go."""
        if not isinstance(data, Mapping) or not any(k in data for k in ("backend", "device", "zero_stage")):
            return data
        data = dict(data)
        flat = {k: data.pop(k) for k in ("backend", "device", "zero_stage") if k in data}
        if "trainer" in data:
            raise ValueError(f"give the backend as trainer: {{backend: ...}} or as the flat {', '.join(sorted(flat))}, "
                             "not both")
        backend = flat.get("backend", "torch")
        data["trainer"] = {"backend": backend, **{k: flat[k] for k in _FLAT_BACKEND.get(backend, ()) if k in flat}}
        return data

    @model_validator(mode="after")
    def _checkpoint_options(self) -> TrainerSettings:
        if self.checkpoint_keep_attention and not self.gradient_checkpointing:
            raise ValueError("checkpoint_keep_attention chooses what gradient checkpointing keeps; turn gradient_checkpointing "
                             "on, or checkpoint_keep_attention off")
        return self

    @property
    def backend(self) -> str:
        """The backend's tag: ``torch`` or ``deepspeed``."""
        return self.trainer.backend


class TrainerConfig(TrainerSettings):
    """How the policy is optimised: the user's settings plus what a run derives (objective, step count, seed).
    Defaults are the paper's DAPO settings (no KL term, no critic)."""

    objective: Literal["dapo", "sft"] = Field(
        "dapo", description="'dapo': the clipped policy-gradient loss on advantages; 'sft': minus the mean log-prob of the action tokens (rejection fine-tuning).")
    loss: LossConfig = Field(default_factory=LossConfig, description="Clip range (dapo) and token aggregation (both objectives).")
    total_steps: int | None = Field(None, ge=1, description="Optimiser steps of the whole run; required by the decaying schedules.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seeds python, numpy and torch when the trainer starts.")

    @model_validator(mode="after")
    def _consistent(self) -> TrainerConfig:
        schedule, warmup = self.optimizer.lr_schedule, self.optimizer.warmup_steps
        if schedule != "constant" and self.total_steps is None:
            raise ValueError(f"lr_schedule={schedule!r} decays to 0 at total_steps; set total_steps")
        if self.total_steps is not None and warmup >= self.total_steps:
            raise ValueError(f"warmup_steps ({warmup}) must be below total_steps ({self.total_steps})")
        return self


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

    def __post_init__(self) -> None:
        self.input_ids = _sequences("input_ids", self.input_ids, torch.long)
        self.action_mask = _sequences("action_mask", self.action_mask, torch.bool)
        if self.old_logprobs is not None:
            self.old_logprobs = _sequences("old_logprobs", self.old_logprobs, torch.float32)
        if self.advantages is not None:
            self.advantages = torch.as_tensor(self.advantages, dtype=torch.float32).detach().cpu().reshape(-1)
        n = len(self.input_ids)
        if n == 0:
            raise ValueError("a TrainBatch needs at least one sequence")
        for name in ("action_mask", "old_logprobs", "advantages"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} rows, input_ids has {n}")
        for name in ("action_mask", "old_logprobs"):
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
        return TrainBatch(pick(self.input_ids), pick(self.action_mask), pick(self.old_logprobs), adv, self.pad_token_id)

    def padded(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Right-padded [B, T] tensors (``input_ids``, ``attention_mask``, ``action_mask``,
        ``old_logprobs``) and [B] ``advantages``, the absent ones left out."""
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
        if self.advantages is not None:
            out["advantages"] = self.advantages.to(device)
        return out

    def save(self, path: Path) -> Path:
        """Write the batch to one file (``torch.save`` of tensors only), for a trainer in another process."""
        state = {k: getattr(self, k) for k in ("input_ids", "action_mask", "old_logprobs", "advantages")}
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
    """

    config: TrainerConfig
    step: int  # optimiser steps taken so far

    def train_step(self, batch: TrainBatch) -> dict[str, float]: ...

    def save(self, out: Path, *, iteration: int = 0, data_position: Mapping[str, Any] | None = None) -> Path: ...

    def load(self, checkpoint: Path) -> ResumeState: ...

    def close(self) -> None: ...
