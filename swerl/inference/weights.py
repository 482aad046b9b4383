"""Reading a Hugging Face checkpoint folder, strictly: every engine checks one here before it
touches its model.

A trainer writes Hugging Face checkpoints (``config.json`` and ``*.safetensors``, possibly
sharded); engines read them back in place. A missing file, a file cut short, or a tensor
name or shape that does not match the served model is an EngineError before anything is
loaded, never a silent partial load: serving half-updated weights would poison every
trajectory after it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.inference.base import EngineError

if TYPE_CHECKING:  # torch only where tensors are read: the HTTP engine checks folders without it
    import torch

TIED_HEAD = "lm_head.weight"  # absent from checkpoints of models that tie it to the embeddings
# Config keys that fix the shapes of a model's tensors: a checkpoint must agree on all of them.
SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")

Shapes = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder that passed ``read_checkpoint``: its config and its tensors' shapes."""

    path: Path
    config: dict
    shapes: dict[str, tuple[int, ...]]

    @property
    def tied(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))


def read_config(folder: Path) -> dict:
    """``config.json`` of a Hugging Face model folder; EngineError when it is missing or not a JSON object."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise EngineError(f"{folder} is not a Hugging Face model folder: no config.json (save checkpoints with save_pretrained)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EngineError(f"{path} is unreadable: {e}") from e
    if not isinstance(config, dict):
        raise EngineError(f"{path} is not a JSON object")
    return config


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} from the headers of a folder's ``*.safetensors`` files (no tensor is
    read); empty when there are none. A file shorter than its header promises (a checkpoint
    still being written, or cut short) is an EngineError."""
    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            size = f.stat().st_size
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise EngineError(f"{f} is not a readable safetensors file: {e}") from e
        end = 8 + n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            shapes[name] = tuple(meta["shape"])
            end = max(end, 8 + n + meta["data_offsets"][1])
        if size < end:
            raise EngineError(f"{f} is truncated: {size} bytes, its header describes {end}")
    return shapes


def read_checkpoint(folder: str | Path) -> Checkpoint:
    """The folder's config and tensor shapes, after checking it holds complete safetensors weights.

    Checked before any engine reloads: a folder without weights leaves a vLLM server's model
    half-initialised (vLLM 0.32 then dies at the next request).
    """
    path = Path(folder)
    if not path.is_dir():
        raise EngineError(f"checkpoint folder {path} does not exist")
    if not any(path.glob("*.safetensors")):
        raise EngineError(f"no *.safetensors in {path}: save the checkpoint with save_pretrained(safe_serialization=True)")
    config = read_config(path)
    return Checkpoint(path, config, tensor_shapes(path))


def check_same_model(checkpoint: Checkpoint, served_config: Mapping) -> None:
    """EngineError unless ``checkpoint`` has the served model's architecture and shape-setting config."""
    new = checkpoint.config
    if new.get("architectures") != served_config.get("architectures"):
        raise EngineError(f"{checkpoint.path} is a {new.get('architectures')} checkpoint, the engine serves "
                          f"{served_config.get('architectures')}")
    diffs = {k: (new.get(k), served_config.get(k)) for k in SHAPE_KEYS
             if new.get(k) is not None and served_config.get(k) is not None and new[k] != served_config[k]}
    if diffs:
        raise EngineError(f"{checkpoint.path} does not fit the served model; (checkpoint, served) differ on {diffs}")


def check_tensors(checkpoint: Checkpoint, served: Shapes, tied: bool) -> None:
    """EngineError unless ``checkpoint`` has exactly the served tensors, with their shapes (a tied head may be absent)."""
    exempt = {TIED_HEAD} if tied else set()
    missing = set(served) - set(checkpoint.shapes) - exempt
    extra = set(checkpoint.shapes) - set(served) - exempt
    shapes = {k: (checkpoint.shapes[k], served[k]) for k in sorted(set(checkpoint.shapes) & set(served))
              if tuple(checkpoint.shapes[k]) != tuple(served[k])}
    if missing or extra or shapes:
        raise EngineError(
            f"{checkpoint.path}'s tensors do not match the served model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(extra)[:3]}, shape (checkpoint, served) {dict(list(shapes.items())[:3])}"
        )


def checkpoint_tensors(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from every safetensors file of a checkpoint folder."""
    yield from _tensors(read_checkpoint(folder).path)


def load_checkpoint_into(model: torch.nn.Module, folder: str | Path) -> None:
    """Copy the checkpoint's tensors into ``model``; EngineError on any mismatch, and then nothing is copied."""
    import torch

    params = dict(model.state_dict())
    checkpoint = read_checkpoint(folder)
    check_tensors(checkpoint, {k: tuple(v.shape) for k, v in params.items()},
                  tied=bool(getattr(model.config, "tie_word_embeddings", False)))
    staged = [(params[name], tensor) for name, tensor in _tensors(checkpoint.path)]
    with torch.no_grad():  # copy only after every check passed: all or nothing
        for dst, src in staged:
            dst.copy_(src.to(device=dst.device, dtype=dst.dtype))


def _tensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)
