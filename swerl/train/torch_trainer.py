"""The plain-torch trainer: one process, CPU or one GPU, AdamW on float32 master weights.

On a GPU the forward pass runs under bf16 autocast (``dtype='auto'``); weights, gradients
and optimiser state stay float32, so a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from swerl.inference.weights import load_checkpoint_into
from swerl.train import checkpoint as ckpt
from swerl.train.attention import attention_implementation
from swerl.train.base import ResumeState, TrainBatch, TrainerConfig
from swerl.train.step import (ActionLogprobModel, accumulate_gradients, checkpoint_decoder_layers, clip_grad_norm,
                              compile_decoder_layers, compute_dtype, finish_metrics, forward_logprobs, learning_rate, param_groups,
                              plan_step, resolve_device)

OPTIMIZER_FILE = "optimizer.pt"


class TorchTrainer:
    """``Trainer`` in one process; see the module docstring."""

    def __init__(self, model_dir: str | Path, config: TrainerConfig | None = None) -> None:
        from swerl.util.model_loading import load_causal_lm

        self.config = config or TrainerConfig()
        if self.config.backend != "torch":
            raise ValueError(f"TorchTrainer runs backend 'torch', the config asks for {self.config.backend!r}; use make_trainer")
        self.source = model_dir
        self.device = resolve_device(self.config.trainer.device)
        dtype = compute_dtype(self.config.dtype, self.device)
        self.autocast_dtype = None if dtype == torch.float32 else dtype
        ckpt.seed_everything(self.config.seed)
        attention = attention_implementation(self.config.cudnn_attention)
        self.policy = load_causal_lm(model_dir, dtype=torch.float32, attn_implementation=attention).to(self.device)
        if self.config.checkpoint_keep_attention:  # before compiling: the checkpoint goes inside each compiled layer
            checkpoint_decoder_layers(self.policy)
        elif self.config.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.config.compile_layers:
            compile_decoder_layers(self.policy)
        self.policy.train()
        self.model = ActionLogprobModel(self.policy, self.config.logprob_chunk_size, self.config.logprob_compiled)
        opt = self.config.optimizer
        # on a GPU the fused kernel: one launch for every parameter's update instead of several per tensor group
        self.optimizer = torch.optim.AdamW(param_groups(self.policy, opt.weight_decay), lr=opt.lr, betas=opt.betas,
                                           eps=opt.adam_eps, fused=self.device.type == "cuda" or None)
        self.step = 0

    def action_logprobs(self, batch: TrainBatch) -> list[torch.Tensor]:
        """See ``Trainer``: on this trainer's device, under its autocast."""
        return forward_logprobs(self.model, self.policy, batch, self.config, self.device, self.autocast_dtype)

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimiser step over ``batch``; returns its metrics."""
        start = time.perf_counter()
        cfg = self.config
        lr = learning_rate(self.step, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        sums = accumulate_gradients(self.model, batch, plan_step(batch, cfg), cfg, torch.Tensor.backward,
                                    self.device, self.autocast_dtype)
        grad_norm = clip_grad_norm(self.policy.parameters(), cfg.optimizer.grad_clip)
        self.optimizer.step()
        self.step += 1
        return finish_metrics(sums, grad_norm, lr, time.perf_counter() - start) | {"step": float(self.step)}

    def save(self, out: Path, *, iteration: int = 0, data_position: Mapping[str, Any] | None = None) -> Path:
        """Write the model folder and the training state to ``out``, atomically."""
        out = Path(out)
        staging = ckpt.begin(out)
        state_dir = staging / ckpt.STATE_DIR
        ckpt.write_hf_folder(self.policy, staging, self.source)
        torch.save(self.optimizer.state_dict(), state_dir / OPTIMIZER_FILE)
        ckpt.save_rng(state_dir, 0)
        ckpt.write_state(state_dir, step=self.step, iteration=iteration, data_position=data_position,
                         config=self.config.model_dump(mode="json"), backend="torch", world_size=1)
        return ckpt.publish(staging, out)

    def load(self, checkpoint: Path) -> ResumeState:
        """Restore weights, optimiser, step and RNG from a checkpoint written by ``save``."""
        checkpoint = Path(checkpoint)
        state = ckpt.read_state(checkpoint)
        optimizer_file = checkpoint / ckpt.STATE_DIR / OPTIMIZER_FILE
        if state["backend"] != "torch" or not optimizer_file.is_file():
            raise ValueError(f"{checkpoint} holds {state['backend']} optimiser state, which TorchTrainer cannot resume; "
                             f"resume it with backend {state['backend']!r}, or start a new run from its model folder")
        load_checkpoint_into(self.policy, checkpoint)
        self.optimizer.load_state_dict(torch.load(optimizer_file, map_location=self.device, weights_only=True))
        ckpt.load_rng(checkpoint / ckpt.STATE_DIR, 0)
        self.step = state["step"]
        return ResumeState(state["step"], state["iteration"], state["data_position"])

    def close(self) -> None:
        """Release the model and optimiser."""
        self.optimizer = None
        self.model = self.policy = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
