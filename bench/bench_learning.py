"""The learning curve: held-out Pass@1 after each stage, per seed, with the GRPO-style ablation.

    .venv/bin/python bench/bench_learning.py [--params deployments/learning.yaml] [--seeds 0 1 2] [--ablations grpo grpo-cap | --no-ablation]
        [--start swerl/models/resources/tiny-warm-s0]
    .venv/bin/python bench/bench_learning.py --params 'deployments/prefect.yaml#pipeline' --seeds 0 --ablations async

For each seed, runs the pipeline flow of ``--params`` from scratch: the seed draws its own
curriculum, tiny model, warm start and sampling (``--shared-start``: later seeds reuse the first
seed's curriculum and warm-started policy). It prints the seed's wall time split into
preparation (images, validation, warm start) and the measured stages, then a table: stage,
held-out Pass@1, its standard error over runs, and the stage's wall time, then the rises
start -> RFT and RFT -> last iteration, each against two standard errors: the two stages' SEs
over runs combined (sampling noise on this task set, the issue's definition), and the stricter
one paired over tasks (it also counts which tasks were drawn; with k = 2 runs the SE over runs
can be 0 by chance, the paired one cannot). With the ablations, the same seed's RFT checkpoint
then goes through the same number of iterations with GRPO-style updates (``ABLATIONS``: symmetric
clipping, zero-advantage samples kept, sequence-mean loss, GRPO's KL penalty; "grpo" with the
paper's loss, as GRPO has it, "grpo-cap" with the recipe's ``neg_prob_cap``) and they are printed side by side;
DAPO's lead over each at the last iteration is then averaged over the seeds, its SE combined
from each seed's paired SE. Last, the learning proof's bar, met or not: each seed's two rises
above 3 SE paired over tasks and the whole seed (preparation included) under 30 minutes, and
DAPO's lead over the first GRPO-style ablation named (``--ablations``, "grpo" by default), averaged over
every seed, above 2 SE. Every figure comes from real rollouts graded in real
sandboxes; reruns resume (finished stages are skipped).

The "async" ablation is the same DAPO with iteration k+1 sampled while iteration k trains
(``dapo.off_policy.max_staleness`` 1): then each DAPO iteration's wall time is printed with where it went
(sampling, grading, training, waiting, and the sampling hidden beside other work; ``IterationTimes``), the
DAPO iterations and their evaluations end to end for both schedules, and the async bar: its rise from RFT
above 3 SE paired over tasks on each seed, and async - DAPO at the last iteration within 2 SE averaged over
the seeds. ``--start`` starts every seed from one policy (no warm start; the shipped
``swerl/models/resources/tiny-warm-s0`` is the warm start ``deployments/warm-start.yaml`` makes), and
``--params 'deployments/prefect.yaml#pipeline'`` takes the main job's recipe.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# The GRPO-style ablations: what each changes in the recipe's DAPO stage. "grpo" is GRPO's update as
# DeepSeekMath publishes it: symmetric clipping at eps_low, every group kept (zero-advantage ones add
# no gradient but count in the normaliser), the sequence-mean loss, its KL penalty (beta 0.04, k3,
# against the policy that began the iteration), and no neg_prob_cap. "grpo-cap" is the same with the
# recipe's neg_prob_cap, swerl's own addition, so that DAPO against it isolates DAPO's own parts:
# clip-higher, dropping zero-advantage groups, the token-level loss, and no KL term. "async" is not an ablation of the
# update but of the schedule: the same DAPO with iteration k+1 sampled while iteration k trains (staleness bound 1,
# the correction's default cap), so that sync and async are compared at equal iterations from the same RFT policy.
# Each entry is what it changes in the recipe's `dapo` settings.
ABLATIONS: dict[str, dict[str, Any]] = {
    "grpo": {"drop_zero_advantage": False,
             "loss": {"symmetric_clip": True, "loss_aggregation": "sequence", "kl_coef": 0.04, "neg_prob_cap": 1.0}},
    "grpo-cap": {"drop_zero_advantage": False, "loss": {"symmetric_clip": True, "loss_aggregation": "sequence", "kl_coef": 0.04}},
    "async": {"off_policy": {"max_staleness": 1}},
}


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def ablation(params, key: str):
    """The pipeline params of ablation ``key`` for a seed's run ``params``: the same run from its RFT
    policy (no warm start, no RFT, no start evaluation), its DAPO stage changed as ``ABLATIONS[key]`` says."""
    change = {k: dict(v) if isinstance(v, dict) else v for k, v in ABLATIONS[key].items()}
    if change.get("loss", {}).pop("symmetric_clip", False):
        change["loss"]["eps_high"] = params.dapo.loss.eps_low
    dapo = type(params.dapo).model_validate(_merged(params.dapo.model_dump(), change))
    rft_policy = params.run_dir / "rft" / "train" / "final"
    return params.model_copy(update={
        "name": f"{params.name}-ablation-{key}", "model": str(rft_policy.resolve()) if rft_policy.exists() else None,
        "warm_start": None, "curriculum": params.curriculum, "validate_runs": 0,
        "rft": params.rft.model_copy(update={"enabled": False}),
        "eval": params.eval.model_copy(update={"evaluate_start": False}), "dapo": dapo})


def _rows(summary: dict) -> dict[str, dict]:
    return {r["stage"]: r for r in summary["stages"]}


def _fmt(row: dict | None) -> str:
    if row is None or row.get("pass_at_1") is None:
        return f"{'-':>15}"
    return f"{100 * row['pass_at_1']:6.1f} ± {100 * (row.get('pass_at_1_sem') or 0):4.1f}%"


def _per_task(summary: dict) -> dict[str, dict]:
    """Each evaluated stage's ``{instance_id: [resolved per run]}``."""
    return _outcomes(summary["run_dir"], tuple(row["stage"] for row in summary["stages"]))


@functools.cache  # the rises and the average over seeds read the same evaluations
def _outcomes(run_dir: str, stages: tuple[str, ...]) -> dict[str, dict]:
    from swerl.orchestration.summary import per_task_outcomes

    return per_task_outcomes(Path(run_dir), list(stages))


def _rise(label: str, before: dict, after: dict) -> str:
    """One rise against both standard errors (see the module docstring)."""
    from swerl.eval.metrics import difference_over_runs, paired_difference

    rise, sem = paired_difference(before, after)
    _, sem_runs = difference_over_runs(before, after)
    ratio = lambda se: f"{rise / se:.1f}" if se else "inf"  # noqa: E731
    return (f"  {label}: {100 * rise:+.1f} points; SE over runs {100 * sem_runs:.1f} ({ratio(sem_runs)} SE), "
            f"paired SE over tasks {100 * sem:.1f} ({ratio(sem)} SE)")


def _pairs(summary: dict) -> list[tuple[str, str]]:
    """The rises the proof measures: start -> RFT, and RFT -> the last iteration when there is one."""
    last = summary["stages"][-1]["stage"]
    return [("start", "rft")] + ([("rft", last)] if last.startswith("iter-") else [])


def _rises(summary: dict, ablations: dict[str, dict] | None = None) -> list[str]:
    """Start -> RFT and RFT -> last iteration; for each ablation, its rise from RFT and DAPO against it."""
    per_task = _per_task(summary)
    last = summary["stages"][-1]["stage"]
    lines = [_rise(f"rise {a} -> {b}", per_task[a], per_task[b]) for a, b in _pairs(summary)
             if a in per_task and b in per_task]
    for key, other in (ablations or {}).items():
        baseline = _per_task(other)
        if last in baseline and "rft" in per_task:
            lines.append(_rise(f"{key} rise rft -> {last}", per_task["rft"], baseline[last]))
            if last in per_task:
                lines.append(_rise(f"DAPO - {key} at {last}", baseline[last], per_task[last]))
    return lines


def _stage_seconds(run_dir: Path) -> dict[str, float]:
    """Each finished stage's wall time from the pipeline's ledger (images, validation, warm start, ...)."""
    from swerl.orchestration.ledger import Ledger

    ledger = Ledger(run_dir)
    out = {}
    for name in ledger.finished():
        result = ledger.get(name) or {}
        out[name] = float(result.get("seconds") or 0.0)
    return out


def _iteration_times(summary: dict) -> dict[str, dict]:
    """Each DAPO iteration's wall time and its split (``StageResult.times``), from the run's ledger."""
    from swerl.orchestration.ledger import Ledger
    from swerl.orchestration.results import StageResult

    ledger, out = Ledger(Path(summary["run_dir"])), {}
    for name in ledger.finished():
        if name.startswith("iter-") and not name.endswith("-rollout"):
            result = ledger.get(name, StageResult)
            out[name] = {"wall": result.seconds or 0.0, "times": result.times}
    return out


def _dapo_phase(summary: dict) -> float:
    """The DAPO iterations and their evaluations, end to end: their ledger stages run one after another (an
    asynchronous run's ``iter-k-rollout`` ran beside them, so it is not added)."""
    return sum(s for name, s in _stage_seconds(Path(summary["run_dir"])).items()
               if name.startswith(("iter-", "eval-iter-")) and not name.endswith("-rollout"))


def _time_lines(r: dict) -> list[str]:
    """Where each DAPO iteration's time went, the recipe's DAPO against each ablation (``async`` above all), and
    the DAPO phase's wall time side by side."""
    runs = {"DAPO": r["dapo"], **r.get("ablations", {})}
    lines = [f"  {'run':<9} {'iteration':<9} {'wall s':>7} {'sampling':>9} {'grading':>8} {'training':>9} "
             f"{'waiting':>8} {'hidden':>7}"]
    for label, summary in runs.items():
        for name, it in _iteration_times(summary).items():
            t = it["times"]
            cells = (f"{t.sampling_s:9.0f} {t.grading_s:8.0f} {t.training_s:9.0f} {t.waiting_s:8.0f} {t.hidden_s:7.0f}"
                     if t else f"{'(not recorded)':>44}")
            lines.append(f"  {label:<9} {name:<9} {it['wall']:7.0f} {cells}")
    base = _dapo_phase(r["dapo"])
    lines.append("  DAPO iterations and their evaluations, end to end: "
                 + ", ".join(f"{label} {_dapo_phase(summary):.0f} s"
                             + (f" ({base / _dapo_phase(summary):.2f}x DAPO's speed)" if label != "DAPO" and _dapo_phase(summary) else "")
                             for label, summary in runs.items()))
    return lines


def _seed_line(seed: int, r: dict) -> str:
    spent = _stage_seconds(Path(r["dapo"]["run_dir"]))
    prep = {k: spent.get(k, 0.0) for k in ("images", "validate", "warm-start")}
    rl = sum(v for k, v in spent.items() if k not in prep)
    line = (f"seed {seed}: this call {r['wall'] / 60:.1f} min (stages {sum(spent.values()) / 60:.1f} min: images "
            f"{prep['images'] / 60:.1f}, validation {prep['validate'] / 60:.1f}, warm start {prep['warm-start'] / 60:.1f}, "
            f"evaluations, RFT and DAPO {rl / 60:.1f})")
    for key, wall in r.get("ablation_wall", {}).items():
        line += f"; ablation {key} {wall / 60:.1f} min more"
    return line + f"; plot {r['dapo'].get('plot')}"


def _leads(results: dict, key: str) -> list[tuple[float, float]]:
    """Each seed's DAPO - ablation ``key`` at the last iteration, (mean, SE) paired over its tasks."""
    from swerl.eval.metrics import paired_difference

    out = []
    for r in results.values():
        last = r["dapo"]["stages"][-1]["stage"]
        other = r.get("ablations", {}).get(key)
        dapo, grpo = _per_task(r["dapo"]), _per_task(other) if other else {}
        if last in dapo and last in grpo:
            out.append(paired_difference(grpo[last], dapo[last]))
    return out


def _lead_over_seeds(results: dict, key: str) -> tuple[float, float, int] | None:
    """DAPO - ablation ``key`` at the last iteration averaged over the ablated seeds: (mean, SE, seeds), or None."""
    from swerl.eval.metrics import mean_over_seeds

    diffs = _leads(results, key)
    return (*mean_over_seeds(diffs), len(diffs)) if diffs else None


def _over_seeds(results: dict, keys: list[str]) -> list[str]:
    """DAPO against each ablation at the last iteration, averaged over seeds (each seed's SE paired over its tasks)."""
    lines = []
    for key in keys:
        lead = _lead_over_seeds(results, key)
        if lead is None:
            continue
        mean, sem, n = lead
        lines.append(f"DAPO - {key} at the last iteration, averaged over {n} seeds: {100 * mean:+.1f} points, "
                     f"SE {100 * sem:.1f} ({mean / sem:.1f} SE)" if sem else f"DAPO - {key}: {100 * mean:+.1f} points")
    return lines


def _verdict(results: dict, baseline: str | None, *, rise_se: float = 3.0, lead_se: float = 2.0, minutes: float = 30.0) -> list[str]:
    """The learning proof's bar, seed by seed: both rises above ``rise_se`` SEs paired over tasks, the
    whole seed (preparation included) under ``minutes``; then DAPO's lead over the ablation ``baseline``,
    averaged over the seeds, above ``lead_se`` SEs."""
    from swerl.eval.metrics import paired_difference

    lines, passed = [f"the bar: each rise > {rise_se:g} SE paired over tasks, each seed < {minutes:g} min, "
                     f"DAPO - {baseline or 'GRPO'} averaged over seeds > {lead_se:g} SE"], True
    for seed, r in results.items():
        per_task = _per_task(r["dapo"])
        # a fresh call's wall time also counts making the curriculum and the tiny model; a resumed one's
        # stages ran in an earlier call, and the ledger kept their times
        spent = max(r["wall"], sum(_stage_seconds(Path(r["dapo"]["run_dir"])).values())) / 60
        pairs = _pairs(r["dapo"])
        cells, ok = [] if len(pairs) == 2 else ["no DAPO iteration"], spent < minutes and len(pairs) == 2
        for a, b in pairs:
            if a not in per_task or b not in per_task:
                cells.append(f"{a} -> {b} not measured")
                ok = False
                continue
            rise, sem = paired_difference(per_task[a], per_task[b])
            ratio = rise / sem if sem else float("inf")
            ok &= ratio > rise_se
            cells.append(f"{a} -> {b} {ratio:+.1f} SE")
        passed &= ok
        lines.append(f"  seed {seed}: {', '.join(cells)}, {spent:.1f} min: {'met' if ok else 'NOT met'}")
    lead = _lead_over_seeds(results, baseline) if baseline else None
    if lead is not None:
        mean, sem, n = lead
        ok = bool(sem) and mean / sem > lead_se and n == len(results)  # every seed ablated
        passed &= ok
        lines.append(f"  DAPO - {baseline} over {n} of {len(results)} seeds: {mean / sem if sem else float('inf'):+.1f} SE: "
                     f"{'met' if ok else 'NOT met'}")
    else:
        passed = False
        lines.append("  DAPO - GRPO: no ablation run")
    return lines + [f"learning proof: {'met' if passed else 'NOT met'}"]


def _async_verdict(results: dict, *, rise_se: float = 3.0, noise_se: float = 2.0) -> list[str]:
    """The asynchronous schedule's bar: on every seed its rise from RFT at the last iteration above ``rise_se`` SEs
    paired over tasks, and async - DAPO at the last iteration, averaged over the seeds, within ``noise_se`` SEs."""
    from swerl.eval.metrics import paired_difference

    lines, passed = [f"the async bar: its rise rft -> last > {rise_se:g} SE paired over tasks on each seed, "
                     f"async - DAPO averaged over seeds within {noise_se:g} SE"], True
    for seed, r in results.items():
        last, other = r["dapo"]["stages"][-1]["stage"], _per_task(r["ablations"]["async"])
        per_task = _per_task(r["dapo"])
        if "rft" not in per_task or last not in other:
            lines.append(f"  seed {seed}: not measured")
            passed = False
            continue
        rise, sem = paired_difference(per_task["rft"], other[last])
        ok = bool(sem) and rise / sem > rise_se
        passed &= ok
        lines.append(f"  seed {seed}: async rise rft -> {last} {100 * rise:+.1f} points, {rise / sem if sem else float('inf'):+.1f} SE: "
                     f"{'met' if ok else 'NOT met'}; DAPO phase {_dapo_phase(r['dapo']):.0f} s sync, "
                     f"{_dapo_phase(r['ablations']['async']):.0f} s async")
    lead = _lead_over_seeds(results, "async")  # DAPO - async
    if lead is not None:
        mean, sem, n = lead
        ok = abs(mean) <= noise_se * sem and n == len(results)
        passed &= ok
        lines.append(f"  async - DAPO over {n} seeds: {-100 * mean:+.1f} points, SE {100 * sem:.1f}: "
                     f"{'within noise' if ok else 'NOT within noise'}")
    return lines + [f"async: {'met' if passed else 'NOT met'}"]


def recipe(spec: str) -> dict[str, Any]:
    """The pipeline parameters in ``spec``: a YAML file of them, or ``prefect.yaml#<deployment>``'s ``params``."""
    path, _, deployment = spec.partition("#")
    data = yaml.safe_load(Path(path).read_text())
    if not deployment:
        return data
    found = [d for d in data.get("deployments", []) if d.get("name") == deployment]
    if not found:
        raise SystemExit(f"{path} has no deployment named {deployment!r}: {[d.get('name') for d in data.get('deployments', [])]}")
    return {**found[0]["parameters"]["params"], "name": deployment}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(ROOT / "deployments/learning.yaml"),
                    help="a pipeline's parameters (YAML), or a Prefect deployment's: deployments/prefect.yaml#pipeline "
                         "(the main job's recipe)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablations", nargs="*", choices=sorted(ABLATIONS), default=["grpo", "grpo-cap"],
                    help="GRPO-style ablations to run from each seed's RFT policy; the first is the one the bar compares "
                         "DAPO with (default: grpo grpo-cap)")
    ap.add_argument("--no-ablation", action="store_true", help="run no ablation (the same as --ablations with none)")
    ap.add_argument("--run-root", type=Path, default=Path("runs/learning"))
    ap.add_argument("--shared-start", action="store_true",
                    help="later seeds reuse the first seed's curriculum and warm-started policy (as every run in the paper "
                         "starts from one instruct model); by default each seed generates its own curriculum, tiny model "
                         "and warm start")
    ap.add_argument("--start", type=Path, default=None,
                    help="every seed starts from this policy, no warm start (the recipe's curriculum for all; "
                         "swerl/models/resources/tiny-warm-s0 is the recipe's seed-0 warm start, made by "
                         "deployments/warm-start.yaml)")
    args = ap.parse_args()
    if args.no_ablation:
        args.ablations = []
    for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90"}.items():
        os.environ.setdefault(key, value)
    os.chdir(ROOT)
    from flows.pipeline import pipeline
    from swerl.orchestration.params import PipelineParams

    base = recipe(args.params)
    results = {}
    shared_start: str | None = str(args.start.resolve()) if args.start else None
    for seed in args.seeds:
        data = {**base, "name": f"{base.get('name', 'learning').rsplit('-s', 1)[0]}-s{seed}", "seed": seed,
                "run_root": str(args.run_root)}
        if not args.shared_start and args.start is None:
            data["curriculum"] = {**data.get("curriculum", {}), "seed": seed}
            data["tiny_model"] = {**data.get("tiny_model", {}), "seed": seed}
        if shared_start is not None:  # same curriculum (its seed is the file's), same starting policy
            data.update({"model": shared_start, "warm_start": None})
        params = PipelineParams.model_validate(data)
        t0 = time.monotonic()
        summary = pipeline(params).model_dump(mode="json")
        results[seed] = {"dapo": summary, "wall": time.monotonic() - t0}
        warm_policy = params.run_dir / "warm-start" / "train" / "final"
        if args.shared_start and shared_start is None and warm_policy.is_dir():
            shared_start = str(warm_policy.resolve())
        for key in args.ablations:
            t0 = time.monotonic()
            results[seed].setdefault("ablations", {})[key] = pipeline(ablation(params, key)).model_dump(mode="json")
            results[seed].setdefault("ablation_wall", {})[key] = time.monotonic() - t0
    load = os.getloadavg()
    print(f"held-out Pass@1 (mean ± SEM over runs) per stage; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for seed, r in results.items():
        print("\n" + _seed_line(seed, r))
        ablated = {key: _rows(summary) for key, summary in r.get("ablations", {}).items()}
        print(f"  {'stage':<8} {'Pass@1 (DAPO)':>15} {'wall s':>8}"
              + "".join(f" {'Pass@1 (' + key + ')':>19} {'wall s':>8}" for key in ablated))
        dapo = _rows(r["dapo"])
        for stage, row in dapo.items():
            line = f"  {stage:<8} {_fmt(row)} {row.get('seconds', 0):8.0f}"
            for rows in ablated.values():
                other = rows.get(stage)
                line += f"     {_fmt(other)} {(other or {}).get('seconds', 0):8.0f}"
            print(line)
        for line in _rises(r["dapo"], r.get("ablations")):
            print(line)
        for line in _time_lines(r):
            print(line)
    for line in _over_seeds(results, args.ablations):
        print("\n" + line)
    grpo = [key for key in args.ablations if key != "async"]
    print("\n" + "\n".join(_verdict(results, grpo[0] if grpo else None)))
    if "async" in args.ablations:
        print("\n" + "\n".join(_async_verdict(results)))


if __name__ == "__main__":
    main()
