"""Stage: build (or find cached) environment images for a task set; write the manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swerl.data.loaders import SkipInvalidSettings, TaskLoadError, load_tasks
from swerl.data.task import Task
from swerl.envs.images import BuildOutcome, ImageBuilder, ImageConfig, ImageSettings, write_manifest
from swerl.envs.repos import MirrorSettings
from swerl.stages.errors import StageInputError
from swerl.util.paths import IMAGES_MANIFEST, LOG_DIR


class TaskStageSettings(MirrorSettings, SkipInvalidSettings):
    """What a stage that works on a task set is given: the task file, its repositories, where its logs go, and what it
    does with invalid task records."""

    tasks: Path = Field(description="Task file (.jsonl, .json, .parquet or a saved dataset folder).")
    log_dir: Path = Field(LOG_DIR, description="The stage's logs: image builds in LOG_DIR/builds, gradings in "
                          "LOG_DIR/grading (unless the grading settings name their own folder).")


class ImageBuildSettings(ImageSettings):
    """How a task set's images are built, and where the task -> image map goes."""

    manifest: Path = Field(IMAGES_MANIFEST, description="Where the task -> image map is written.")


class ImagesStage(TaskStageSettings, ImageBuildSettings):
    """Which tasks, where their repositories are, how their images are built and where the manifest goes."""

    model_config = ConfigDict(extra="forbid")


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
    """The image builder's config: the stage's image settings, its mirror, and its build logs in LOG_DIR/builds."""
    settings = {name: getattr(stage, name) for name in ImageSettings.model_fields}
    # an empty list, like None, means the host's bundle (as it always has: the images' tags depend on it)
    return ImageConfig(**{**settings, "ca_certs": stage.ca_certs or None}, repos=stage.repos,
                       build_logs=stage.log_dir / "builds")


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
