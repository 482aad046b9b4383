"""`swerl rollout` and `swerl eval`: the agent on a task set, trajectories to Parquet, Pass@k."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from swerl.agent.loop import AgentConfig
from swerl.cli.common import CaOpt, LogDirOpt, ReposOpt, SkipOpt, TasksOpt, docker_ready, fail, console
from swerl.cli.options import OptionGroup, config_options, field_option, validated
from swerl.cli.progress import bar
from swerl.envs.docker_sandbox import DockerSandboxConfig
from swerl.grading.grader import GradingConfig
from swerl.inference.base import SamplingConfig
from swerl.inference.config import EngineSettings
from swerl.rollout.sampler import agent_sandbox
from swerl.stages.rollout import RolloutStage, SamplerConfig

ModelOpt = typer.Option(..., "--model", help="Model folder or hub name (for --engine openai: the served model name).")
OutOpt = typer.Option(..., "--out", help="Run folder: trajectories/*.parquet, summary.json; a rerun resumes it.")
# the stage's own options; the components' (engine, agent, sampling, sandbox) come from their models below
SeedOpt = field_option(RolloutStage, "seed", "--seed")
TokenizerOpt = field_option(RolloutStage, "tokenizer", "--tokenizer")
PolicyVersionOpt = field_option(RolloutStage, "policy_version", "--policy-version")

SAMPLER = OptionGroup("sampler", SamplerConfig, panel="Engine", short={"concurrency": "-j"})
# the engine's settings, of whichever engine --engine names; vLLM's global seed is --engine-seed beside the stage's --seed
ENGINE = OptionGroup("engine", EngineSettings, panel="Engine", rename={"kind": "engine", "give_up": "demo-give-up",
                                                                       "seed": "engine-seed"})
AGENT = OptionGroup("agent", AgentConfig, panel="Agent")
SAMPLING = OptionGroup("sampling", SamplingConfig, panel="Sampling")
# the docker backend's settings over an agent's defaults; run_id is the stage's own label, kind is docker's
SANDBOX = OptionGroup("sandbox", DockerSandboxConfig, panel="Sandbox (docker)", prefix="sandbox-", skip=("kind", "run_id"),
                      preset=agent_sandbox)
# the stage's --log-dir holds the grading logs; tests for an empty patch are validation's
GRADING = OptionGroup("grading", GradingConfig, panel="Grading", skip=("grading_logs", "run_tests_without_patch"))
COMPONENTS = (SAMPLER, ENGINE, AGENT, SAMPLING, SANDBOX, GRADING)


def _stage(tasks: Path, model: str, samples: int, out: Path, repos: Optional[Path], ca_cert: Optional[list[Path]],
           seed: int, tokenizer: Optional[str], grade: bool, policy_version: Optional[str], skip_invalid: bool, log_dir: Path,
           components: dict[str, dict]):
    """The stage the options describe; refused (exit 2) before Docker is touched when a setting or a rule is broken."""
    sandbox = {**SANDBOX.defaults(), **components["sandbox"]}
    sampler = validated(SamplerConfig, "rollout", **components["sampler"], engine=components["engine"], agent=components["agent"],
                        sampling=components["sampling"], sandbox=sandbox, grading=components["grading"])
    # the rollout builds its missing images as many at once as it runs sandboxes (-j)
    images = {"ca_certs": ca_cert, "builds": min(sampler.concurrency, 64)}
    stage = validated(RolloutStage, "rollout", tasks=tasks, repos=repos, images=images, model=model, samples=samples,
                      out=out, seed=seed, tokenizer=tokenizer, grade=grade, policy_version=policy_version, log_dir=log_dir,
                      skip_invalid=skip_invalid, sampler=sampler)
    docker_ready()
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
            fail(str(e))
    summary = result.summary
    console.print(
        f"{summary.produced} new trajectories ({summary.skipped} already done): exits {summary.exit_reasons}; "
        f"resolved {summary.resolved}/{summary.graded} graded; generation {summary.generation_s:.1f}s, "
        f"environment {summary.environment_s:.1f}s, sandboxes {summary.sandbox_s:.1f}s, grading {summary.grading_s:.1f}s (summed over trajectories); wall {summary.wall_s:.1f}s; store {result.store}"
    )
    return summary, report


@config_options(*COMPONENTS)
def rollout_cmd(
    tasks: Path = TasksOpt, model: str = ModelOpt,
    samples: int = typer.Option(1, "--samples", "-G", min=1, max=1024, help="Trajectories per task."),
    out: Path = OutOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    seed: int = SeedOpt,
    tokenizer: Optional[str] = TokenizerOpt,
    grade: bool = typer.Option(True, "--grade/--no-grade", help="Grade every trajectory in a fresh sandbox."),
    policy_version: Optional[str] = PolicyVersionOpt,
    skip_invalid: bool = SkipOpt, log_dir: Path = LogDirOpt,
    sampler: dict = {}, engine: dict = {}, agent: dict = {}, sampling: dict = {}, sandbox: dict = {},  # noqa: B006
    grading: dict = {},  # noqa: B006 (config_options fills them)
) -> None:
    """Roll the agent out on a task set: G samples per task, graded, appended to Parquet (resumable)."""
    components = dict(sampler=sampler, engine=engine, agent=agent, sampling=sampling, sandbox=sandbox, grading=grading)
    summary, _ = _run(_stage(tasks, model, samples, out, repos, ca_cert, seed, tokenizer, grade, policy_version, skip_invalid,
                             log_dir, components), evaluate=False)
    raise typer.Exit(1 if summary.exit_reasons.get("error") else 0)


@config_options(*COMPONENTS)
def eval_cmd(
    tasks: Path = TasksOpt, model: str = ModelOpt,
    runs: int = typer.Option(1, "--runs", "-k", min=1, max=1024, help="Independent runs per task (the paper: 10)."),
    out: Path = OutOpt, repos: Optional[Path] = ReposOpt, ca_cert: Optional[list[Path]] = CaOpt,
    seed: int = SeedOpt,
    tokenizer: Optional[str] = TokenizerOpt,
    policy_version: Optional[str] = PolicyVersionOpt,
    skip_invalid: bool = SkipOpt, log_dir: Path = LogDirOpt,
    sampler: dict = {}, engine: dict = {}, agent: dict = {}, sampling: dict = {}, sandbox: dict = {},  # noqa: B006
    grading: dict = {},  # noqa: B006 (config_options fills them)
) -> None:
    """Pass@1 as the mean over k runs with its standard error, and unbiased Pass@k; writes eval.json."""
    components = dict(sampler=sampler, engine=engine, agent=agent, sampling=sampling, sandbox=sandbox, grading=grading)
    _, report = _run(_stage(tasks, model, runs, out, repos, ca_cert, seed, tokenizer, True, policy_version, skip_invalid,
                            log_dir, components), evaluate=True)
    ks = ", ".join(f"Pass@{k} {v:.1%}" for k, v in report.pass_at_k.items())
    from swerl.eval.report import pass_at_1_text

    print(f"Pass@1 = {pass_at_1_text(report.pass_at_1, report.pass_at_1_sem, runs)} (over {runs} runs, {report.tasks} tasks); {ks}")
    if report.infra_failed:
        console.print(f"[yellow]{report.infra_failed} trajectories failed for infrastructure (a sandbox that never "
                      "started, a grading with no verdict): left out of Pass@1 and Pass@k, not counted unresolved; "
                      "a rerun with the same --out redoes them[/]")
    if report.ungraded:
        console.print(f"[yellow]{report.ungraded} trajectories were not graded and count as unresolved[/]")
