"""`swerl rollout` and `swerl eval`: the agent on a task set, trajectories to Parquet, Pass@k."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from swerl.cli import CaOpt, LogDirOpt, ReposOpt, SkipOpt, TasksOpt, _build, _docker_ready, _fail, _image_config, _load, app, console
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


def _run(
    tasks: Path, model: str, engine: str, samples: int, out: Path, repos: Optional[Path], ca_cert: Optional[list[Path]],
    concurrency: int, max_turns: int, max_context: Optional[int], max_new_tokens: int, command_timeout: float,
    deadline: float, seed: Optional[int], base_url: Optional[str], tokenizer: Optional[str], grade: bool,
    policy_version: str, skip_invalid: bool, log_dir: Path, prompt_dir: Optional[Path],
):
    from swerl.agent.chat_format import ChatFormat, ChatTemplateError
    from swerl.agent.loop import AgentConfig
    from swerl.grading.grader import GradingConfig
    from swerl.inference.base import EngineError
    from swerl.inference.factory import load_tokenizer, make_engine
    from swerl.inference.scripted import script_from_patch
    from swerl.rollout.runner import RolloutConfig, rollout

    if engine not in ("hf", "vllm", "openai", "scripted"):
        _fail(f"--engine {engine!r} is not one of hf, vllm, openai, scripted")
    _docker_ready()
    task_list = _load(tasks, skip_invalid)
    try:
        tok = load_tokenizer(tokenizer or model)
        chat = ChatFormat(tok)
    except (EngineError, ChatTemplateError) as e:
        _fail(str(e))
    outcomes = _build(task_list, _image_config(repos, ca_cert, concurrency, log_dir))
    images = {iid: o.image for iid, o in outcomes.items() if o.image and not o.error}
    scripts = {t.instance_id: script_from_patch(t.patch) for t in task_list} if engine == "scripted" else None
    try:
        eng = make_engine(engine, model, tokenizer=tok, base_url=base_url, max_context=max_context,
                          policy_version=policy_version, scripts=scripts)
    except EngineError as e:
        _fail(str(e))
    config = RolloutConfig(
        samples=samples, concurrency=concurrency, seed=seed, grade=grade, model_name=model,
        agent=AgentConfig(max_turns=max_turns, max_context=max_context, max_new_tokens=max_new_tokens,
                          command_timeout_s=command_timeout, deadline_s=deadline, prompt_dir=prompt_dir),
        grading=GradingConfig(log_dir=log_dir / "grading"),
    )
    store_dir = out / "trajectories"
    try:
        with bar("rollouts", len(task_list) * samples) as advance:
            def done(t) -> None:
                mark = {True: "resolved", False: "unresolved", None: "ungraded"}[t.resolved]
                advance(f"{t.trajectory_id} {t.exit_reason.value} {mark}")

            summary = rollout(task_list, images, eng, chat, config, store_dir, on_done=done)
    finally:
        eng.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(summary.model_dump_json(indent=2))
    console.print(
        f"{summary.produced} new trajectories ({summary.skipped} already done): exits {summary.exit_reasons}; "
        f"resolved {summary.resolved}/{summary.graded} graded; generation {summary.generation_s:.1f}s, "
        f"environment {summary.environment_s:.1f}s, sandboxes {summary.sandbox_s:.1f}s (summed over trajectories); wall {summary.wall_s:.1f}s; store {store_dir}"
    )
    return summary, store_dir, task_list


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
) -> None:
    """Roll the agent out on a task set: G samples per task, graded, appended to Parquet (resumable)."""
    summary, _, _ = _run(tasks, model, engine, samples, out, repos, ca_cert, concurrency, max_turns, max_context, max_new_tokens,
                      command_timeout, deadline, seed, base_url, tokenizer, grade, policy_version, skip_invalid, log_dir, prompt_dir)
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
) -> None:
    """Pass@1 as the mean over k runs with its standard error, and unbiased Pass@k; writes eval.json."""
    from swerl.eval.report import build_report
    from swerl.rollout.store import TrajectoryStore

    _, store_dir, task_list = _run(tasks, model, engine, runs, out, repos, ca_cert, concurrency, max_turns, max_context, max_new_tokens,
                        command_timeout, deadline, seed, base_url, tokenizer, True, policy_version, skip_invalid, log_dir, prompt_dir)
    wanted = {t.instance_id for t in task_list}
    trajectories = [t for t in TrajectoryStore(store_dir).trajectories() if t.instance_id in wanted]
    try:
        report = build_report(trajectories, runs)
    except ValueError as e:
        _fail(f"{e} (trajectories in {store_dir})")
    (out / "eval.json").write_text(json.dumps(report.model_dump(), indent=2))
    ks = ", ".join(f"Pass@{k} {v:.1%}" for k, v in report.pass_at_k.items())
    print(f"Pass@1 = {report.pass_at_1:.1%} ± {report.pass_at_1_sem:.1%} (mean ± SEM over {runs} runs, {report.tasks} tasks); {ks}")
    if report.ungraded:
        console.print(f"[yellow]{report.ungraded} trajectories could not be graded (infrastructure) and count as unresolved[/]")
