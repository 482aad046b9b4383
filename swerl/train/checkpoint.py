"""Checkpoint layout, atomic publication, and the pieces of state every backend saves.

A checkpoint is one folder::

    out/                      a Hugging Face model folder: config.json, *.safetensors,
                              generation_config.json, tokenizer files (from the source model)
    out/trainer_state/        state.json (step, iteration, data_position, config, backend,
                              world size), rng-rank<R>.pt per process, and the backend's
                              optimiser state (optimizer.pt, or deepspeed/ for ZeRO shards)

It is assembled in ``.<name>.partial`` next to ``out`` and renamed into place when
complete, so a visible checkpoint is always whole; a crash leaves at most the partial
folder, which the next save of that name removes. Replacing an existing ``out`` moves the
old one aside first (``.<name>.old``), then removes it.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_DIR = "trainer_state"
STATE_FILE = "state.json"
# What a model folder holds besides weights and config: copied from the source model as is.
TOKENIZER_FILES = re.compile(r"^(tokenizer.*|vocab\..*|merges\.txt|special_tokens_map\.json|added_tokens\.json|"
                             r"chat_template.*|.*\.model|preprocessor_config\.json)$")
STEP_DIR = re.compile(r"^step-(\d+)$")


def staging_dir(out: Path) -> Path:
    """Where ``out`` is assembled; the same path on every process (shared file system)."""
    return out.parent / f".{out.name}.partial"


def begin(out: Path) -> Path:
    """An empty staging folder for ``out``, removing what an earlier crash left there."""
    staging = staging_dir(out)
    if staging.exists():
        shutil.rmtree(staging)
    (staging / STATE_DIR).mkdir(parents=True)
    return staging


def publish(staging: Path, out: Path) -> Path:
    """Rename the complete ``staging`` folder to ``out`` (replacing an older ``out``)."""
    old = out.parent / f".{out.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    if old.exists():
        shutil.rmtree(old)
    return out


def step_dir(root: Path, step: int) -> Path:
    """The conventional name of the checkpoint after ``step`` optimiser steps: root/step-000012."""
    return Path(root) / f"step-{step:06d}"


def step_checkpoints(root: Path) -> list[Path]:
    """The published ``step-N`` checkpoints under ``root``, oldest first (partial ones are hidden)."""
    root = Path(root)
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()] if root.is_dir() else []
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: Path) -> Path | None:
    """The ``step-N`` checkpoint under ``root`` with the largest N, or None."""
    found = step_checkpoints(root)
    return found[-1] if found else None


def copy_tokenizer_files(source: str | Path, dest: Path) -> None:
    """Copy the tokenizer and chat template of ``source`` (a folder, or a hub name) into ``dest``."""
    source_dir = Path(source)
    if source_dir.is_dir():
        for f in source_dir.iterdir():
            if f.is_file() and TOKENIZER_FILES.match(f.name):
                shutil.copy2(f, dest / f.name)
        return
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(source)).save_pretrained(dest)


def write_hf_folder(model: torch.nn.Module, dest: Path, source: str | Path,
                    state_dict: Mapping[str, torch.Tensor] | None = None) -> None:
    """``save_pretrained`` (safetensors) of ``model`` (or of ``state_dict`` with ``model``'s config), plus tokenizer files."""
    model.save_pretrained(dest, state_dict=dict(state_dict) if state_dict is not None else None, safe_serialization=True)
    copy_tokenizer_files(source, dest)


def rng_state() -> dict[str, torch.Tensor]:
    """Python, numpy, torch and CUDA generator states, as tensors (loadable with weights_only)."""
    version, mt, gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()  # the legacy global generator: MT19937
    state = {
        "python_mt": torch.tensor(mt, dtype=torch.int64),
        "python_meta": torch.tensor([version, gauss is not None], dtype=torch.int64),
        "python_gauss": torch.tensor([gauss or 0.0], dtype=torch.float64),
        "numpy_keys": torch.from_numpy(np_keys.astype(np.int64)),
        "numpy_meta": torch.tensor([np_pos, np_has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([np_gauss], dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    return state


def set_rng_state(state: Mapping[str, torch.Tensor]) -> None:
    """Restore what ``rng_state`` captured."""
    version, has_gauss = state["python_meta"].tolist()
    gauss = float(state["python_gauss"][0]) if has_gauss else None
    random.setstate((version, tuple(state["python_mt"].tolist()), gauss))
    pos, np_has_gauss = state["numpy_meta"].tolist()
    np.random.set_state(("MT19937", state["numpy_keys"].numpy().astype(np.uint32), pos, np_has_gauss,
                         float(state["numpy_gauss"][0])))
    torch.set_rng_state(state["torch"])
    cuda = [state[k] for k in sorted((k for k in state if k.startswith("cuda")), key=lambda k: int(k[4:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def save_rng(state_dir: Path, rank: int) -> None:
    torch.save(rng_state(), state_dir / f"rng-rank{rank}.pt")


def load_rng(state_dir: Path, rank: int) -> None:
    path = state_dir / f"rng-rank{rank}.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: was the checkpoint written by a run with fewer processes?")
    set_rng_state(torch.load(path, weights_only=True))


def write_state(state_dir: Path, *, step: int, iteration: int, data_position: Mapping[str, Any] | None,
                config: Mapping[str, Any], backend: str, world_size: int) -> None:
    """``state.json``: the counters and the caller's data position (must be JSON)."""
    record = {"step": step, "iteration": iteration, "data_position": dict(data_position or {}),
              "backend": backend, "world_size": world_size, "config": dict(config)}
    try:
        text = json.dumps(record, indent=2, sort_keys=True)
    except TypeError as e:
        raise TypeError(f"data_position must be JSON-serialisable (str, int, float, list, dict): {e}") from e
    (state_dir / STATE_FILE).write_text(text + "\n", encoding="utf-8")


def read_state(checkpoint: Path) -> dict[str, Any]:
    """``state.json`` of a checkpoint, with a clear error when the folder is not one."""
    path = Path(checkpoint) / STATE_DIR / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint} is not a trainer checkpoint: {path} is missing "
                                f"(a model folder without trainer state can only start a new run)")
    return json.loads(path.read_text(encoding="utf-8"))
