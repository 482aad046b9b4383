"""Loading a checkpoint folder's weights into a live model, strictly.

A trainer writes Hugging Face checkpoints (``*.safetensors``, possibly sharded); engines
read them back in place. A name or shape that does not match is an error, never a silent
partial load: serving half-updated weights would poison every trajectory after it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from swerl.inference.base import EngineError


def checkpoint_tensors(checkpoint_dir: Path):
    """Yield (name, tensor) from every safetensors file of a checkpoint folder."""
    from safetensors import safe_open

    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not checkpoint_dir.is_dir():
        raise EngineError(f"checkpoint folder {checkpoint_dir} does not exist")
    if not files:
        raise EngineError(f"no *.safetensors in {checkpoint_dir}: save the checkpoint with save_pretrained(safe_serialization=True)")
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)


def load_checkpoint_into(model: torch.nn.Module, checkpoint_dir: Path) -> None:
    """Copy the checkpoint's tensors into ``model``; raise EngineError on any mismatch."""
    params = dict(model.state_dict())
    seen: set[str] = set()
    staged: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name, tensor in checkpoint_tensors(checkpoint_dir):
        if name not in params:
            raise EngineError(f"{checkpoint_dir}: tensor {name!r} is not in the served model ({type(model).__name__}); wrong architecture?")
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise EngineError(f"{checkpoint_dir}: {name} has shape {tuple(tensor.shape)}, the model expects {tuple(params[name].shape)}")
        staged.append((params[name], tensor))
        seen.add(name)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = set(params) - seen - tied
    if missing:
        raise EngineError(f"{checkpoint_dir} lacks {len(missing)} tensors of the model, e.g. {sorted(missing)[:3]}")
    with torch.no_grad():  # copy only after every check passed: all or nothing
        for dst, src in staged:
            dst.copy_(src.to(device=dst.device, dtype=dst.dtype))
