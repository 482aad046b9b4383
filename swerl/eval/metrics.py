"""The evaluation math, as in the paper (section 5 of REFERENCE.md) and Chen et al. 2021.

* Pass@1 = the mean over k independent runs of each run's resolved rate, reported with
  the standard error of that mean (sample std, ddof=1, over sqrt(k)).
* Pass@k from n runs of which c resolved a task: 1 - C(n-c, k) / C(n, k), averaged over
  tasks (the unbiased estimator; it is *not* 1 - (1-p)^k).
* A rise between two policies evaluated on the same tasks: the mean over tasks of each
  task's change in resolved rate, with its standard error over tasks. With few runs the SEM
  over runs can be 0 by chance (two runs with the same rate); the paired one cannot.
  The same rise can also be set against the two Pass@1 figures' own SEMs over runs,
  combined as independent errors: sqrt(SEM_a^2 + SEM_b^2). That one counts only the
  sampling noise on this fixed task set (as a benchmark score does); the paired one also
  counts which tasks happened to be drawn, so it is the stricter of the two.

An outcome of ``None`` is a run without a verdict (it failed for infrastructure): it is
left out, never counted unresolved. Run r's rate is over the tasks with a verdict in run
r; Pass@k is over the tasks with at least k verdicts; a task's rate is over its verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Outcome = bool | None  # resolved, unresolved, or no verdict (an infrastructure failure)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k draws (of n, c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    # product form of 1 - C(n-c,k)/C(n,k): exact for large n without huge binomials
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def mean_and_sem(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (0.0 for a single value)."""
    if not values:
        raise ValueError("no values")
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def pass_at_1_over_runs(outcomes: Mapping[str, Sequence[Outcome]]) -> tuple[float, float, list[float]]:
    """(mean, SEM, per-run rates) of Pass@1 from ``{instance_id: [resolved in run 0, 1, ...]}``.

    Every task must have the same number of runs: run r is the r-th sample of each task.
    """
    runs = {len(v) for v in outcomes.values()}
    if len(runs) != 1:
        raise ValueError(f"tasks have different numbers of runs: {sorted(runs)}; finish or drop the incomplete ones")
    per_run = []
    for r in range(runs.pop()):
        verdicts = [v[r] for v in outcomes.values() if v[r] is not None]
        if not verdicts:
            raise ValueError(f"run {r} has no verdict on any task (all failed for infrastructure); rerun to redo them")
        per_run.append(sum(verdicts) / len(verdicts))
    mean, sem = mean_and_sem(per_run)
    return mean, sem, per_run


def _verdicts(runs: Sequence[Outcome]) -> list[bool]:
    return [bool(v) for v in runs if v is not None]


def mean_pass_at_k(outcomes: Mapping[str, Sequence[Outcome]], k: int) -> float:
    """Pass@k averaged over the tasks with at least k verdicts, each from all of them."""
    counts = [(len(v), sum(v)) for v in map(_verdicts, outcomes.values()) if len(v) >= k]
    if not counts:
        raise ValueError(f"no task has {k} runs with a verdict")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


def _require_same_tasks(before: Mapping[str, object], after: Mapping[str, object]) -> None:
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        raise ValueError(f"the two evaluations cover different tasks, e.g. {missing[:3]}; compare runs on one task set")


def paired_difference(before: Mapping[str, Sequence[Outcome]], after: Mapping[str, Sequence[Outcome]]) -> tuple[float, float]:
    """(mean, SEM) over tasks of ``rate_after - rate_before``, each rate over that task's verdicts; a task
    without a verdict on either side is left out."""
    _require_same_tasks(before, after)
    pairs = [(_verdicts(before[t]), _verdicts(after[t])) for t in sorted(before)]
    pairs = [(b, a) for b, a in pairs if b and a]
    if not pairs:
        raise ValueError("no tasks")
    return mean_and_sem([sum(a) / len(a) - sum(b) / len(b) for b, a in pairs])


def difference_over_runs(before: Mapping[str, Sequence[Outcome]], after: Mapping[str, Sequence[Outcome]]) -> tuple[float, float]:
    """(Pass@1 after - Pass@1 before, sqrt(SEM_before^2 + SEM_after^2)), each SEM over its runs."""
    _require_same_tasks(before, after)
    mean_a, sem_a, _ = pass_at_1_over_runs(before)
    mean_b, sem_b, _ = pass_at_1_over_runs(after)
    return mean_b - mean_a, math.sqrt(sem_a**2 + sem_b**2)


def mean_over_seeds(differences: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(mean, SE) of per-seed differences, each given as (mean, SE): seeds are independent, so the
    mean's SE is sqrt(sum of SE^2) / n (each seed on its own tasks, its SE paired over them)."""
    if not differences:
        raise ValueError("no seeds")
    n = len(differences)
    return sum(d for d, _ in differences) / n, math.sqrt(sum(se**2 for _, se in differences)) / n
