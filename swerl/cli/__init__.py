"""The `swerl` command."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from swerl.cli.model import model_app
from swerl.cli.progress import bar

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train software-engineering agents with RL.")
tasks_app = typer.Typer(no_args_is_help=True, help="Task sets: validation.")
images_app = typer.Typer(no_args_is_help=True, help="Environment images: build, list, prune.")
demo_app = typer.Typer(no_args_is_help=True, help="The embedded demo tasks.")
sandbox_app = typer.Typer(no_args_is_help=True, help="Sandbox housekeeping.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")
app.add_typer(demo_app, name="demo")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(model_app, name="model")

console = Console(stderr=True, soft_wrap=True)

TasksOpt = typer.Option(..., "--tasks", help="Task file: .jsonl, .json, .parquet, or a saved Hugging Face dataset folder.")
ReposOpt = typer.Option(None, "--repos", help="Mirror folder holding repositories as `<owner>__<name>`.")
CaOpt = typer.Option(None, "--ca-cert", help="Extra CA certificate (PEM) for builds; repeat for more. Default: the host's bundle.")
SkipOpt = typer.Option(False, "--skip-invalid", help="Load the valid records and report the invalid ones instead of stopping.")
ParallelOpt = typer.Option(2, "--concurrency", "-j", min=1, max=64, help="Builds / sandboxes at once.")
LogDirOpt = typer.Option(Path(".swerl/logs"), "--log-dir", help="Build and grading logs go here.")
TimeoutOpt = typer.Option(None, "--timeout", min=0.001, max=86400,
                          help="Seconds allowed for one test run (default: GradingConfig.test_timeout_s, 900).")


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _load(path: Path, skip_invalid: bool, split: str | None = None):
    from swerl.data.loaders import TaskLoadError, load_tasks

    try:
        task_set = load_tasks(path, skip_invalid=skip_invalid, split=split)
    except TaskLoadError as e:
        _fail(str(e))
    for err in task_set.errors:
        console.print(f"[yellow]skipped[/] {err}")
    if not task_set.tasks:
        _fail(f"no valid task in {path}")
    return task_set.tasks


def _grading(timeout: float | None):
    """The grading settings: GradingConfig's, with the test run's time limit when one is given."""
    from swerl.grading.grader import GradingConfig

    return GradingConfig() if timeout is None else GradingConfig(test_timeout_s=timeout)


def _docker_ready() -> None:
    from swerl.envs.docker_client import DockerUnavailableError, docker_client
    from swerl.envs.docker_sandbox import reap_containers

    try:
        docker_client()
    except DockerUnavailableError as e:
        _fail(str(e))
    reaped = reap_containers()
    if reaped:
        console.print(f"reaped {len(reaped)} container(s) left by crashed runs")


def _image_config(repos: Path | None, ca_cert: list[Path] | None, concurrency: int, log_dir: Path, github: bool = False):
    from swerl.envs.images import ImageConfig

    return ImageConfig(repos_dir=repos, extra_ca_certs=ca_cert or None, max_parallel=concurrency,
                       log_dir=log_dir / "builds", github=github)


def _build(tasks, config) -> dict:
    from swerl.envs.images import ImageBuilder

    outcomes = {}
    with bar("building images", len(tasks)) as advance:
        for o in ImageBuilder(config).build_all(tasks, progress=lambda o: advance(o.instance_id)):
            outcomes[o.instance_id] = o
            if o.error:
                console.print(f"[red]build failed[/] {o.instance_id}: {o.error}")
    return outcomes


@images_app.command("build")
def images_build(
    tasks: Path = TasksOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    concurrency: int = ParallelOpt, log_dir: Path = LogDirOpt, skip_invalid: bool = SkipOpt,
    github: bool = typer.Option(False, "--github", help="Clone repositories missing from --repos from GitHub."),
    manifest: Path = typer.Option(Path(".swerl/images.json"), "--manifest", help="Where the task -> image map is written."),
) -> None:
    """Build base, environment and instance images for a task set (cached by content hash)."""
    from swerl.envs.images import write_manifest

    task_list = _load(tasks, skip_invalid)  # the input first: its error needs no daemon
    _docker_ready()
    outcomes = _build(task_list, _image_config(repos, ca_cert, concurrency, log_dir, github))
    write_manifest(list(outcomes.values()), manifest)
    failed = [o for o in outcomes.values() if o.error]
    console.print(f"{len(outcomes) - len(failed)} image(s) ready, {len(failed)} failed; manifest: {manifest}")
    raise typer.Exit(1 if failed else 0)


@images_app.command("list")
def images_list(kind: Optional[str] = typer.Option(None, help="base, env or instance.")) -> None:
    """List swerl's images."""
    from swerl.envs.images import list_images

    _docker_ready()
    table = Table("kind", "tags", "instance", "MB", "created")
    for row in list_images(kind):
        table.add_row(row["kind"], row["tags"], row["instance_id"], row["size_mb"], row["created"])
    Console().print(table)


@images_app.command("prune")
def images_prune(kind: Optional[str] = typer.Option(None, help="Only this kind: base, env or instance.")) -> None:
    """Remove swerl's images (instances, then environments, then bases)."""
    from swerl.envs.images import prune_images

    _docker_ready()
    removed = prune_images(kind)
    console.print(f"removed {len(removed)} image(s)")


@tasks_app.command("validate")
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

    task_list = _load(tasks, skip_invalid)  # the input first: its error needs no daemon
    _docker_ready()
    outcomes = _build(task_list, _image_config(repos, ca_cert, concurrency, log_dir))
    config = ValidationConfig(runs=runs, concurrency=concurrency, grading=_grading(timeout).for_run(
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
        _summarize_infra(infra, "task(s)")
    raise typer.Exit(0 if report.invalid == 0 else 1)


def _read_predictions(predictions: Path, by_id: dict):
    """``(predictions, bad lines)`` of the file; one that cannot be read exits 2."""
    from swerl.grading.predictions import read_predictions

    try:
        return read_predictions(predictions, known_ids=by_id)
    except OSError as e:  # missing, a folder, unreadable: the input's fault, said before Docker is asked anything
        _fail(f"predictions file {predictions} cannot be read ({e.strerror or e}); check the path and the working directory")


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
        _summarize_infra([(r.instance_id, r.reason) for r in infra], "prediction(s)")
    broken = [r for r in results if r.failure_class is FailureClass.TASK_BROKEN]
    if broken:
        _summarize_infra([(r.instance_id, r.reason) for r in broken], "prediction(s)", kind="task_broken",
                         why="the task cannot be graded as written (not the patch's fault); fix the task record")
    return infra, broken


@app.command("grade")
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
    by_id = {t.instance_id: t for t in _load(tasks, skip_invalid)}
    preds, bad = _read_predictions(predictions, by_id)
    _docker_ready()
    for line in bad:
        console.print(f"[yellow]skipped[/] {line}")
    wanted = list({p.instance_id: by_id[p.instance_id] for p in preds}.values())
    outcomes = _build(wanted, _image_config(repos, ca_cert, concurrency, log_dir)) if wanted else {}
    config = _grading(timeout).for_run(log_dir / "grade", f"grade-{uuid.uuid4().hex[:8]}")
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


def _summarize_infra(items: list[tuple[str, str]], noun: str, *, kind: str = "infra_error",
                     why: str = "these were not graded (not the patch's fault); fix the cause and rerun") -> None:
    """Name what stopped a grading (the infrastructure, or a broken task): nothing was learnt about those, so the
    exit is non-zero."""
    console.print(f"[bold red]{kind}[/] in {len(items)} {noun}: {why}:")
    for iid, reason in items[:20]:
        console.print(f"  {iid}: {reason.splitlines()[0][:300] if reason else ''}")
    if len(items) > 20:
        console.print(f"  ... and {len(items) - 20} more")


@demo_app.command("materialize")
def demo_materialize(out: Path = typer.Option(Path(".swerl/demo"), "--out", help="Folder for repos/ and tasks.jsonl.")) -> None:
    """Write the demo tasks (tasks.jsonl) and their git repositories (repos/)."""
    from swerl.demo import materialize_demo

    demo = materialize_demo(out)
    console.print(f"{len(demo.instance_ids)} demo task(s): --tasks {demo.tasks_file} --repos {demo.repos_dir}")


@sandbox_app.command("reap")
def sandbox_reap(everything: bool = typer.Option(False, "--all", help="Remove every swerl sandbox, live owners too."),
                 host: Optional[list[str]] = typer.Option(None, "--host", help="A Docker host of a sandbox pool to clean "
                                                          "too (tcp://10.0.0.2:2375); repeat for each."),
                 kube_namespace: Optional[list[str]] = typer.Option(
                     None, "--kube-namespace", help="Delete swerl's sandbox pods in this Kubernetes namespace too; repeat for each."),
                 kube_api_server: Optional[str] = typer.Option(None, "--kube-api-server", help="The cluster's API server "
                                                               "(https://host:6443); default: the kubeconfig, else in-cluster."),
                 kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, "
                                                           "else ~/.kube/config)."),
                 kube_context: Optional[str] = typer.Option(None, "--kube-context", help="Kubeconfig context."),
                 kube_token_file: Optional[Path] = typer.Option(None, "--kube-token-file", help="Bearer token file for "
                                                                "--kube-api-server.")) -> None:
    """Remove sandboxes left by crashed runs (dead owner on this machine, or past their lifetime): containers here and
    on the given Docker hosts, pods in the given Kubernetes namespaces."""
    from swerl.envs.docker_sandbox import reap_containers

    removed = reap_containers(everything=everything, hosts=host or ())
    console.print(f"removed {len(removed)} container(s)")
    if kube_namespace:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from pydantic import ValidationError
        from urllib3.exceptions import HTTPError

        from swerl.envs.k8s_sandbox import KubernetesSandboxConfig, reap_pods
        from swerl.envs.sandbox import SandboxError

        for namespace in kube_namespace:
            try:
                config = KubernetesSandboxConfig(namespace=namespace, api_server=kube_api_server, kubeconfig=kubeconfig,
                                                 context=kube_context, token_file=kube_token_file)
                pods = reap_pods(config, everything=everything)
            except (ValidationError, SandboxError, ApiException, ConfigException, HTTPError, OSError) as e:
                console.print(f"[red]namespace {namespace}: {e}[/red]")
                raise typer.Exit(1) from e
            console.print(f"removed {len(pods)} pod(s) in namespace {namespace}")


from swerl.cli import rollout as _rollout_commands  # noqa: E402,F401  registers `rollout` and `eval` on app
from swerl.cli.train import train_app  # noqa: E402
from swerl.cli import pipeline as _pipeline_commands  # noqa: E402,F401  registers `pipeline`
from swerl.cli import follow as _follow_commands  # noqa: E402,F401  registers `follow`
from swerl.cli import curriculum as _curriculum_commands  # noqa: E402,F401  registers `curriculum`

app.add_typer(train_app, name="train")

from swerl.cli import services as _services_commands  # noqa: E402,F401  registers `up`, `down`, `status` on app
from swerl.cli import demo_swebench as _demo_swebench_commands  # noqa: E402,F401  registers `demo swebench`


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
