"""Checkpoints of a policy as a trainer would write them, without training: every weight moved."""

from __future__ import annotations

from pathlib import Path


def moved_checkpoint(model_dir: Path, out: Path, seed: int, scale: float = 0.3) -> Path:
    """``model_dir``'s weights plus seeded Gaussian noise of std ``scale``, saved with save_pretrained at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    model.save_pretrained(out)
    return out
