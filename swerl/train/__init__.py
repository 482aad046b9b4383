"""Trainer backends behind one protocol: plain torch (one process) and DeepSpeed ZeRO (many).

``make_trainer(model_dir, config)`` picks the backend the config names; both run the shared
micro-batch step of ``swerl.train.step`` and write checkpoints engines load directly.
DeepSpeed is an optional extra (``pip install swerl[deepspeed]``) imported only when used.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from typing import TYPE_CHECKING, Any

from swerl.train.config import (DeepSpeedTrainerConfig, LossConfig, OptimizerConfig, TorchTrainerConfig, TrainerBackend,
                                TrainerConfig, TrainerSettings)

if TYPE_CHECKING:
    from swerl.train.base import ResumeState, TrainBatch, Trainer

# torch's names, imported on first use: the settings above describe a run without importing a framework
_LAZY = {"ResumeState": "base", "TrainBatch": "base", "Trainer": "base", "latest_checkpoint": "checkpoint",
         "step_dir": "checkpoint"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'swerl.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"swerl.train.{_LAZY[name]}"), name)


def _torch(model_dir: str | Path, config: TrainerConfig) -> Trainer:
    from swerl.train.torch_trainer import TorchTrainer

    return TorchTrainer(model_dir, config)


def _deepspeed(model_dir: str | Path, config: TrainerConfig) -> Trainer:
    if importlib.util.find_spec("deepspeed") is None:
        raise ImportError("backend 'deepspeed' needs DeepSpeed, which is not installed: pip install 'swerl[deepspeed]'")
    from swerl.train.deepspeed_trainer import DeepSpeedTrainer

    return DeepSpeedTrainer(model_dir, config)


BACKENDS: dict[str, Callable[[str | Path, TrainerConfig], Trainer]] = {"torch": _torch, "deepspeed": _deepspeed}


def make_trainer(model_dir: str | Path, config: TrainerConfig | None = None) -> Trainer:
    """The one factory of trainers: the backend ``config.trainer`` names (its tag ``backend``), starting from the
    model folder (or hub name) ``model_dir``."""
    config = config or TrainerConfig()
    return BACKENDS[config.trainer.backend](model_dir, config)


__all__ = ["BACKENDS", "DeepSpeedTrainerConfig", "LossConfig", "OptimizerConfig", "ResumeState", "TorchTrainerConfig", "TrainBatch", "Trainer", "TrainerBackend", "TrainerConfig", "TrainerSettings", "latest_checkpoint", "make_trainer", "step_dir"]
