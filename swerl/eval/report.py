"""An evaluation report from a rollout store: the figures `swerl eval` prints and saves."""

from __future__ import annotations

from collections import Counter, defaultdict

from pydantic import BaseModel, Field

from swerl.agent.trajectory import Trajectory
from swerl.eval.metrics import mean_pass_at_k, pass_at_1_over_runs


class EvalReport(BaseModel):
    """Pass@1 over runs (mean +- SEM) and unbiased Pass@k for k = 1..runs."""

    tasks: int
    runs: int
    pass_at_1: float
    pass_at_1_sem: float
    pass_at_1_per_run: list[float]
    pass_at_k: dict[int, float]
    ungraded: int = Field(description="Trajectories without a grade (infrastructure errors); counted as unresolved.")
    exit_reasons: dict[str, int]
    mean_turns: float
    per_task: dict[str, list[bool]]


def build_report(trajectories: list[Trajectory], runs: int) -> EvalReport:
    """Score the first ``runs`` samples of every task; a missing sample is an error, never a silent skip."""
    by_task: dict[str, dict[int, Trajectory]] = defaultdict(dict)
    for t in trajectories:
        if t.sample_index < runs:
            by_task[t.instance_id][t.sample_index] = t
    incomplete = {iid: runs - len(s) for iid, s in by_task.items() if len(s) < runs}
    if incomplete:
        raise ValueError(f"missing runs for {len(incomplete)} tasks, e.g. {sorted(incomplete.items())[:3]}; rerun to complete them")
    if not by_task:
        raise ValueError("no trajectories to evaluate")
    outcomes = {iid: [bool(s[r].resolved) for r in range(runs)] for iid, s in sorted(by_task.items())}
    mean, sem, per_run = pass_at_1_over_runs(outcomes)
    chosen = [t for s in by_task.values() for t in s.values()]
    return EvalReport(
        tasks=len(outcomes),
        runs=runs,
        pass_at_1=mean,
        pass_at_1_sem=sem,
        pass_at_1_per_run=per_run,
        pass_at_k={k: mean_pass_at_k(outcomes, k) for k in range(1, runs + 1)},
        ungraded=sum(1 for t in chosen if t.resolved is None),
        exit_reasons=dict(sorted(Counter(t.exit_reason.value for t in chosen).items())),
        mean_turns=sum(t.num_turns for t in chosen) / len(chosen),
        per_task=outcomes,
    )
