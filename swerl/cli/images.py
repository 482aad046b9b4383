"""`swerl images`: build, list and prune the environment images."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from swerl.cli.common import (CaOpt, LogDirOpt, ReposOpt, SkipOpt, TasksOpt, build_images, console, docker_ready,
                              load_task_list)
from swerl.cli.options import field_option, validated
from swerl.stages.images import ImageBuildSettings


def images_build(
    tasks: Path = TasksOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    builds: int = field_option(ImageBuildSettings, "builds", "--concurrency", "-j"), log_dir: Path = LogDirOpt,
    skip_invalid: bool = SkipOpt, github: bool = field_option(ImageBuildSettings, "github", "--github"),
    manifest: Path = field_option(ImageBuildSettings, "manifest", "--manifest"),
    force: bool = field_option(ImageBuildSettings, "force", "--force"),
) -> None:
    """Build base, environment and instance images for a task set (cached by content hash)."""
    from swerl.envs.images import write_manifest
    from swerl.stages.images import ImagesStage, image_config

    stage = validated(ImagesStage, "image build", tasks=tasks, repos=repos, ca_certs=ca_cert, builds=builds, log_dir=log_dir,
                      skip_invalid=skip_invalid, github=github, manifest=manifest, force=force)
    task_list = load_task_list(tasks, skip_invalid)  # the input first: its error needs no daemon
    docker_ready()
    outcomes = build_images(task_list, image_config(stage))
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
