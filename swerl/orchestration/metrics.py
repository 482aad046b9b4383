"""The figures each stage reports to MLflow and Prefect, as pure functions of its outputs."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from swerl.agent.trajectory import Trajectory
from swerl.eval.report import EvalReport
from swerl.rl.rewards import RewardConfig, score_trajectories

# trainer metrics averaged over an update's optimiser steps
TRAIN_KEYS = ("loss", "grad_norm", "clip_frac_low", "clip_frac_high", "approx_kl", "entropy", "ratio_mean",
              "tokens_per_s", "step_seconds", "lr", "neg_capped_frac", "is_weight_mean", "is_truncated_frac")


def rollout_metrics(trajectories: Sequence[Trajectory], reward: RewardConfig | None = None,
                    wall_s: float | None = None) -> dict[str, float]:
    """Mean reward, solved fraction, share of groups with equal rewards (dropped by DAPO),
    turns per trajectory, counts per exit reason and grading failure class, tokens/s."""
    if not trajectories:
        return {"trajectories": 0.0}
    scored = score_trajectories(trajectories, reward or RewardConfig())
    rewards = [s.reward for s in scored if s.reward is not None]
    groups: dict[str, list[float]] = defaultdict(list)
    for s in scored:
        if s.reward is not None:
            groups[s.instance_id].append(s.reward)
    dropped = sum(1 for g in groups.values() if len(g) < 2 or max(g) - min(g) == 0)
    out: dict[str, float] = {
        "trajectories": float(len(trajectories)),
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "solved_fraction": sum(1 for t in trajectories if t.resolved) / len(trajectories),
        "groups": float(len(groups)),
        "groups_dropped_fraction": dropped / len(groups) if groups else 1.0,
        "turns_mean": sum(t.num_turns for t in trajectories) / len(trajectories),
        "action_tokens": float(sum(t.n_action_tokens for t in trajectories)),
        "generation_s": sum(t.generation_s for t in trajectories),
        "agent_s": sum(t.wall_s for t in trajectories),
        "sandbox_s": sum(t.sandbox_s for t in trajectories),
        "grading_s": sum(t.grading_s for t in trajectories),
    }
    if wall_s:
        out["tokens_per_s"] = out["action_tokens"] / wall_s
    behind = [t.staleness for t in trajectories if t.staleness is not None]
    if behind:  # an asynchronous pipeline's rollout: how far behind its update the data is
        out["staleness_mean"] = sum(behind) / len(behind)
        out["staleness_max"] = float(max(behind))
    for reason, n in Counter(t.exit_reason.value for t in trajectories).items():
        out[f"exit_{reason}"] = float(n)
    for cls, n in Counter(t.grade_failure or ("resolved" if t.resolved else "ungraded") for t in trajectories).items():
        out[f"failure_{cls}"] = float(n)
    return out


def grading_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """How often the policy probes the grader: trajectories whose patch carries tamper signatures
    (``tamper_flags``), those graded ``tampered``, each signature class's count, and ``refused_by_layers``:
    patches the plain swebench reading of the same log resolves and swerl does not, by failure class
    (``refused_by_layers_<class>``), the number that rises when the policy starts to get past swebench's
    grading but not swerl's."""
    out = {"tamper_flags": float(sum(1 for t in trajectories if t.tamper_flags)),
           "tampered": float(sum(1 for t in trajectories if t.grade_failure == "tampered"))}
    for flag, n in Counter(f for t in trajectories for f in t.tamper_flags).items():
        out[f"tamper_flag_{flag}"] = float(n)
    refused = [t for t in trajectories if t.swebench_log_resolved and t.resolved is False]
    out["refused_by_layers"] = float(len(refused))
    for cls, n in Counter(t.grade_failure or "unknown" for t in refused).items():
        out[f"refused_by_layers_{cls}"] = float(n)
    return out


def eval_metrics(report: EvalReport) -> dict[str, float]:
    """Pass@1 with its standard error over runs, Pass@k, turns and exit counts."""
    out = {"pass_at_1": report.pass_at_1, "pass_at_1_sem": report.pass_at_1_sem, "tasks": float(report.tasks),
           "runs": float(report.runs), "turns_mean": report.mean_turns, "ungraded": float(report.ungraded),
           "infra_failed": float(report.infra_failed)}
    for k, v in report.pass_at_k.items():
        out[f"pass_at_{k}"] = v
    for reason, n in report.exit_reasons.items():
        out[f"exit_{reason}"] = float(n)
    return out


def train_metrics(steps: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The mean of each trainer metric over the optimiser steps of one update, plus the step count."""
    steps = list(steps)
    out: dict[str, float] = {"steps": float(len(steps))}
    for key in TRAIN_KEYS:
        values = [float(s[key]) for s in steps if s.get(key) is not None and math.isfinite(float(s[key]))]
        if values:
            out[key] = sum(values) / len(values)
    return out


def prefixed(prefix: str, metrics: Mapping[str, float]) -> dict[str, float]:
    return {f"{prefix}/{k}": float(v) for k, v in metrics.items()}


# the pipeline's per-stage table: these columns, in this order, where a stage has them
TABLE_KEYS = ("stage", "step", "policy", "pass_at_1", "pass_at_1_sem", "mean_reward", "solved_fraction",
              "groups_dropped_fraction", "clip_frac_high", "entropy", "trained", "seconds")


def stage_row(stage: str, step: int, policy: str, metrics: Mapping[str, float], seconds: float) -> dict[str, Any]:
    """One row of the table: the stage's figures whose short name (after ``prefix/``) is a column;
    the first of two same-named figures wins (the caller lists the evaluation's first)."""
    row: dict[str, Any] = {"stage": stage, "step": step, "policy": policy, "seconds": round(seconds, 1)}
    for key, value in metrics.items():
        short = key.split("/", 1)[-1]
        if short in TABLE_KEYS and short not in row:
            row[short] = value
    return row


# the columns of the Prefect table, in words: eight fit a laptop's page beside Prefect's menus (twelve did not:
# four were cut off at 1400 px); the training diagnostics stay in MLflow, per stage run
DISPLAY_COLUMNS = ("stage", "step", "policy", "Pass@1", "reward", "solved", "trained", "time")


def display_rows(rows: Sequence[Mapping[str, Any]], runs: int | None = None) -> list[dict[str, Any]]:
    """The table's rows as a person reads them: Pass@1 with its SEM (none over ``runs`` = 1: it has none), the
    rollout's mean reward and solved share, whether the stage trained, its time; an empty cell where a stage
    has no such figure."""
    def pct(value: Any) -> str:
        return "" if value is None else f"{value:.1%}"

    out = []
    for row in rows:
        p1, sem, trained = row.get("pass_at_1"), row.get("pass_at_1_sem"), row.get("trained")
        out.append(dict(zip(DISPLAY_COLUMNS, (
            row.get("stage", ""), row.get("step", ""), row.get("policy", ""),
            "" if p1 is None else pct(p1) + ("" if sem is None or runs == 1 else f" ± {sem:.1%}"),
            "" if row.get("mean_reward") is None else f"{row['mean_reward']:.3f}",
            pct(row.get("solved_fraction")),
            "" if trained is None else ("yes" if trained else "no"),
            "" if row.get("seconds") is None else f"{row['seconds']:.0f} s",
        ), strict=True)))
    return out
