"""An evaluation report from a rollout store: the figures `swerl eval` prints and saves.

A pair that failed for infrastructure (``Trajectory.infra_failed``: its sandbox never
started, or grading's sandbox failed) has no verdict: it is left out of Pass@1 and Pass@k
and listed in ``infra_failed``, never counted unresolved. A run that merely ended in an
``error`` is the policy's run and counts unresolved.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pydantic import BaseModel, Field

from swerl.agent.trajectory import Trajectory
from swerl.eval.metrics import Outcome, mean_pass_at_k, pass_at_1_over_runs


class EvalReport(BaseModel):
    """Pass@1 over runs (mean +- SEM) and unbiased Pass@k, over the runs that have a verdict."""

    tasks: int
    runs: int
    pass_at_1: float
    pass_at_1_sem: float
    pass_at_1_per_run: list[float]
    pass_at_k: dict[int, float] = Field(description="k -> Pass@k over the tasks with at least k verdicts.")
    ungraded: int = Field(description="Trajectories without a grade that are not infrastructure failures (the run "
                          "ended in an error before grading); counted as unresolved.")
    infra_failed: int = Field(0, description="Trajectories that failed for infrastructure: no verdict, left out of "
                              "every figure above.")
    infra_failed_ids: list[str] = Field(default_factory=list, description="Their trajectory ids, sorted.")
    exit_reasons: dict[str, int]
    mean_turns: float = Field(description="Mean turns of the trajectories with a verdict.")
    per_task: dict[str, list[Outcome]] = Field(description="instance_id -> resolved per run; null: no verdict "
                                                "(infrastructure failure).")


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
    outcomes = {iid: [None if s[r].infra_failed else bool(s[r].resolved) for r in range(runs)]
                for iid, s in sorted(by_task.items())}
    mean, sem, per_run = pass_at_1_over_runs(outcomes)
    chosen = [t for s in by_task.values() for t in s.values()]
    most_verdicts = max(sum(v is not None for v in runs_of_task) for runs_of_task in outcomes.values())
    failed = sorted(t.trajectory_id for t in chosen if t.infra_failed)
    scored = [t for t in chosen if not t.infra_failed]  # not empty: every run has a verdict somewhere
    return EvalReport(
        tasks=len(outcomes),
        runs=runs,
        pass_at_1=mean,
        pass_at_1_sem=sem,
        pass_at_1_per_run=per_run,
        pass_at_k={k: mean_pass_at_k(outcomes, k) for k in range(1, most_verdicts + 1)},
        ungraded=sum(1 for t in chosen if t.resolved is None and not t.infra_failed),
        infra_failed=len(failed),
        infra_failed_ids=failed,
        exit_reasons=dict(sorted(Counter(t.exit_reason.value for t in chosen).items())),
        mean_turns=sum(t.num_turns for t in scored) / len(scored),
        per_task=outcomes,
    )


def pass_at_1_text(pass_at_1: float, sem: float, runs: int) -> str:
    """Pass@1 as a person reads it: ``12.5% ± 2.1%`` (mean ± SEM over runs); one run has no SEM, so
    ``12.5% (1 run, no SEM)`` rather than a ``± 0.0%`` that reads as no error at all."""
    if runs < 2:
        return f"{pass_at_1:.1%} (1 run, no SEM)"
    return f"{pass_at_1:.1%} ± {sem:.1%}"
