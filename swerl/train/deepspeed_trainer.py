"""The DeepSpeed trainer: ZeRO-1/2/3 data parallelism over every launched process.

Same ``Trainer`` interface and the same step as ``TorchTrainer``. The optimiser is torch's
AdamW handed to ``deepspeed.initialize`` (ZeRO runs it on each process's float32 partition),
so the update is the torch backend's math; on a GPU the model computes in bf16 with float32
master weights. One process needs no launcher (a local process group is made); several
come from ``torchrun`` or the ``deepspeed`` launcher (see ``swerl.train.ds_worker``). On CPU
processes talk over gloo.

DeepSpeed's gradient-accumulation bookkeeping is switched off
(``managed_gradient_accumulation: false``): a step runs however many micro-batches the token
budget gives, each ``engine.backward``, then one ``engine.step``.

Checkpoints: the model folder is gathered parameter by parameter onto rank 0 (float32 on
CPU, the compute dtype on GPU) and written with ``save_pretrained``; the exact state (fp32
master weights and optimiser partitions) is DeepSpeed's own ``save_checkpoint`` under
``trainer_state/deepspeed``, and resuming needs the same number of processes.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from swerl.train import checkpoint as ckpt
from swerl.train.attention import attention_implementation
from swerl.train.base import DeepSpeedTrainerConfig, ResumeState, TrainBatch, TrainerConfig
from swerl.train.step import (ActionLogprobModel, accumulate_gradients, compute_dtype, finish_metrics, forward_logprobs,
                              learning_rate, param_groups, plan_step)

DEEPSPEED_DIR = "deepspeed"
DEEPSPEED_TAG = "state"


def deepspeed_config(cfg: TrainerConfig, dtype: torch.dtype) -> dict[str, Any]:
    """The DeepSpeed config dict for ``cfg``: ZeRO stage, clipping, bf16, caller-owned accumulation."""
    zero: dict[str, Any] = {"stage": cfg.trainer.zero_stage, "overlap_comm": False, "contiguous_gradients": True}
    if cfg.trainer.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = False  # the trainer gathers the model folder itself
    return {
        "train_micro_batch_size_per_gpu": 1,  # bookkeeping only: micro-batches are packed by tokens, not counted
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,  # engine.step() is the boundary, whatever the micro-batch count
        "gradient_clipping": cfg.optimizer.grad_clip,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # torch AdamW: the torch backend's exact update
        "bf16": {"enabled": dtype == torch.bfloat16},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> tuple[int, int, int]:
    """Join the launcher's process group, or make a one-process one; returns (rank, world size, local rank)."""
    import deepspeed
    import torch.distributed as dist

    if "RANK" not in os.environ:  # not launched by torchrun / deepspeed: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    if not dist.is_initialized():
        deepspeed.init_distributed(auto_mpi_discovery=False)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))


def _load_policy(model_dir: str | Path, ds_config: dict[str, Any], attn_implementation: str | None) -> torch.nn.Module:
    """The model in float32; under ZeRO-3 loaded straight into partitions (zero.Init), never a full copy per process."""
    from swerl.util.model_loading import load_causal_lm
    from transformers.integrations import HfDeepSpeedConfig

    # transformers reads ZeRO-3 from a process-wide weak reference to this object: keep it alive
    # for the load only, so later from_pretrained calls in this process (an engine) load normally
    zero3 = HfDeepSpeedConfig(ds_config) if ds_config["zero_optimization"]["stage"] == 3 else None
    try:
        return load_causal_lm(model_dir, dtype=torch.float32, attn_implementation=attn_implementation)
    finally:
        del zero3


class DeepSpeedTrainer:
    """``Trainer`` over ``deepspeed.initialize``; see the module docstring."""

    def __init__(self, model_dir: str | Path, config: TrainerConfig | None = None) -> None:
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        self.config = cfg = config or TrainerConfig(trainer=DeepSpeedTrainerConfig())
        if cfg.backend != "deepspeed":
            raise ValueError(f"DeepSpeedTrainer runs backend 'deepspeed', the config asks for {cfg.backend!r}; use make_trainer")
        if cfg.compile_layers:
            raise ValueError("compile_layers is a torch-backend option: ZeRO's parameter hooks do not go through "
                             "compiled layers; turn it off for backend 'deepspeed'")
        if cfg.checkpoint_keep_attention:
            raise ValueError("checkpoint_keep_attention is a torch-backend option; turn it off for backend 'deepspeed' "
                             "(plain gradient_checkpointing works there)")
        self.source = model_dir
        self.rank, self.world_size, local_rank = init_distributed()
        accelerator = get_accelerator()  # DeepSpeed's own choice: the local rank's GPU, or the CPU
        self.device = torch.device(accelerator.device_name(local_rank))
        if self.device.type != "cpu":
            accelerator.set_device(local_rank)
        ds_config = deepspeed_config(cfg, compute_dtype(cfg.dtype, self.device))
        ckpt.seed_everything(cfg.seed)
        self._zero3 = cfg.trainer.zero_stage == 3
        self.policy = _load_policy(model_dir, ds_config, attention_implementation(cfg.cudnn_attention))
        if cfg.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.policy.train()
        model = ActionLogprobModel(self.policy, cfg.logprob_chunk_size, cfg.logprob_compiled)
        if self._zero3:  # the chunked head reads the head's weight outside the head's forward
            deepspeed.zero.register_external_parameter(model, self.policy.get_output_embeddings().weight)
        opt = cfg.optimizer
        optimizer = torch.optim.AdamW(param_groups(self.policy, opt.weight_decay), lr=opt.lr, betas=opt.betas, eps=opt.adam_eps)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
        self.step = 0

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimiser step; every process passes the same global batch and takes its share."""
        start = time.perf_counter()
        lr = learning_rate(self.step, self.config)
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr
        plan = plan_step(batch, self.config, self.rank, self.world_size)
        sums = accumulate_gradients(self.engine, batch, plan, self.config, self.engine.backward, self.device)
        self.engine.step()
        grad_norm = float(self.engine.get_global_grad_norm())
        self.step += 1
        return finish_metrics(self._sum_over_processes(sums), grad_norm, lr, time.perf_counter() - start) | {"step": float(self.step)}

    def action_logprobs(self, batch: TrainBatch) -> list[torch.Tensor]:
        """See ``Trainer``: through the engine (bf16 on a GPU, ZeRO-3 gathering each layer's partitions). Collective."""
        return forward_logprobs(self.engine, self.policy, batch, self.config, self.device)

    def _sum_over_processes(self, sums: dict[str, float]) -> dict[str, float]:
        import torch.distributed as dist

        keys = sorted(sums)
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(values)
        return dict(zip(keys, values.tolist()))

    def _gathered_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The full model on rank 0 (None elsewhere), one parameter gathered at a time. Collective."""
        import deepspeed

        if self.rank != 0:
            for param in self.policy.parameters():
                with deepspeed.zero.GatheredParameters([param], modifier_rank=None, enabled=self._zero3):
                    pass
            return None
        state: dict[str, torch.Tensor] = {}
        for name, param in self.policy.named_parameters():  # a tied weight is listed once
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None, enabled=self._zero3):
                state[name] = param.detach().to("cpu", copy=True)
        for prefix, module in self.policy.named_modules():  # buffers are never partitioned
            for name, buf in module.named_buffers(recurse=False):
                if name not in module._non_persistent_buffers_set:
                    state[f"{prefix}.{name}" if prefix else name] = buf.detach().to("cpu", copy=True)
        return state

    def save(self, out: Path, *, iteration: int = 0, data_position: Mapping[str, Any] | None = None) -> Path:
        """Write the model folder and the exact training state to ``out``, atomically. Collective."""
        import torch.distributed as dist

        out = Path(out)
        staging = ckpt.staging_dir(out)
        if self.rank == 0:
            ckpt.begin(out)
        dist.barrier()
        state_dict = self._gathered_state_dict()
        if self.rank == 0:
            ckpt.write_hf_folder(self.policy, staging, self.source, state_dict)
        self.engine.save_checkpoint(str(staging / ckpt.STATE_DIR / DEEPSPEED_DIR), tag=DEEPSPEED_TAG, save_latest=False)
        ckpt.save_rng(staging / ckpt.STATE_DIR, self.rank)
        dist.barrier()
        if self.rank == 0:
            ckpt.write_state(staging / ckpt.STATE_DIR, step=self.step, iteration=iteration, data_position=data_position,
                             config=self.config.model_dump(mode="json"), backend="deepspeed", world_size=self.world_size)
            ckpt.publish(staging, out)
        dist.barrier()
        return out

    def load(self, checkpoint: Path) -> ResumeState:
        """Restore weights, optimiser partitions, step and RNG from a checkpoint of this backend. Collective."""
        checkpoint = Path(checkpoint)
        state = ckpt.read_state(checkpoint)
        if state["backend"] != "deepspeed":
            raise ValueError(f"{checkpoint} holds {state['backend']} optimiser state, which DeepSpeedTrainer cannot resume; "
                             f"resume it with backend {state['backend']!r}, or start a new run from its model folder")
        if state["world_size"] != self.world_size:
            raise ValueError(f"{checkpoint} was written by {state['world_size']} processes, this run has {self.world_size}; "
                             f"resume with the same number of processes")
        path, _ = self.engine.load_checkpoint(str(checkpoint / ckpt.STATE_DIR / DEEPSPEED_DIR), tag=DEEPSPEED_TAG,
                                              load_optimizer_states=True, load_lr_scheduler_states=False)
        if path is None:
            raise FileNotFoundError(f"DeepSpeed found no checkpoint under {checkpoint / ckpt.STATE_DIR / DEEPSPEED_DIR}")
        ckpt.load_rng(checkpoint / ckpt.STATE_DIR, self.rank)
        self.step = state["step"]
        return ResumeState(state["step"], state["iteration"], state["data_position"])

    def close(self) -> None:
        """Free the engine; the process group stays (it belongs to the launcher)."""
        self.engine = self.optimizer = self.policy = None
