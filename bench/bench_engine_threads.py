"""Rollout wall time against the HF engine's torch threads, with sandboxes sharing the CPU.

    .venv/bin/python bench/bench_engine_threads.py [--tasks FILE --model DIR --prompt-dir DIR]
        [--threads default 1] [--samples 2] [--concurrency 8] [--max-turns 4] [--max-new-tokens 48] [--repeats 2]

Runs the same graded rollout (same tasks, same seeds) once per ``--threads`` setting,
interleaved ``--repeats`` times after one discarded warm-up, each in a fresh process (torch's MKL
thread count is process-wide) and into a fresh folder, and prints per setting the median
wall time, trajectories/s, the generation seconds summed over trajectories and action
tokens/s, with each setting's ratio to the first. ``default`` leaves torch's thread count;
a number sets ``HFEngineConfig.torch_threads`` (the engine's decoding thread only).

Without ``--tasks``/``--model`` it uses the demo tasks and a random tiny policy, whose
replies are mostly format errors (no command runs); pass a curriculum task file and a
warm-started policy for trajectories whose tools really run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swerl.agent.loop import AgentConfig  # noqa: E402
from swerl.stages.rollout import RolloutStage, SamplerConfig, run_rollout  # noqa: E402


def _rollout(stage: RolloutStage):
    return run_rollout(stage).summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=None, help="Task file (default: the demo tasks).")
    ap.add_argument("--repos", type=Path, default=None, help="Repository mirror of --tasks, if it needs one.")
    ap.add_argument("--model", type=str, default=None, help="Policy folder (default: a random tiny model).")
    ap.add_argument("--prompt-dir", type=Path, default=None)
    ap.add_argument("--threads", nargs="+", default=["default", "1"])
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swerl-bench-threads-"))
    tasks, repos, model = args.tasks, args.repos, args.model
    if tasks is None:
        from swerl.demo import materialize_demo

        demo = materialize_demo(work / "demo")
        tasks, repos = demo.tasks_file, demo.repos_dir
    if model is None:
        from swerl.models.tiny import init_tiny

        model = str(init_tiny(work / "tiny"))
    settings = [None if t == "default" else int(t) for t in args.threads]
    runs: dict[int | None, list] = {s: [] for s in settings}
    # a first, discarded rollout: image checks, page cache and the model files warm up
    agent = AgentConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, prompt_dir=args.prompt_dir)
    _rollout(RolloutStage(tasks=tasks, repos=repos, model=model, samples=1, out=work / "warm-up", log_dir=work / "logs",
                          sampler=SamplerConfig(engine="hf", concurrency=args.concurrency, agent=agent)))
    for rep in range(args.repeats):
        for s in settings:
            stage = RolloutStage(tasks=tasks, repos=repos, model=model, samples=args.samples, seed=rep,
                                 out=work / f"r{rep}-t{s or 'default'}", log_dir=work / "logs",
                                 sampler=SamplerConfig(engine={"kind": "hf", "torch_threads": s}, concurrency=args.concurrency,
                                                      agent=agent))
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                summary = pool.submit(_rollout, stage).result()
            runs[s].append(summary)
            print(f"  repeat {rep} threads {s or 'default'}: {summary.produced} trajectories in {summary.wall_s:.1f} s", flush=True)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n# graded rollouts, {args.concurrency} at once, CPU x{os.cpu_count()}, load average {load}; "
          f"median of {args.repeats}; ratio to threads={args.threads[0]}")
    print(f"{'threads':>8} {'wall s':>8} {'traj/s':>8} {'gen s (sum)':>12} {'tok/s':>8} {'speed-up':>9}")
    base = None
    for s, summaries in runs.items():
        wall = statistics.median(x.wall_s for x in summaries)
        n = statistics.median(x.produced for x in summaries)
        gen = statistics.median(x.generation_s for x in summaries)
        tok = statistics.median(x.action_tokens / x.wall_s for x in summaries)
        base = base or wall
        print(f"{s or 'default':>8} {wall:8.1f} {n / wall:8.2f} {gen:12.1f} {tok:8.1f} {base / wall:8.2f}x")


if __name__ == "__main__":
    main()
