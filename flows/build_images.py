"""Flow: environment images for a task set (content-cached), optionally validated."""

from __future__ import annotations

from prefect import flow

from flows._hooks import HOOKS
from swerl.orchestration.inputs import task_inputs
from swerl.orchestration.params import BuildImagesParams
from swerl.orchestration.results import ImagesBuilt
from swerl.grading.validate import ValidationSettings
from swerl.stages.config import part
from swerl.stages.images import ImageBuildSettings, ImagesStage
from tasks.images import build_images_task, validate_tasks_task


@flow(name="build_images", log_prints=True, **HOOKS)
def build_images(params: BuildImagesParams = BuildImagesParams()) -> ImagesBuilt:
    """Build base, environment and instance images; write the task -> image manifest.

    Args:
        params: The task set, its repositories, the manifest's path and whether to validate each task.
    """
    from prefect.artifacts import create_markdown_artifact

    tasks, repos = task_inputs(params.tasks, params.repos)
    result = build_images_task(ImagesStage(tasks=tasks, repos=repos, **part(params, ImageBuildSettings).model_dump()))
    out = ImagesBuilt(manifest=result.manifest, ready=result.ready, cached=result.cached)
    if params.validate_runs:
        out.validation = validate_tasks_task(tasks, result.manifest, part(params, ValidationSettings),
                                             params.manifest.with_name("validation.json"))
    create_markdown_artifact(
        key="images", description="Environment images",
        markdown=f"**{result.ready}** image(s) ready ({result.cached} cached) for `{tasks}`; manifest `{result.manifest}`"
        + (f"; validation: {out.validation.valid}/{out.validation.total} valid" if out.validation else ""))
    print(f"{result.ready} image(s) ready; manifest {result.manifest}")
    return out


if __name__ == "__main__":
    build_images()
