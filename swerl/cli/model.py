"""`swerl model`: policies swerl makes on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

console = Console(stderr=True, soft_wrap=True)


def init_tiny_cmd(
    out: Path = typer.Option(..., "--out", help="Folder for the model, tokenizer and chat template."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Seed for the random weights (default 0)."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="Tokens in all, special tokens included (default 4096)."),
    force: bool = typer.Option(False, "--force", help="Replace --out and everything in it if it is not empty."),
) -> None:
    """Make a tiny Qwen2-architecture model with a locally trained tokenizer (loads with AutoModelForCausalLM)."""
    from pydantic import ValidationError

    from swerl.models.tiny import MODEL_CARD, TinyModelConfig, init_tiny

    if out.exists() and not out.is_dir():
        console.print(f"[bold red]error:[/] --out {out} is a file, not a folder")
        raise typer.Exit(2)
    if out.is_dir() and any(out.iterdir()) and not force:
        console.print(f"[bold red]error:[/] --out {out} is not empty; pass --force to replace it and everything in it")
        raise typer.Exit(2)
    overrides = {k: v for k, v in {"seed": seed, "vocab_size": vocab_size}.items() if v is not None}
    try:
        config = TinyModelConfig(**overrides)
    except ValidationError as e:
        console.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(2)
    init_tiny(out, config, overwrite=force)
    card = json.loads((out / MODEL_CARD).read_text())
    console.print(f"tiny model: {card['parameters']:,} parameters, vocab {card['vocab_size']}, in {out}")


def ship_cmd(
    run: Path = typer.Option(..., "--run", help="Pipeline run folder whose warm-start checkpoint to ship (RUN_ROOT/NAME)."),
    out: Path = typer.Option(..., "--out", help="Folder in the repository for the shipped policy (replaced whole)."),
    recipe: Path = typer.Option(..., "--recipe", help="The pipeline parameters that made the run (recorded by digest)."),
    command: str = typer.Option("bash scripts/make_shipped_policy.sh", "--command", help="The command that remakes it."),
    tolerance: float = typer.Option(1e-5, "--tolerance", min=0.0, help="Largest |weight difference| a regeneration may show."),
) -> None:
    """Ship a run's warm-started policy: its checkpoint's loadable files and a recipe.json of where it came from."""
    from swerl.models.shipped import ShipError, ship_policy

    if not recipe.is_file():
        console.print(f"[bold red]error:[/] --recipe {recipe} is not a file")
        raise typer.Exit(2)
    try:
        made = ship_policy(run, out, recipe, command, tolerance)
    except ShipError as e:
        console.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(2)
    console.print(f"shipped {made['checkpoint']} of {run} to {out} (model.safetensors sha256 {made['files']['model.safetensors'][:12]})")
