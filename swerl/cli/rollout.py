"""`swerl rollout` and `swerl eval`: the agent on a task set, trajectories to Parquet, Pass@k."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from swerl.agent.loop import AgentConfig
from swerl.cli import CaOpt, LogDirOpt, ReposOpt, SkipOpt, TasksOpt, _docker_ready, _fail, app, console
from swerl.cli.options import field_option, validated
from swerl.cli.progress import bar
from swerl.inference.base import SamplingConfig
from swerl.stages.rollout import RolloutStage, SamplerConfig

EngineOpt = field_option(SamplerConfig, "engine", "--engine")
ModelOpt = typer.Option(..., "--model", help="Model folder or hub name (for --engine openai: the served model name).")
OutOpt = typer.Option(..., "--out", help="Run folder: trajectories/*.parquet, summary.json; a rerun resumes it.")
# options `rollout` and `eval` share, each declared by the config field it sets
ConcurrencyOpt = field_option(SamplerConfig, "concurrency", "--concurrency", "-j")
MaxTurnsOpt = field_option(AgentConfig, "max_turns", "--max-turns")
MaxContextOpt = field_option(AgentConfig, "max_context", "--max-context")
MaxNewTokensOpt = field_option(AgentConfig, "max_new_tokens", "--max-new-tokens")
CommandTimeoutOpt = field_option(AgentConfig, "command_timeout_s", "--command-timeout")
DeadlineOpt = field_option(AgentConfig, "deadline_s", "--deadline")
SeedOpt = field_option(RolloutStage, "seed", "--seed")
BaseUrlOpt = field_option(SamplerConfig, "base_url", "--base-url")
TokenizerOpt = field_option(RolloutStage, "tokenizer", "--tokenizer")
PolicyVersionOpt = field_option(RolloutStage, "policy_version", "--policy-version")
PromptDirOpt = field_option(AgentConfig, "prompt_dir", "--prompt-dir")
TorchThreadsOpt = field_option(SamplerConfig, "torch_threads", "--torch-threads")
TemperatureOpt = field_option(SamplingConfig, "temperature", "--temperature")


def _stage(tasks: Path, model: str, engine: str, samples: int, out: Path, repos: Optional[Path], ca_cert: Optional[list[Path]],
           concurrency: int, agent: dict, seed: Optional[int], base_url: Optional[str], tokenizer: Optional[str], grade: bool,
           policy_version: str, skip_invalid: bool, log_dir: Path, torch_threads: Optional[int], temperature: float):
    """The stage the options describe; refused (exit 2) before Docker is touched when a setting or a rule is broken."""
    sampler = validated(SamplerConfig, "rollout", engine=engine, base_url=base_url, torch_threads=torch_threads,
                        concurrency=concurrency, agent=agent, sampling={"temperature": temperature})
    stage = validated(RolloutStage, "rollout", tasks=tasks, repos=repos, ca_certs=ca_cert, model=model, samples=samples,
                      out=out, seed=seed, tokenizer=tokenizer, grade=grade, policy_version=policy_version, log_dir=log_dir,
                      skip_invalid=skip_invalid, sampler=sampler)
    _docker_ready()
    return stage


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
    temperature: float = TemperatureOpt,
) -> None:
    """Roll the agent out on a task set: G samples per task, graded, appended to Parquet (resumable)."""
    agent = dict(max_turns=max_turns, max_context=max_context, max_new_tokens=max_new_tokens, command_timeout_s=command_timeout,
                 deadline_s=deadline, prompt_dir=prompt_dir)
    summary, _ = _run(_stage(tasks, model, engine, samples, out, repos, ca_cert, concurrency, agent, seed, base_url, tokenizer,
                             grade, policy_version, skip_invalid, log_dir, torch_threads, temperature), evaluate=False)
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
    temperature: float = TemperatureOpt,
) -> None:
    """Pass@1 as the mean over k runs with its standard error, and unbiased Pass@k; writes eval.json."""
    agent = dict(max_turns=max_turns, max_context=max_context, max_new_tokens=max_new_tokens, command_timeout_s=command_timeout,
                 deadline_s=deadline, prompt_dir=prompt_dir)
    _, report = _run(_stage(tasks, model, engine, runs, out, repos, ca_cert, concurrency, agent, seed, base_url, tokenizer, True,
                            policy_version, skip_invalid, log_dir, torch_threads, temperature), evaluate=True)
    ks = ", ".join(f"Pass@{k} {v:.1%}" for k, v in report.pass_at_k.items())
    print(f"Pass@1 = {report.pass_at_1:.1%} ± {report.pass_at_1_sem:.1%} (mean ± SEM over {runs} runs, {report.tasks} tasks); {ks}")
    if report.infra_failed:
        console.print(f"[yellow]{report.infra_failed} trajectories failed for infrastructure (a sandbox that never "
                      "started, a grading with no verdict): left out of Pass@1 and Pass@k, not counted unresolved; "
                      "a rerun with the same --out redoes them[/]")
    if report.ungraded:
        console.print(f"[yellow]{report.ungraded} trajectories were not graded and count as unresolved[/]")
