"""The run summary a person reads: what each pipeline stage did, in words, and why the
numbers are what they are.

Pure functions from stage facts (a ledger entry plus what the stage's trajectories show) to
lines. The pipeline prints each stage's line as the stage ends, logs it where `swerl follow`
finds it, and writes the whole summary as a Prefect markdown artifact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from swerl.agent.trajectory import Trajectory
from swerl.orchestration.artifact_keys import artifact_key

SET_NAMES = {"train": "training", "eval": "evaluation", "warm": "warm-up"}
SCRIPTED = "the scripted policy (gold-patch replays)"


@dataclass(frozen=True)
class Behaviour:
    """What a policy did in one stage's trajectories."""

    trajectories: int
    resolved: int
    exits: Mapping[str, int]
    replies: int
    no_command: int = 0  # replies without the one fenced command the agent needs
    cut: int = 0  # replies that ran on past their command and were cut there (AgentConfig.end_reply_at_command)
    graded: int | None = None  # trajectories with a verdict; None: not counted (all of them)


def behaviour_of(trajectories: Sequence[Trajectory]) -> Behaviour:
    return Behaviour(trajectories=len(trajectories), resolved=sum(1 for t in trajectories if t.resolved),
                     exits=dict(Counter(t.exit_reason.value for t in trajectories)),
                     replies=sum(len(t.turns) for t in trajectories),
                     no_command=sum(1 for t in trajectories for turn in t.turns if turn.command is None),
                     cut=sum(1 for t in trajectories for turn in t.turns if turn.dropped_tokens),
                     graded=sum(1 for t in trajectories if t.resolved is not None))


def duration(seconds: float) -> str:
    """``7s``, ``3m 06s``, ``1h 02m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def plural(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``, ``3 trajectories``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else f"{n} {noun}s"


def _exits(exits: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(exits.items(), key=lambda kv: (-kv[1], kv[0])))


def behaviour_words(b: Behaviour) -> str:
    """``0/18 resolved; exits: 18 format_errors; 72/72 replies had no command``."""
    if b.trajectories == 0:
        return "no trajectory"
    verdicts = f"{b.resolved}/{b.trajectories} resolved" if b.graded != 0 else "not graded"
    words = [verdicts, f"exits: {_exits(b.exits)}"]
    if b.no_command:
        words.append(f"{b.no_command}/{b.replies} replies had no command")
    if b.cut:
        words.append(f"{b.cut}/{b.replies} replies ran on past their command and were cut there")
    return "; ".join(words)


def sampler_words(engine: str, policy_version: str, sampled_by: Mapping[str, int] | None = None) -> str:
    """Who produced a stage's trajectories: its policy, or (an asynchronous iteration's rollouts, which began on the
    policy before and loaded the new one when it landed) each policy that sampled first turns, with how many."""
    if engine == "scripted":
        return SCRIPTED
    if sampled_by and set(sampled_by) != {policy_version}:
        return "policies " + " and ".join(f"{version} ({n})" for version, n in sampled_by.items())
    return f"policy {policy_version}"


@dataclass(frozen=True)
class ImagesFacts:
    name: str
    sets: Mapping[str, tuple[int, int]]  # task set -> (images ready, of which built by this run)

    def words(self) -> str:
        return "; ".join(f"{plural(ready, 'image')} ready for the {SET_NAMES.get(key, key)} tasks ({built} built, {ready - built} reused)"
                         for key, (ready, built) in self.sets.items())


@dataclass(frozen=True)
class ValidationFacts:
    name: str
    sets: Mapping[str, tuple[int, int, tuple[str, ...]]]  # task set -> (valid, total, dropped instance ids)
    reports: Mapping[str, str] = field(default_factory=dict)

    def words(self) -> str:
        out = []
        for key, (valid, total, dropped) in self.sets.items():
            line = f"{valid}/{total} {SET_NAMES.get(key, key)} tasks valid"
            if dropped:
                shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
                line += f", {len(dropped)} dropped: {shown} (reasons in {self.reports.get(key, 'the validation report')})"
            out.append(line)
        return "; ".join(out) + " (valid: the gold patch passes the tests, the unpatched repository fails them)"


@dataclass(frozen=True)
class TrainFacts:
    name: str
    sampler: str
    behaviour: Behaviour | None
    trained: bool
    policy: str  # the new policy, or the one carried forward
    reason: str | None = None
    steps: int | None = None
    kept: int | None = None

    @property
    def scripted(self) -> bool:
        return self.sampler == SCRIPTED

    def words(self) -> str:
        ran = f"{self.sampler} ran {plural(self.behaviour.trajectories, 'trajectory')} ({behaviour_words(self.behaviour)})" \
            if self.behaviour else f"{self.sampler} sampled"
        if self.trained:
            on = f" on {plural(self.kept, 'trajectory')}" if self.kept is not None else ""
            steps = f" {plural(self.steps, 'step')}" if self.steps is not None else ""
            return f"{ran}; trained{steps}{on} -> policy {self.policy}"
        return f"{ran}; trained nothing, policy {self.policy} carries forward: {self.reason}"


@dataclass(frozen=True)
class EvalFacts:
    name: str
    policy: str
    pass_at_1: float
    pass_at_1_sem: float
    runs: int
    tasks: int
    behaviour: Behaviour | None = None
    promoted: bool | None = None

    def words(self) -> str:
        from swerl.eval.report import pass_at_1_text

        words = [f"policy {self.policy}: Pass@1 {pass_at_1_text(self.pass_at_1, self.pass_at_1_sem, self.runs)} "
                 f"({plural(self.runs, 'run')} of {plural(self.tasks, 'task')})"]
        if self.behaviour:
            words.append(behaviour_words(self.behaviour))
        if self.promoted is not None:
            words.append("champion is this policy" if self.promoted else "champion stays (this policy is no better)")
        return "; ".join(words)


StageFacts = Union[ImagesFacts, ValidationFacts, TrainFacts, EvalFacts]


# --- from ledger entries -----------------------------------------------------------------------


def images_facts(name: str, result: Mapping[str, Any]) -> ImagesFacts:
    """From the images stage's entry: {set: {"ready", "cached", "cache_hit"}} (a Prefect cache hit reuses all)."""
    sets = {}
    for key, r in result.items():
        if isinstance(r, Mapping) and "ready" in r:
            reused = r["ready"] if r.get("cache_hit") else r.get("cached", 0)
            sets[key] = (int(r["ready"]), int(r["ready"]) - int(reused))
    return ImagesFacts(name, sets)


def validation_facts(name: str, result: Mapping[str, Any]) -> ValidationFacts:
    sets, reports = {}, {}
    for key, r in result.items():
        if isinstance(r, Mapping) and "valid" in r:
            sets[key] = (int(r["valid"]), int(r["total"]), tuple(r.get("invalid") or ()))
            if r.get("report"):
                reports[key] = str(r["report"])
    return ValidationFacts(name, sets, reports)


def train_facts(name: str, result: Mapping[str, Any], sampler: str, behaviour: Behaviour | None) -> TrainFacts:
    """From an RFT, warm-start or DAPO entry: {"trained", "reason", "policy", "metrics"}."""
    metrics = result.get("metrics") or {}
    steps, kept = metrics.get("train/steps"), metrics.get("rft/kept", metrics.get("data/rows"))
    return TrainFacts(name, sampler, behaviour, bool(result["trained"]), str(result["policy"]["policy_version"]),
                      reason=result.get("reason"), steps=None if steps is None else int(steps),
                      kept=None if kept is None else int(kept))


def eval_facts(name: str, result: Mapping[str, Any], behaviour: Behaviour | None) -> EvalFacts:
    """From an evaluation entry: {"metrics": {"eval/pass_at_1", ...}, "policy", "promoted"}."""
    m = result["metrics"]
    return EvalFacts(name, str(result["policy"]["policy_version"]), float(m["eval/pass_at_1"]),
                     float(m.get("eval/pass_at_1_sem", 0.0)), int(m.get("eval/runs", 0)), int(m.get("eval/tasks", 0)),
                     behaviour, result.get("promoted"))


def stage_line(facts: StageFacts, seconds: float | None = None, skipped: bool = False) -> str:
    """``eval-rft (2m 29s): policy rft: Pass@1 ...``; a stage from an earlier run says so instead of its time."""
    when = " (finished in an earlier run)" if skipped else (f" ({duration(seconds)})" if seconds is not None else "")
    return f"{facts.name}{when}: {facts.words()}"


# --- the verdict --------------------------------------------------------------------------------


def _curve(evals: Sequence[EvalFacts]) -> str:
    return "Pass@1 per stage: " + " -> ".join(f"{e.name.removeprefix('eval-')} {e.pass_at_1:.1%}" for e in evals) + "."


def _plumbing(stages: Sequence[StageFacts]) -> str | None:
    shown = []
    for s in stages:
        if isinstance(s, ImagesFacts):
            shown.append(f"{plural(sum(r for r, _ in s.sets.values()), 'image')} ready")
        elif isinstance(s, ValidationFacts):
            shown.append(f"{sum(v for v, _, _ in s.sets.values())}/{sum(t for _, t, _ in s.sets.values())} tasks valid "
                         "(gold patches pass in sandboxes)")
        elif isinstance(s, TrainFacts) and s.scripted and s.behaviour and s.behaviour.resolved:
            shown.append(f"the scripted policy resolved {s.behaviour.resolved}/{plural(s.behaviour.trajectories, 'trajectory')} "
                         f"in {s.name}")
    return ("The plumbing works: " + "; ".join(shown) + ".") if shown else None


def _why_zero(evals: Sequence[EvalFacts]) -> str | None:
    if not evals or any(e.pass_at_1 > 0 for e in evals):
        return None
    seen = [e.behaviour for e in evals if e.behaviour]
    replies, silent = sum(b.replies for b in seen), sum(b.no_command for b in seen)
    exits = Counter()
    for b in seen:
        exits.update(b.exits)
    why = "Why every evaluation scored 0%: "
    if replies and silent == replies:
        return (why + f"the evaluated policies never wrote a command ({silent}/{replies} replies had no fenced command "
                f"block), so no task could be fixed (exits: {_exits(exits)}). A reply must end with one fenced command: "
                "start from a model that does (`model`), or warm-start the tiny one on demonstrations (`warm_start`, as "
                "deployments/learning.yaml does).")
    if replies and 2 * silent > replies:
        return why + f"most replies had no command ({silent}/{replies}); exits: {_exits(exits)}."
    return why + (f"the policies ran commands but fixed no task (exits: {_exits(exits)})." if seen else "no task was fixed.")


def _untrained(trains: Sequence[TrainFacts]) -> str | None:
    idle = [t for t in trains if not t.trained]
    if not idle:
        return None
    names = ", ".join(t.name for t in idle)
    return (f"{names} trained nothing ({len(idle)} of {plural(len(trains), 'training stage')}), so the policy carried forward: "
            f"{(idle[0].reason or 'no reason recorded').rstrip('.')}.")


def verdict(stages: Sequence[StageFacts]) -> list[str]:
    """What the run shows as a whole: the Pass@1 curve, the evidence that the plumbing works,
    why the numbers are zero when they are, and which stages trained nothing."""
    evals = [s for s in stages if isinstance(s, EvalFacts)]
    trains = [s for s in stages if isinstance(s, TrainFacts)]
    lines = [_curve(evals)] if evals else []
    return lines + [line for line in (_plumbing(stages), _why_zero(evals), _untrained(trains)) if line]


def where_to_look(run_dir: Path, mlflow_run: str, name: str) -> list[str]:
    return [f"trajectories (every reply, command and observation; Parquet): {run_dir}/eval/<stage>/trajectories, "
            f"{run_dir}/rft/rollout/trajectories, {run_dir}/iter-<k>/rollout/trajectories",
            f"stage ledger {run_dir}/ledger.json; validation reports {run_dir}/validation*.json",
            f"MLflow: parent run {mlflow_run} and a child run per stage",
            f"Prefect: this flow run's artifacts {artifact_key('summary', name)} and {artifact_key('metrics', name)}, and a subflow run per "
            "stage (eval-start, rft, iter-1, ...)"]


def pass_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metrics table's rows as console lines: ``     rft  policy rft      Pass@1 12.5% ± 2.1%  trained yes``."""
    lines = []
    for row in rows:
        p1, sem = row.get("pass_at_1"), row.get("pass_at_1_sem")
        shown = "-" if p1 is None else f"{p1:.1%}" + ("" if sem is None else f" ± {sem:.1%}")
        trained = "" if row.get("trained") is None else f"  trained {'yes' if row['trained'] else 'no'}"
        lines.append(f"{row['stage']:>8}  policy {row['policy']:<8} Pass@1 {shown}{trained}")
    return lines


def per_task_outcomes(run_dir: Path, stages: Sequence[str]) -> dict[str, dict[str, list[bool | None]]]:
    """Each evaluated stage's ``{instance_id: [resolved per run]}`` from its ``eval/eval-<stage>/eval.json``, in order."""
    import json

    reports = {stage: Path(run_dir) / "eval" / f"eval-{stage}" / "eval.json" for stage in stages}
    return {stage: json.loads(f.read_text(encoding="utf-8"))["per_task"] for stage, f in reports.items() if f.is_file()}


def rise_lines(per_task: Mapping[str, Mapping[str, Sequence[bool | None]]]) -> list[str]:
    """The rises of held-out Pass@1 a learning run is judged by, start -> RFT and RFT -> the last evaluated
    iteration, each in points and in standard errors paired over tasks (which tasks were drawn counts too).

    ``per_task``: each evaluated stage's ``{instance_id: [resolved per run]}``, in the order the stages ran.
    """
    from swerl.eval.metrics import paired_difference

    stages = list(per_task)
    last = next((s for s in reversed(stages) if s.startswith("iter-")), None)
    lines = []
    for before, after in (("start", "rft"), ("rft", last)):
        if before not in per_task or after not in per_task:
            continue
        try:
            rise, sem = paired_difference(per_task[before], per_task[after])
        except ValueError:  # different task sets (a resumed run with other tasks): no paired figure
            continue
        ratio = f"{rise / sem:+.1f} SE" if sem else "no spread"
        lines.append(f"held-out Pass@1 {before} -> {after}: {100 * rise:+.1f} points, {ratio} paired over "
                     f"{len(per_task[before])} tasks (SE {100 * sem:.1f} points)")
    return lines


def literal(text: str) -> str:
    """``text`` as Markdown that renders as written: ``<`` and ``>`` escaped, so a renderer does not take
    ``runs/x/eval/<stage>/trajectories`` for an HTML tag and drop it."""
    return text.replace("<", "\\<").replace(">", "\\>")


def summary_markdown(name: str, stages: Sequence[StageFacts], where: Sequence[str]) -> str:
    """The summary as a Prefect markdown artifact: a table of stages, the verdict, where to look."""
    cell = lambda text: literal(text).replace("|", "\\|")  # noqa: E731 - a table cell must not end the row
    rows = "\n".join(f"| {s.name} | {cell(s.words())} |" for s in stages)
    verdict_md = "\n".join(f"- {literal(line)}" for line in verdict(stages))
    where_md = "\n".join(f"- {literal(line)}" for line in where)
    return (f"# Pipeline {name}\n\n| stage | what happened |\n|---|---|\n{rows}\n\n## Verdict\n\n{verdict_md}\n\n"
            f"## Where to look\n\n{where_md}\n")


def summary_lines(name: str, stages: Sequence[StageFacts], where: Sequence[str]) -> list[str]:
    """The summary for a console: the verdict, then where to look (each stage's line came as it ended)."""
    return [f"summary of pipeline {name}:"] + [f"  {line}" for line in verdict(stages)] + \
        ["where to look:"] + [f"  {line}" for line in where]


def promotion_words(promote: bool, version: str | None, pass_at_1: float, before: tuple[str | None, float | None],
                    moved: bool | None, force: bool = False) -> str:
    """What an evaluation did to ``champion`` and why: ``before`` is (version, its Pass@1) as it stood."""
    if not promote:
        return "champion not considered (promote is off)"
    if version is None:
        return "champion not considered (the evaluated model is no registered version)"
    held, best = before
    was = "none" if held is None else f"version {held}" + ("" if best is None else f" (Pass@1 {best:.1%})")
    if held == version:
        return f"champion is this version (Pass@1 now {pass_at_1:.1%})"
    if moved:
        why = "forced" if force else "there was none" if held is None else "strictly better"
        return f"champion moved: {was} -> version {version} (Pass@1 {pass_at_1:.1%}, {why})"
    return f"champion stays {was}: version {version} scored {pass_at_1:.1%}, not strictly better"
