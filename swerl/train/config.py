"""The trainer's settings: which backend, the optimiser, the loss, and what a run derives. Pydantic only,
no torch, so a command line or a form can describe them without importing a framework."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.util.settings import DeviceSettings, DtypeSettings, SeedSettings


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
    is_cap: float = Field(2.0, ge=1, le=1000, description="Off-policy data only (a trajectory sampled by an older policy "
                          "than the update's start): the cap of its tokens' importance weight pi_prox / pi_behav "
                          "(decoupled PPO's truncation; see swerl.rl.loss). Synchronous data is weighted 1.")


class TorchTrainerConfig(DeviceSettings):
    """The torch backend: one process, on the CPU or one GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["torch"] = Field("torch", description="'torch': one process.")


class DeepSpeedTrainerConfig(BaseModel):
    """The DeepSpeed backend: ZeRO data parallelism over every launched process, each on its local rank's GPU
    (or the CPU, over gloo)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["deepspeed"] = Field("deepspeed", description="'deepspeed': ZeRO over every launched process.")
    zero_stage: Literal[1, 2, 3] = Field(3, description="ZeRO stage: 3 partitions weights, gradients and optimiser state.")


TrainerBackend = Annotated[Union[TorchTrainerConfig, DeepSpeedTrainerConfig], Field(discriminator="backend")]

# the fields each backend's config had when they sat flat beside the other trainer settings
_FLAT_BACKEND = {"torch": ("device",), "deepspeed": ("zero_stage",)}


class TrainerSettings(DtypeSettings):
    """What a user chooses about the trainer: backend (with its own fields), compute dtype ('auto': float32 on CPU,
    bfloat16 on GPU; float16 is refused, as there is no loss scaling; master weights and optimiser state stay float32),
    memory, optimiser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trainer: TrainerBackend = Field(default_factory=TorchTrainerConfig, description="The backend, tagged by `backend`: "
                                    "`{backend: torch, device: auto}` or `{backend: deepspeed, zero_stage: 3}`.")
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
    def _no_float16(self) -> TrainerSettings:
        if self.dtype == "float16":
            raise ValueError("dtype float16: the trainer has no loss scaling: use bfloat16 or float32")
        return self

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


class TrainerConfig(TrainerSettings, SeedSettings):
    """How the policy is optimised: the user's settings plus what a run derives (objective, step count, seed: it seeds
    python, numpy and torch when the trainer starts). Defaults are the paper's DAPO settings (no KL term, no critic)."""

    objective: Literal["dapo", "sft"] = Field(
        "dapo", description="'dapo': the clipped policy-gradient loss on advantages; 'sft': minus the mean log-prob of the action tokens (rejection fine-tuning).")
    loss: LossConfig = Field(default_factory=LossConfig, description="Clip range (dapo) and token aggregation (both objectives).")
    total_steps: int | None = Field(None, ge=1, description="Optimiser steps of the whole run; required by the decaying schedules.")

    @model_validator(mode="after")
    def _consistent(self) -> TrainerConfig:
        schedule, warmup = self.optimizer.lr_schedule, self.optimizer.warmup_steps
        if schedule != "constant" and self.total_steps is None:
            raise ValueError(f"lr_schedule={schedule!r} decays to 0 at total_steps; set total_steps")
        if self.total_steps is not None and warmup >= self.total_steps:
            raise ValueError(f"warmup_steps ({warmup}) must be below total_steps ({self.total_steps})")
        return self
