"""`swerl images`: build, list and prune the environment images."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from swerl.cli.common import (CaOpt, LogDirOpt, ParallelOpt, ReposOpt, SkipOpt, TasksOpt, build_images, console, docker_ready,
                              image_config, load_task_list)
from swerl.util.paths import IMAGES_MANIFEST


def images_build(
    tasks: Path = TasksOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    concurrency: int = ParallelOpt, log_dir: Path = LogDirOpt, skip_invalid: bool = SkipOpt,
    github: bool = typer.Option(False, "--github", help="Clone repositories missing from --repos from GitHub."),
    manifest: Path = typer.Option(IMAGES_MANIFEST, "--manifest", help="Where the task -> image map is written."),
) -> None:
    """Build base, environment and instance images for a task set (cached by content hash)."""
    from swerl.envs.images import write_manifest

    task_list = load_task_list(tasks, skip_invalid)  # the input first: its error needs no daemon
    docker_ready()
    outcomes = build_images(task_list, image_config(repos, ca_cert, concurrency, log_dir, github))
    write_manifest(list(outcomes.values()), manifest)
    failed = [o for o in outcomes.values() if o.error]
    console.print(f"{len(outcomes) - len(failed)} image(s) ready, {len(failed)} failed; manifest: {manifest}")
    raise typer.Exit(1 if failed else 0)


def images_list(kind: Optional[str] = typer.Option(None, help="base, env or instance.")) -> None:
    """List swerl's images."""
    from swerl.envs.images import list_images

    docker_ready()
    table = Table("kind", "tags", "instance", "MB", "created")
    for row in list_images(kind):
        table.add_row(row["kind"], row["tags"], row["instance_id"], row["size_mb"], row["created"])
    Console().print(table)


def images_prune(kind: Optional[str] = typer.Option(None, help="Only this kind: base, env or instance.")) -> None:
    """Remove swerl's images (instances, then environments, then bases)."""
    from swerl.envs.images import prune_images

    docker_ready()
    removed = prune_images(kind)
    console.print(f"removed {len(removed)} image(s)")
