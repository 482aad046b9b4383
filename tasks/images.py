"""Build environment images and validate task sets, both cached by content.

Prefect caches the image build under a key computed from what it depends on, so an
unchanged task set is not rebuilt, in this flow run or any later one. Validation verdicts
are cached per task by swerl itself (``default_cache_dir()``), so a new run folder, or a
task set that shares tasks with an earlier one, grades only new tasks; the validation task
itself always runs (in well under a second when every verdict is cached) and always writes
its report, which a Prefect cache hit would not (a deleted run folder then lost it).
The image key also covers the images' presence: after ``swerl images prune`` it changes
and the build runs again (Docker tags are content hashes, so that rebuild is exact).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.grading.grader import GradingConfig
from swerl.grading.validate import ValidationSettings
from swerl.orchestration.results import ValidationSummary
from swerl.stages.config import part
from swerl.stages.images import ImagesResult, ImagesStage, build_images
from swerl.util.paths import LOG_DIR
from tasks.common import TAG_IMAGE_BUILD, TAG_SANDBOX, retry_on_infrastructure

CACHE_FOR = timedelta(days=30)


def _file_bytes(path: Path | None) -> bytes:
    return Path(path).read_bytes() if path and Path(path).is_file() else b""


def _present_images(manifest: Path) -> str:
    """Digest of the image ids that the manifest's tags resolve to now ('' when any is missing)."""
    from swerl.envs.docker_client import docker_client
    from swerl.stages.images import read_manifest

    if not manifest.is_file():
        return ""
    client = docker_client()
    ids = []
    try:
        for iid, tag in sorted(read_manifest(manifest).items()):
            ids.append(f"{iid}={client.images.get(tag).id}")
    except Exception:  # noqa: BLE001 - a missing or unreadable image means: build again
        return ""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def images_cache_key(context: Any, parameters: dict[str, Any]) -> str | None:
    """Task file, repositories' content, CA certificates, manifest path, and the images' presence; None (no cache) for a
    stage that rebuilds its images (``force``)."""
    from swerl.tracking.lineage import tree_digest

    stage: ImagesStage = parameters["stage"]
    if stage.force:
        return None
    h = hashlib.sha256(b"images-v1\0")
    h.update(_file_bytes(stage.tasks))
    if stage.repos and Path(stage.repos).is_dir():
        h.update(tree_digest(stage.repos).encode())
    for cert in stage.ca_certs or []:
        h.update(_file_bytes(cert))
    h.update(str(Path(stage.manifest).resolve()).encode())
    h.update(_present_images(Path(stage.manifest)).encode())
    return h.hexdigest()


@task(name="build-images", tags=[TAG_IMAGE_BUILD], retries=2, retry_delay_seconds=10,
      retry_condition_fn=retry_on_infrastructure, timeout_seconds=4 * 3600,
      cache_key_fn=images_cache_key, cache_expiration=CACHE_FOR, persist_result=True)
def build_images_task(stage: ImagesStage) -> ImagesResult:
    """Base, environment and instance images for a task set, and the task -> image manifest."""
    from prefect.logging import get_run_logger

    log = get_run_logger()
    result = build_images(stage, progress=lambda o: log.info("image %s: %s", o.instance_id, o.error or o.image))
    if result.failed:
        # a failed build must not be cached as the answer for this content
        raise RuntimeError(f"{len(result.failed)} image build(s) failed: " +
                           "; ".join(f"{i}: {e[:200]}" for i, e in sorted(result.failed.items())[:3]))
    return result


@task(name="validate-tasks", tags=[TAG_SANDBOX], retries=1, retry_condition_fn=retry_on_infrastructure,
      timeout_seconds=6 * 3600, cache_policy=NO_CACHE)
def validate_tasks_task(tasks: Path, manifest: Path, settings: ValidationSettings, out: Path, log_dir: Path = LOG_DIR,
                        grading: GradingConfig | None = None) -> ValidationSummary:
    """Gold patch ``settings.validate_runs`` times and the empty patch once per task, each in a fresh sandbox,
    ``settings.grading_sandboxes`` at once, graded as ``grading`` says (the pipeline's sampler's: validation and the
    rollouts grade alike)."""
    import uuid

    from swerl.grading.validate import ValidationConfig, default_cache_dir, validate_tasks
    from swerl.stages.images import load_task_file, read_manifest

    task_list = load_task_file(tasks)
    images = read_manifest(manifest)
    config = ValidationConfig(**part(settings, ValidationSettings).model_dump(), cache_dir=default_cache_dir(), grading=(
        grading or GradingConfig()).for_run(log_dir / "validate", f"validate-{uuid.uuid4().hex[:8]}", run_tests_without_patch=True))
    report = validate_tasks(task_list, {t.instance_id: images.get(t.instance_id) for t in task_list}, config)
    report.write(out)
    return ValidationSummary(valid=report.valid, total=report.total, invalid=[v.instance_id for v in report.tasks if not v.valid],
                             report=out, cached=report.cached)
