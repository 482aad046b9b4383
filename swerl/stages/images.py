"""Stage: build (or find cached) environment images for a task set; write the manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swerl.data.loaders import TaskLoadError, load_tasks
from swerl.data.task import Task
from swerl.envs.images import BuildOutcome, ImageBuilder, ImageConfig, write_manifest
from swerl.stages.errors import StageInputError
from swerl.util.paths import IMAGES_MANIFEST, LOG_DIR


class ImagesStage(BaseModel):
    """Which tasks, where their repositories are, and where the manifest goes."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path = Field(description="Task file (.jsonl, .json, .parquet or a saved dataset folder).")
    repos: Path | None = Field(None, description="Mirror folder holding repositories as `<owner>__<name>`.")
    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM) for builds; default: the host's bundle.")
    concurrency: int = Field(2, ge=1, le=64, description="Builds at once.")
    log_dir: Path = Field(LOG_DIR, description="Build logs go to LOG_DIR/builds.")
    github: bool = Field(False, description="Clone repositories missing from `repos` from GitHub.")
    manifest: Path = Field(IMAGES_MANIFEST, description="Where the task -> image map is written.")
    skip_invalid: bool = Field(False, description="Load the valid task records and skip the invalid ones.")


class ImagesReady(BaseModel):
    """A task set's images: the manifest, the images ready, and how many of those were reused."""

    manifest: Path
    ready: int
    cached: int


class ImagesResult(ImagesReady):
    failed: dict[str, str] = Field(description="instance_id -> build error.")


def load_task_file(path: Path, skip_invalid: bool = False) -> list[Task]:
    """The tasks of ``path``; a bad file or an empty set is a ``StageInputError``."""
    try:
        task_set = load_tasks(Path(path), skip_invalid=skip_invalid)
    except TaskLoadError as e:
        raise StageInputError(str(e)) from e
    if not task_set.tasks:
        raise StageInputError(f"no valid task in {path}")
    return task_set.tasks


def image_config(stage: ImagesStage) -> ImageConfig:
    return ImageConfig(repos_dir=stage.repos, extra_ca_certs=stage.ca_certs or None, max_parallel=stage.concurrency,
                       log_dir=stage.log_dir / "builds", github=stage.github)


def build_outcomes(tasks: list[Task], config: ImageConfig,
                   progress: Callable[[BuildOutcome], None] | None = None) -> dict[str, BuildOutcome]:
    return {o.instance_id: o for o in ImageBuilder(config).build_all(tasks, progress=progress)}


def build_images(stage: ImagesStage, progress: Callable[[BuildOutcome], None] | None = None) -> ImagesResult:
    """Build what is missing (images are tagged by content hash, so a rebuild is a lookup)."""
    tasks = load_task_file(stage.tasks, stage.skip_invalid)
    outcomes = build_outcomes(tasks, image_config(stage), progress)
    write_manifest(list(outcomes.values()), stage.manifest)
    return ImagesResult(manifest=stage.manifest, ready=sum(o.ok for o in outcomes.values()),
                        cached=sum(o.ok and o.cached for o in outcomes.values()),
                        failed={i: o.error for i, o in outcomes.items() if o.error})


def read_manifest(path: Path) -> dict[str, str]:
    """instance_id -> image tag, for the tasks whose image was built."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {iid: o["image"] for iid, o in data.items() if o.get("image") and not o.get("error")}
