"""`swerl rollout` and `swerl eval`: the agent on a task set, trajectories to Parquet, Pass@k."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from swerl.cli import CaOpt, LogDirOpt, ReposOpt, SkipOpt, TasksOpt, _docker_ready, _fail, app, console
from swerl.cli.progress import bar

EngineOpt = typer.Option("hf", "--engine", help="hf (transformers, default), vllm (in-process), openai (HTTP server), or scripted (replays gold patches).")
ModelOpt = typer.Option(..., "--model", help="Model folder or hub name (for --engine openai: the served model name).")
OutOpt = typer.Option(..., "--out", help="Run folder: trajectories/*.parquet, summary.json; a rerun resumes it.")
# options `rollout` and `eval` share
ConcurrencyOpt = typer.Option(4, "--concurrency", "-j", min=1, max=4096, help="Trajectories (sandboxes) at once.")
MaxTurnsOpt = typer.Option(40, "--max-turns", min=1, max=1000, help="Replies per trajectory (T_max).")
MaxContextOpt = typer.Option(None, "--max-context", min=64, help="Token budget per trajectory (default: the model's).")
MaxNewTokensOpt = typer.Option(1024, "--max-new-tokens", min=1, help="Tokens per reply at most.")
CommandTimeoutOpt = typer.Option(60.0, "--command-timeout", min=1, help="Seconds per sandbox command.")
DeadlineOpt = typer.Option(1800.0, "--deadline", min=1, help="Wall-clock seconds per trajectory.")
SeedOpt = typer.Option(0, "--seed", help="Base sampling seed.")
BaseUrlOpt = typer.Option(None, "--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1.")
TokenizerOpt = typer.Option(None, "--tokenizer", help="Tokenizer folder or name (default: --model).")
PolicyVersionOpt = typer.Option("0", "--policy-version", help="Recorded on every trajectory.")
PromptDirOpt = typer.Option(None, "--prompt-dir", help="Folder overriding the prompt templates (<name>.j2).")
TorchThreadsOpt = typer.Option(None, "--torch-threads", min=1, help="Engine hf on CPU: torch threads of the decoding thread "
                               "(default: torch's; 1 is fastest for a small model beside busy sandboxes).")


def _stage(tasks: Path, model: str, engine: str, samples: int, out: Path, repos: Optional[Path], ca_cert: Optional[list[Path]],
           concurrency: int, max_turns: int, max_context: Optional[int], max_new_tokens: int, command_timeout: float,
           deadline: float, seed: Optional[int], base_url: Optional[str], tokenizer: Optional[str], grade: bool,
           policy_version: str, skip_invalid: bool, log_dir: Path, prompt_dir: Optional[Path], torch_threads: Optional[int]):
    from swerl.stages.rollout import RolloutStage

    if engine not in ("hf", "vllm", "openai", "scripted"):
        _fail(f"--engine {engine!r} is not one of hf, vllm, openai, scripted")
    _docker_ready()
    return RolloutStage(tasks=tasks, repos=repos, ca_certs=ca_cert, model=model, engine=engine, samples=samples, out=out,
                        concurrency=concurrency, max_turns=max_turns, max_context=max_context, max_new_tokens=max_new_tokens,
                        command_timeout_s=command_timeout, deadline_s=deadline, seed=seed, base_url=base_url, tokenizer=tokenizer,
                        grade=grade, policy_version=policy_version, log_dir=log_dir, prompt_dir=prompt_dir,
                        skip_invalid=skip_invalid, torch_threads=torch_threads)


def _run(stage, evaluate: bool):
    """Run the stage with a progress bar; print what the rollout did."""
    from swerl.stages import StageInputError
    from swerl.stages.rollout import run_eval, run_rollout

    with contextlib.ExitStack() as stack:
        advance: list = []

        def start(n: int) -> None:
            advance.append(stack.enter_context(bar("rollouts", n)))

        def done(t) -> None:
            mark = {True: "resolved", False: "unresolved", None: "ungraded"}[t.resolved]
            advance[0](f"{t.trajectory_id} {t.exit_reason.value} {mark}")

        def built(o) -> None:
            if o.error:
                console.print(f"[red]build failed[/] {o.instance_id}: {o.error}")

        try:
            if evaluate:
                report, result = run_eval(stage, on_done=done, on_start=start, on_build=built)
            else:
                report, result = None, run_rollout(stage, on_done=done, on_start=start, on_build=built)
        except StageInputError as e:
            _fail(str(e))
    summary = result.summary
    console.print(
        f"{summary.produced} new trajectories ({summary.skipped} already done): exits {summary.exit_reasons}; "
        f"resolved {summary.resolved}/{summary.graded} graded; generation {summary.generation_s:.1f}s, "
        f"environment {summary.environment_s:.1f}s, sandboxes {summary.sandbox_s:.1f}s (summed over trajectories); wall {summary.wall_s:.1f}s; store {result.store}"
    )
    return summary, report


@app.command("rollout")
def rollout_cmd(
    tasks: Path = TasksOpt, model: str = ModelOpt, engine: str = EngineOpt,
    samples: int = typer.Option(1, "--samples", "-G", min=1, max=1024, help="Trajectories per task."),
    out: Path = OutOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    concurrency: int = ConcurrencyOpt,
    max_turns: int = MaxTurnsOpt,
    max_context: Optional[int] = MaxContextOpt,
    max_new_tokens: int = MaxNewTokensOpt,
    command_timeout: float = CommandTimeoutOpt,
    deadline: float = DeadlineOpt,
    seed: Optional[int] = SeedOpt,
    base_url: Optional[str] = BaseUrlOpt,
    tokenizer: Optional[str] = TokenizerOpt,
    grade: bool = typer.Option(True, "--grade/--no-grade", help="Grade every trajectory in a fresh sandbox."),
    policy_version: str = PolicyVersionOpt,
    skip_invalid: bool = SkipOpt, log_dir: Path = LogDirOpt,
    prompt_dir: Optional[Path] = PromptDirOpt,
    torch_threads: Optional[int] = TorchThreadsOpt,
) -> None:
    """Roll the agent out on a task set: G samples per task, graded, appended to Parquet (resumable)."""
    summary, _ = _run(_stage(tasks, model, engine, samples, out, repos, ca_cert, concurrency, max_turns, max_context, max_new_tokens,
                             command_timeout, deadline, seed, base_url, tokenizer, grade, policy_version, skip_invalid, log_dir,
                             prompt_dir, torch_threads), evaluate=False)
    raise typer.Exit(1 if summary.exit_reasons.get("error") else 0)


@app.command("eval")
def eval_cmd(
    tasks: Path = TasksOpt, model: str = ModelOpt, engine: str = EngineOpt,
    runs: int = typer.Option(1, "--runs", "-k", min=1, max=1024, help="Independent runs per task (the paper: 10)."),
    out: Path = OutOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    concurrency: int = ConcurrencyOpt,
    max_turns: int = MaxTurnsOpt,
    max_context: Optional[int] = MaxContextOpt,
    max_new_tokens: int = MaxNewTokensOpt,
    command_timeout: float = CommandTimeoutOpt,
    deadline: float = DeadlineOpt,
    seed: Optional[int] = SeedOpt,
    base_url: Optional[str] = BaseUrlOpt,
    tokenizer: Optional[str] = TokenizerOpt,
    policy_version: str = PolicyVersionOpt,
    skip_invalid: bool = SkipOpt, log_dir: Path = LogDirOpt,
    prompt_dir: Optional[Path] = PromptDirOpt,
    torch_threads: Optional[int] = TorchThreadsOpt,
) -> None:
    """Pass@1 as the mean over k runs with its standard error, and unbiased Pass@k; writes eval.json."""
    _, report = _run(_stage(tasks, model, engine, runs, out, repos, ca_cert, concurrency, max_turns, max_context, max_new_tokens,
                            command_timeout, deadline, seed, base_url, tokenizer, True, policy_version, skip_invalid, log_dir,
                            prompt_dir, torch_threads), evaluate=True)
    ks = ", ".join(f"Pass@{k} {v:.1%}" for k, v in report.pass_at_k.items())
    print(f"Pass@1 = {report.pass_at_1:.1%} ± {report.pass_at_1_sem:.1%} (mean ± SEM over {runs} runs, {report.tasks} tasks); {ks}")
    if report.infra_failed:
        console.print(f"[yellow]{report.infra_failed} trajectories failed for infrastructure (a sandbox that never "
                      "started, a grading with no verdict): left out of Pass@1 and Pass@k, not counted unresolved; "
                      "a rerun with the same --out redoes them[/]")
    if report.ungraded:
        console.print(f"[yellow]{report.ungraded} trajectories were not graded and count as unresolved[/]")
