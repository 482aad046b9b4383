"""A policy shipped in the repository, and the proof of where it came from.

The main job starts from a warm-started tiny policy instead of spending half an hour making
one. It is never made by hand: a pipeline run of a recipe (``deployments/warm-start.yaml``)
trains it, and :func:`ship_policy` copies that run's warm-start checkpoint (the files an
engine loads, not the optimiser state) next to a ``recipe.json`` that names the command, the
recipe file's digest, the library versions and each file's sha256. :func:`weight_gap` compares
a regenerated checkpoint with the shipped one tensor by tensor.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from swerl.tracking.lineage import file_digest

#: What an engine or trainer loads from a checkpoint folder; the trainer's own state stays behind.
POLICY_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "chat_template.jinja")
RECIPE = "recipe.json"


class ShipError(ValueError):
    """The run or the shipped folder is not what shipping or checking needs."""


def warm_start_checkpoint(run_dir: Path) -> Path:
    """The final warm-start checkpoint of a pipeline run folder; ShipError naming what is missing."""
    final = Path(run_dir) / "warm-start" / "train" / "final"
    if not (final / "model.safetensors").is_file():
        raise ShipError(f"{run_dir} has no finished warm start ({final} holds no model.safetensors); run the recipe "
                        "to its end first: swerl pipeline run --params deployments/warm-start.yaml")
    return final.resolve()


def ship_policy(run_dir: Path, out: Path, recipe_file: Path, command: str, tolerance: float) -> dict:
    """Copy ``run_dir``'s warm-start checkpoint into ``out`` (replaced whole) with its ``recipe.json``; return that."""
    import torch
    import transformers

    checkpoint = warm_start_checkpoint(run_dir)
    missing = [name for name in POLICY_FILES if not (checkpoint / name).is_file()]
    if missing:
        raise ShipError(f"checkpoint {checkpoint} lacks {missing}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    staging.chmod(0o755)  # a folder in the repository, not a private temp dir
    for name in POLICY_FILES:
        shutil.copyfile(checkpoint / name, staging / name)
    recipe = {
        "command": command,
        "recipe": Path(recipe_file).as_posix(),
        "recipe_sha256": file_digest(Path(recipe_file)),
        "checkpoint": checkpoint.name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tolerance": tolerance,
        "files": {name: file_digest(staging / name) for name in POLICY_FILES},
    }
    (staging / RECIPE).write_text(json.dumps(recipe, indent=2) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return recipe


def check_shipped(folder: Path) -> dict:
    """The shipped folder's recipe, after checking every file against the digest it records; ShipError otherwise."""
    folder = Path(folder)
    try:
        recipe = json.loads((folder / RECIPE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ShipError(f"{folder / RECIPE} is missing or unreadable: {e}") from e
    changed = [name for name, digest in recipe["files"].items() if not (folder / name).is_file() or file_digest(folder / name) != digest]
    extra = sorted(p.name for p in folder.iterdir() if p.name not in recipe["files"] and p.name != RECIPE)
    if changed or extra:
        raise ShipError(f"{folder} is not what its recipe made: changed or missing {changed}, not made by it {extra}; "
                        f"remake it with {recipe['command']}")
    return recipe


def weight_gap(a: Path, b: Path) -> float:
    """The largest |difference| between two checkpoints' tensors; ShipError when their names or shapes differ."""
    from safetensors.torch import load_file

    left, right = load_file(str(Path(a) / "model.safetensors")), load_file(str(Path(b) / "model.safetensors"))
    if left.keys() != right.keys():
        raise ShipError(f"the checkpoints hold different tensors: {sorted(left.keys() ^ right.keys())[:5]}")
    gap = 0.0
    for name, tensor in left.items():
        if tensor.shape != right[name].shape:
            raise ShipError(f"tensor {name}: shape {tuple(tensor.shape)} against {tuple(right[name].shape)}")
        gap = max(gap, (tensor.double() - right[name].double()).abs().max().item())
    return gap
