"""`swerl tasks validate` and `swerl grade`: gold patches and predictions, each graded in a fresh sandbox."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from swerl.cli.common import (CaOpt, LogDirOpt, ParallelOpt, ReposOpt, SkipOpt, TasksOpt, TimeoutOpt, build_images, console,
                              docker_ready, fail, grading_config, image_config, load_task_list, summarize_infra)
from swerl.cli.progress import bar


def tasks_validate(
    tasks: Path = TasksOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    runs: int = typer.Option(3, "--runs", min=1, max=100, help="Gold-patch runs per task (flakiness check)."),
    out: Path = typer.Option(..., "--out", help="Where the JSON report is written."),
    concurrency: int = ParallelOpt, log_dir: Path = LogDirOpt, skip_invalid: bool = SkipOpt,
    timeout: Optional[float] = TimeoutOpt,
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse verdicts cached by content under "
                               "$SWERL_CACHE_DIR/validation (default ~/.cache/swerl/validation)."),
) -> None:
    """Grade each task's gold patch N times and its empty patch once; report invalid and flaky tasks."""
    from swerl.grading.validate import ValidationConfig, default_cache_dir, validate_tasks

    task_list = load_task_list(tasks, skip_invalid)  # the input first: its error needs no daemon
    docker_ready()
    outcomes = build_images(task_list, image_config(repos, ca_cert, concurrency, log_dir))
    config = ValidationConfig(validate_runs=runs, grading_sandboxes=concurrency, grading=grading_config(timeout).for_run(
        log_dir / "validate", f"validate-{uuid.uuid4().hex[:8]}", run_tests_without_patch=True),
        cache_dir=default_cache_dir() if cache else None)
    with bar("grading", len(task_list) * (runs + 1)) as advance:
        report = validate_tasks(
            task_list, {i: o.image if o.ok else None for i, o in outcomes.items()}, config,
            build_errors={i: o.error for i, o in outcomes.items() if o.error},
            progress=lambda r: advance(r.instance_id),
        )
    report.write(out)
    table = Table("instance_id", "valid", "gold", "empty", "reason")
    for v in report.tasks:
        table.add_row(v.instance_id, "yes" if v.valid else "[red]no[/]", f"{sum(v.gold_resolved)}/{len(v.gold_resolved)}",
                      "resolved" if v.empty_resolved else "unresolved", v.reason[:120])
    Console(stderr=True).print(table)
    reused = f" ({report.cached} verdict(s) from the cache)" if report.cached else ""
    console.print(f"{report.valid}/{report.total} task(s) valid{reused}; report: {out}")
    infra = [(v.instance_id, v.reason) for v in report.tasks if v.infra_error]
    if infra:
        summarize_infra(infra, "task(s)")
    raise typer.Exit(0 if report.invalid == 0 else 1)


def _read_predictions(predictions: Path, by_id: dict):
    """``(predictions, bad lines)`` of the file; one that cannot be read exits 2."""
    from swerl.grading.predictions import read_predictions

    try:
        return read_predictions(predictions, known_ids=by_id)
    except OSError as e:  # missing, a folder, unreadable: the input's fault, said before Docker is asked anything
        fail(f"predictions file {predictions} cannot be read ({e.strerror or e}); check the path and the working directory")


def _grade_into(out: Path, jobs: list, config, concurrency: int, build_errors: dict[str, str]) -> list:
    """Grade ``jobs`` with a progress bar, the results written to ``out`` in the jobs' order."""
    from swerl.grading.grader import grade_many

    out.parent.mkdir(parents=True, exist_ok=True)
    # each result is on disk as soon as it is graded (a crash loses only those in flight); the
    # finished file is then rewritten in the predictions' order
    with out.open("w") as live, bar("grading", len(jobs)) as advance:
        def written(_: int, r) -> None:
            live.write(r.model_dump_json() + "\n")
            live.flush()

        results = grade_many(jobs, config, concurrency=concurrency, progress=lambda r: advance(r.instance_id),
                             on_result=written, build_errors=build_errors)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("".join(r.model_dump_json() + "\n" for r in results))
    tmp.replace(out)
    return results


def _report_grades(results: list, out: Path) -> tuple[list, list]:
    """Print the tally and name the gradings that said nothing about their patch; return those
    ``(infrastructure failures, broken tasks)``."""
    from swerl.grading.results import FailureClass

    resolved = sum(r.resolved for r in results)
    counts: dict[str, int] = {}
    for r in results:
        key = r.failure_class.value if r.failure_class else "resolved"
        counts[key] = counts.get(key, 0) + 1
    console.print(f"resolved {resolved}/{len(results)}  {json.dumps(counts)}  results: {out}")
    infra = [r for r in results if r.is_infra_error]
    if infra:
        summarize_infra([(r.instance_id, r.reason) for r in infra], "prediction(s)")
    broken = [r for r in results if r.failure_class is FailureClass.TASK_BROKEN]
    if broken:
        summarize_infra([(r.instance_id, r.reason) for r in broken], "prediction(s)", kind="task_broken",
                         why="the task cannot be graded as written (not the patch's fault); fix the task record")
    return infra, broken


def grade(
    tasks: Path = TasksOpt,
    predictions: Path = typer.Option(..., "--predictions", help="SWE-bench predictions JSONL: instance_id, model_name_or_path, model_patch."),
    repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    out: Path = typer.Option(..., "--out", help="RESULTS.jsonl: one line per prediction."),
    concurrency: int = ParallelOpt, log_dir: Path = LogDirOpt,
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip invalid task records and bad prediction "
                                      "lines (each is still reported) instead of exiting 2."),
    timeout: Optional[float] = TimeoutOpt,
) -> None:
    """Grade predictions, each in a fresh sandbox; write one result line per prediction."""
    by_id = {t.instance_id: t for t in load_task_list(tasks, skip_invalid)}
    preds, bad = _read_predictions(predictions, by_id)
    docker_ready()
    for line in bad:
        console.print(f"[yellow]skipped[/] {line}")
    wanted = list({p.instance_id: by_id[p.instance_id] for p in preds}.values())
    outcomes = build_images(wanted, image_config(repos, ca_cert, concurrency, log_dir)) if wanted else {}
    config = grading_config(timeout).for_run(log_dir / "grade", f"grade-{uuid.uuid4().hex[:8]}")
    jobs = [(by_id[p.instance_id], p.model_patch, outcomes[p.instance_id].image if outcomes[p.instance_id].ok else None,
             p.model_name_or_path) for p in preds]
    build_errors = {i: o.error for i, o in outcomes.items() if o.error}
    results = _grade_into(out, jobs, config, concurrency, build_errors)
    infra, broken = _report_grades(results, out)
    if bad and not skip_invalid:
        console.print(f"[bold red]error:[/] {len(bad)} bad prediction line(s) were skipped (listed above); "
                      "fix them, or pass --skip-invalid to accept the skip")
        raise typer.Exit(2)
    raise typer.Exit(1 if infra or broken else 0)
