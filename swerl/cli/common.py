"""What every command shares: the console, the common options, the input checks and the error line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from swerl.cli.progress import bar
from swerl.util.paths import LOG_DIR

console = Console(stderr=True, soft_wrap=True)

TasksOpt = typer.Option(..., "--tasks", help="Task file: .jsonl, .json, .parquet, or a saved Hugging Face dataset folder.")
ReposOpt = typer.Option(None, "--repos", help="Mirror folder holding repositories as `<owner>__<name>`.")
CaOpt = typer.Option(None, "--ca-cert", help="Extra CA certificate (PEM) for builds; repeat for more. Default: the host's bundle.")
SkipOpt = typer.Option(False, "--skip-invalid", help="Load the valid records and report the invalid ones instead of stopping.")
ParallelOpt = typer.Option(2, "--concurrency", "-j", min=1, max=64, help="Builds / sandboxes at once.")
LogDirOpt = typer.Option(LOG_DIR, "--log-dir", help="Build and grading logs go here.")
TimeoutOpt = typer.Option(None, "--timeout", min=0.001, max=86400,
                          help="Seconds allowed for one test run (default: GradingConfig.test_timeout_s, 900).")


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` and exit with ``code`` (2: the input is wrong)."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def load_task_list(path: Path, skip_invalid: bool, split: str | None = None):
    from swerl.data.loaders import TaskLoadError, load_tasks

    try:
        task_set = load_tasks(path, skip_invalid=skip_invalid, split=split)
    except TaskLoadError as e:
        fail(str(e))
    for err in task_set.errors:
        console.print(f"[yellow]skipped[/] {err}")
    if not task_set.tasks:
        fail(f"no valid task in {path}")
    return task_set.tasks


def grading_config(timeout: float | None):
    """The grading settings: GradingConfig's, with the test run's time limit when one is given."""
    from swerl.grading.grader import GradingConfig

    return GradingConfig() if timeout is None else GradingConfig(test_timeout_s=timeout)


def docker_ready() -> None:
    from swerl.envs.docker_client import DockerUnavailableError, docker_client
    from swerl.envs.docker_sandbox import reap_containers

    try:
        docker_client()
    except DockerUnavailableError as e:
        fail(str(e))
    reaped = reap_containers()
    if reaped:
        console.print(f"reaped {len(reaped)} container(s) left by crashed runs")


def image_config(repos: Path | None, ca_cert: list[Path] | None, concurrency: int, log_dir: Path, github: bool = False):
    from swerl.envs.images import ImageConfig

    return ImageConfig(repos=repos, ca_certs=ca_cert or None, builds=concurrency, build_logs=log_dir / "builds",
                       github=github)


def build_images(tasks, config) -> dict:
    from swerl.envs.images import ImageBuilder

    outcomes = {}
    with bar("building images", len(tasks)) as advance:
        for o in ImageBuilder(config).build_all(tasks, progress=lambda o: advance(o.instance_id)):
            outcomes[o.instance_id] = o
            if o.error:
                console.print(f"[red]build failed[/] {o.instance_id}: {o.error}")
    return outcomes


def summarize_infra(items: list[tuple[str, str]], noun: str, *, kind: str = "infra_error",
                     why: str = "these were not graded (not the patch's fault); fix the cause and rerun") -> None:
    """Name what stopped a grading (the infrastructure, or a broken task): nothing was learnt about those, so the
    exit is non-zero."""
    console.print(f"[bold red]{kind}[/] in {len(items)} {noun}: {why}:")
    for iid, reason in items[:20]:
        console.print(f"  {iid}: {reason.splitlines()[0][:300] if reason else ''}")
    if len(items) > 20:
        console.print(f"  ... and {len(items) - 20} more")
