"""Grade a chunk of SWE-bench predictions, each in a fresh sandbox."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from swerl.grading.grader import GradingConfig
from swerl.orchestration.results import GradedChunk
from swerl.util.paths import LOG_DIR
from tasks.common import TAG_SANDBOX, retry_on_infrastructure


@task(name="grade-chunk", tags=[TAG_SANDBOX], retries=1, retry_condition_fn=retry_on_infrastructure,
      timeout_seconds=6 * 3600, cache_policy=NO_CACHE)
def grade_chunk(tasks: Path, predictions: list[dict[str, Any]], manifest: Path, out: Path, grading_sandboxes: int = 2,
                grading: GradingConfig | None = None, log_dir: Path = LOG_DIR, skip_invalid: bool = False) -> GradedChunk:
    """Write one result line per prediction to ``out`` (JSONL), ``grading_sandboxes`` at once; predictions for unknown
    instances are refused (``skip_invalid``: the task file's invalid records are left out, as the flow did)."""
    from swerl.grading.grader import grade_many
    from swerl.stages.images import load_task_file, read_manifest

    by_id = {t.instance_id: t for t in load_task_file(tasks, skip_invalid)}
    images = read_manifest(manifest)
    config = (grading or GradingConfig()).for_run(log_dir / "grade", f"grade-{uuid.uuid4().hex[:8]}")
    unknown = sorted({p["instance_id"] for p in predictions if p["instance_id"] not in by_id})
    if unknown:  # read_predictions leaves these out; reaching here is a caller's bug, not the agent's failure
        raise ValueError(f"predictions for instances not in {tasks}: {', '.join(unknown[:10])}")
    jobs = [(by_id[p["instance_id"]], p.get("model_patch") or "", images.get(p["instance_id"]), p.get("model_name_or_path", ""))
            for p in predictions]
    results = grade_many(jobs, config, concurrency=grading_sandboxes)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in results:
            f.write(r.model_dump_json() + "\n")
    return GradedChunk(out=out, resolved=sum(r.resolved for r in results), total=len(results),
                       infra_errors=[r.instance_id for r in results if r.is_infra_error])
