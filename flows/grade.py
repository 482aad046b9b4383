"""Flow: grade SWE-bench predictions in chunks, each prediction in a fresh sandbox."""

from __future__ import annotations

from prefect import flow

from flows._hooks import HOOKS
from swerl.orchestration.fanout import run_tasks
from swerl.orchestration.inputs import task_inputs
from swerl.orchestration.params import GradeParams
from swerl.orchestration.results import GradeRun
from swerl.stages.images import ImagesStage
from tasks.grade import grade_chunk
from tasks.images import build_images_task


@flow(name="grade", log_prints=True, **HOOKS)
def grade(params: GradeParams) -> GradeRun:
    """Predictions JSONL -> results JSONL (resolved, failure class, per-test detail).

    Args:
        params: The predictions, the task set they answer, where the results go and how many sandboxes at once.
    """
    from swerl.grading.predictions import read_predictions

    from swerl.stages.images import load_task_file

    tasks, repos = task_inputs(params.tasks, params.repos)
    known = {t.instance_id for t in load_task_file(tasks, params.skip_invalid)}
    preds, bad = read_predictions(params.predictions, known_ids=known)
    for line in bad:
        print(f"skipped {line}")
    manifest = params.out.with_suffix(".images.json")
    build_images_task(ImagesStage(tasks=tasks, repos=repos, manifest=manifest, builds=min(params.grading_sandboxes, 64),
                                  skip_invalid=params.skip_invalid))
    rows = [p.model_dump() for p in preds]
    size = params.chunk_size or max(len(rows), 1)  # None: one chunk
    chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
    parts = [params.out.with_name(f"{params.out.stem}.part{n:04d}.jsonl") for n in range(len(chunks))]
    calls = [{"tasks": tasks, "predictions": chunk, "manifest": manifest, "out": part,
              "grading_sandboxes": params.grading_sandboxes, "grading": params.grading, "skip_invalid": params.skip_invalid}
             for chunk, part in zip(chunks, parts)]
    results = run_tasks(grade_chunk, calls, dask_address=params.dask_address)
    params.out.parent.mkdir(parents=True, exist_ok=True)
    with params.out.open("w") as f:
        for part in parts:
            f.write(part.read_text())
            part.unlink()
    resolved, total = sum(r.resolved for r in results), sum(r.total for r in results)
    infra = [i for r in results for i in r.infra_errors]
    print(f"resolved {resolved}/{total}; results {params.out}")
    if bad and not params.skip_invalid:
        raise ValueError(f"{len(bad)} bad prediction line(s) were skipped: {'; '.join(bad[:5])}; fix them, or set "
                         f"skip_invalid to accept the skip (the other predictions are graded in {params.out})")
    if infra:
        raise RuntimeError(f"{len(infra)} prediction(s) hit an infrastructure error and were not graded: "
                           f"{', '.join(infra[:10])} (reasons in {params.out})")
    return GradeRun(out=params.out, resolved=resolved, total=total)
