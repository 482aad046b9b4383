"""The learning curve: held-out Pass@1 after each stage, per seed, with the GRPO-style ablation.

    .venv/bin/python bench/bench_learning.py [--params deployments/learning.yaml] [--seeds 0 1 2] [--no-ablation]

For each seed, runs the pipeline flow of ``--params`` with its sampling seeded by it; the
curriculum and the warm start are the first seed's (``--fresh-start``: each seed's own), and
prints a table: stage, held-out Pass@1, its standard error over runs, and
the stage's wall time, then the rises start -> RFT and RFT -> last iteration, each against
two standard errors: the two stages' SEs over runs combined (sampling noise on this task
set, the issue's definition), and the stricter one paired over tasks (it also counts which
tasks were drawn; with k = 2 runs the SE over runs can be 0 by chance, the paired one cannot).
With the ablation, the same seed's RFT checkpoint then goes through the same number of
iterations with a plain GRPO-style update (symmetric clipping, zero-advantage samples kept,
sequence-mean loss) and the two are printed side by side. Every figure comes
from real rollouts graded in real sandboxes; reruns resume (finished stages are skipped).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rows(summary: dict) -> dict[str, dict]:
    return {r["stage"]: r for r in summary["stages"]}


def _fmt(row: dict | None) -> str:
    if row is None or row.get("pass_at_1") is None:
        return f"{'-':>15}"
    return f"{100 * row['pass_at_1']:6.1f} ± {100 * (row.get('pass_at_1_sem') or 0):4.1f}%"


def _per_task(summary: dict) -> dict[str, dict]:
    """Each evaluated stage's ``{instance_id: [resolved per run]}``."""
    from swerl.orchestration.summary import per_task_outcomes

    return per_task_outcomes(Path(summary["run_dir"]), [row["stage"] for row in summary["stages"]])


def _rise(label: str, before: dict, after: dict) -> str:
    """One rise against both standard errors (see the module docstring)."""
    from swerl.eval.metrics import difference_over_runs, paired_difference

    rise, sem = paired_difference(before, after)
    _, sem_runs = difference_over_runs(before, after)
    ratio = lambda se: f"{rise / se:.1f}" if se else "inf"  # noqa: E731
    return (f"  {label}: {100 * rise:+.1f} points; SE over runs {100 * sem_runs:.1f} ({ratio(sem_runs)} SE), "
            f"paired SE over tasks {100 * sem:.1f} ({ratio(sem)} SE)")


def _rises(summary: dict, grpo: dict | None = None) -> list[str]:
    """Start -> RFT and RFT -> last iteration; with the ablation, the same for GRPO and DAPO against GRPO."""
    stages = [r["stage"] for r in summary["stages"]]
    per_task = _per_task(summary)
    last = stages[-1]
    pairs = [("start", "rft")] + ([("rft", last)] if last.startswith("iter-") else [])
    lines = [_rise(f"rise {a} -> {b}", per_task[a], per_task[b]) for a, b in pairs if a in per_task and b in per_task]
    baseline = _per_task(grpo) if grpo else {}
    if last in baseline and "rft" in per_task:
        lines.append(_rise(f"GRPO rise rft -> {last}", per_task["rft"], baseline[last]))
        if last in per_task:
            lines.append(_rise(f"DAPO - GRPO at {last}", baseline[last], per_task[last]))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=ROOT / "deployments/learning.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--run-root", type=Path, default=Path("runs/learning"))
    ap.add_argument("--fresh-start", action="store_true",
                    help="each seed generates its own curriculum and warm start; by default every seed starts from the "
                         "first seed's warm-started policy, as every run in the paper starts from one instruct model")
    args = ap.parse_args()
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90"}.items():
        os.environ.setdefault(key, value)
    os.chdir(ROOT)
    from flows.pipeline import pipeline
    from swerl.orchestration.params import PipelineParams

    base = yaml.safe_load(args.params.read_text())
    results = {}
    shared_start: str | None = None
    for seed in args.seeds:
        data = {**base, "name": f"{base.get('name', 'learning').rsplit('-s', 1)[0]}-s{seed}", "seed": seed,
                "run_root": str(args.run_root)}
        if args.fresh_start:
            data["curriculum"] = {**data.get("curriculum", {}), "seed": seed}
            data["tiny_model"] = {**data.get("tiny_model", {}), "seed": seed}
        elif shared_start is not None:  # same curriculum (its seed is the file's), same starting policy
            data.update({"model": shared_start, "warm_start": None})
        params = PipelineParams.model_validate(data)
        t0 = time.monotonic()
        summary = pipeline(params)
        results[seed] = {"dapo": summary, "wall": time.monotonic() - t0}
        warm_policy = params.run_dir / "warm-start" / "train" / "final"
        if not args.fresh_start and shared_start is None and warm_policy.is_dir():
            shared_start = str(warm_policy.resolve())
        if not args.no_ablation:
            rft_policy = params.run_dir / "rft" / "train" / "final"
            grpo = params.model_copy(update={
                "name": f"{params.name}-grpo", "model": str(rft_policy.resolve()) if rft_policy.exists() else None,
                "warm_start": None, "curriculum": params.curriculum, "validate_runs": 0,
                "rft": params.rft.model_copy(update={"enabled": False}),
                "eval": params.eval.model_copy(update={"evaluate_start": False}),
                "dapo": params.dapo.model_copy(update={
                    "drop_zero_advantage": False, "loss": params.dapo.loss.model_copy(update={
                        "eps_high": params.dapo.loss.eps_low, "loss_aggregation": "sequence"})})})
            results[seed]["grpo"] = pipeline(grpo)
    load = os.getloadavg()
    print(f"held-out Pass@1 (mean ± SEM over runs) per stage; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for seed, r in results.items():
        rl = sum(row.get("seconds", 0) for row in r["dapo"]["stages"])
        print(f"\nseed {seed}  (this call {r['wall'] / 60:.1f} min; evaluations, RFT and DAPO {rl / 60:.1f} min, "
              f"without images, validation and warm start; plot {r['dapo'].get('plot')})")
        print(f"  {'stage':<8} {'Pass@1 (DAPO)':>15} {'wall s':>8}" + ("" if "grpo" not in r else f" {'Pass@1 (GRPO)':>15} {'wall s':>8}"))
        dapo, grpo = _rows(r["dapo"]), _rows(r["grpo"]) if "grpo" in r else {}
        for stage, row in dapo.items():
            line = f"  {stage:<8} {_fmt(row)} {row.get('seconds', 0):8.0f}"
            if "grpo" in r:
                other = grpo.get(stage)
                line += f" {_fmt(other)} {(other or {}).get('seconds', 0):8.0f}"
            print(line)
        for line in _rises(r["dapo"], r.get("grpo")):
            print(line)


if __name__ == "__main__":
    main()
