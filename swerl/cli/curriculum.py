"""`swerl curriculum generate`: small procedurally generated SWE tasks for learning proofs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from swerl.cli.common import fail, console



def generate(
    out: Path = typer.Option(..., "--out", help="Folder for repos/, warmup.jsonl, train.jsonl, heldout.jsonl, curriculum.json."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same seed writes byte-identical files."),
    warmup: int = typer.Option(60, "--warmup", help="Tasks in warmup.jsonl."),
    train: int = typer.Option(60, "--train", help="Tasks in train.jsonl."),
    heldout: int = typer.Option(40, "--heldout", help="Tasks in heldout.jsonl (repositories and name combinations no other split has)."),
    bug_kind: Optional[list[str]] = typer.Option(None, "--bug-kind", help="Only this bug kind; repeat for more (default: all)."),
    name_file: bool = typer.Option(False, "--name-file", help="The issue text names the file defining the function."),
) -> None:
    """Write one git mirror per task and a SWE-bench tasks file per split; print the counts."""
    from pydantic import ValidationError

    from swerl.curriculum import SPLITS, CurriculumConfig, generate_curriculum

    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file, not a folder; choose a folder")
    try:
        config = CurriculumConfig(seed=seed, warmup=warmup, train=train, heldout=heldout, bug_kinds=bug_kind or None,
                                  name_file=name_file)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in e.errors())
        fail(f"bad curriculum options: {problems}")
    result = generate_curriculum(out, config)

    table = Table("bug kind", *SPLITS)
    for kind in config.kinds:
        table.add_row(kind, *(str(result.bug_kinds[split].get(kind, 0)) for split in SPLITS))
    table.add_row("[bold]total[/]", *(str(len(result.instance_ids[split])) for split in SPLITS))
    console.print(table)
    for split in SPLITS:
        console.print(f"{split}: --tasks {result.tasks_files[split]}")
    console.print(f"repositories: --repos {result.repos_dir}; manifest: {result.manifest}")
