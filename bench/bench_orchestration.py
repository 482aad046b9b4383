"""Orchestration overhead: the pipeline flow's wall time against the sum of its stage bodies.

    .venv/bin/python bench/bench_orchestration.py [--tasks N] [--iterations 2] [--keep DIR]

Runs the pipeline flow once (the first N demo tasks, the tiny model; images cached after the
first run) against a temporary Prefect server and MLflow on SQLite, then reads every task run
of the flow run tree back from the Prefect API. A stage body is a task that does the work
(build images, validate, roll out, evaluate, train: the training tasks also read the rollout
for its metrics and RFT's selection); everything else (flow
and subflow runs, MLflow bookkeeping tasks, artifacts, task-run state changes) is
orchestration. Prints the wall time, the sum of the bodies, their ratio, and where the rest
went. Both figures come from the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BODIES = {"build-images", "validate-tasks", "rollout-chunk", "evaluate-policy", "train-rft", "train-dapo",
          "prepare-inputs", "keep-valid-tasks"}
# a subflow call also appears as a task run named after the flow: a wrapper, not work of its own
SUBFLOWS = {"build_images", "rollout", "grade", "rft", "dapo_iteration", "evaluate", "pipeline"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=9, help="The first N demo tasks (1-9).")
    ap.add_argument("--iterations", type=int, default=2, help="DAPO iterations.")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run folder here (default: a temp dir, removed).")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="swerl-bench-orch-"))
    os.environ.update(DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90")
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect-home"))
    os.chdir(ROOT)

    from prefect.testing.utilities import prefect_test_harness

    from swerl.demo import materialize_demo
    from swerl.orchestration.params import (DAPOParams, EvalParams, PipelineParams, RFTParams, SamplerParams, TrackingConfig,
                                            TrainParams)

    demo = materialize_demo(work / "demo")
    lines = demo.tasks_file.read_text().splitlines()[: args.tasks]
    tasks = work / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    params = PipelineParams(
        name="bench", run_root=work / "runs", tasks=tasks, repos=demo.repos_dir, validate_runs=1,
        sampler=SamplerParams(engine="hf", concurrency=4, agent={"max_turns": 4, "max_new_tokens": 48}),
        rft=RFTParams(sampler=SamplerParams(engine="scripted", concurrency=4, agent={"max_turns": 20}), attempts=1,
                      train=TrainParams(epochs=1, batch_size=args.tasks, optimizer={"lr": 1e-3, "warmup_steps": 0, "lr_schedule": "cosine"})),
        dapo=DAPOParams(iterations=args.iterations, group_size=2, reward={"l_thr": 1, "t_max": 5},
                        train=TrainParams(batch_size=2 * args.tasks, optimizer={"lr": 1e-4, "lr_schedule": "constant"})),
        eval=EvalParams(runs=1), tracking=TrackingConfig(tracking_uri=f"sqlite:///{work / 'mlflow.db'}"))
    with prefect_test_harness(server_startup_timeout=90):
        from flows.pipeline import pipeline

        t0 = time.monotonic()
        state = pipeline(params, return_state=True)
        wall = time.monotonic() - t0
        runs = _task_runs()
    if not state.is_completed():
        raise SystemExit(f"the pipeline did not complete: {state}")
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, seconds in runs:
        if name not in SUBFLOWS:
            by_name[name].append(seconds)
    body = sum(sum(v) for k, v in by_name.items() if k in BODIES)
    other = sum(sum(v) for k, v in by_name.items() if k not in BODIES)
    load = os.getloadavg()  # over the last 1, 5 and 15 minutes: the run's own load plus anything else
    print(f"pipeline: {args.tasks} demo tasks, tiny model, RFT + {args.iterations} DAPO iterations, each evaluated "
          f"(load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    print(f"  wall time                         {wall:8.1f} s")
    print(f"  sum of stage bodies               {body:8.1f} s   ({sum(len(v) for k, v in by_name.items() if k in BODIES)} task runs)")
    print(f"  wall / bodies                     {wall / body:8.3f}x   (orchestration overhead {100 * (wall - body) / wall:.1f}% of wall)")
    print(f"  bookkeeping tasks (MLflow, ...)   {other:8.1f} s   ({sum(len(v) for k, v in by_name.items() if k not in BODIES)} task runs)")
    print(f"  unaccounted (flows, states, artifacts, imports) {wall - body - other:8.1f} s")
    print("  per task name (runs, seconds):")
    for name, values in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {name:<24} {len(values):3d}  {sum(values):8.2f}{'  (body)' if name in BODIES else ''}")
    if args.keep is None:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _task_runs() -> list[tuple[str, float]]:
    """(task name, run seconds) of every task run on the (temporary, bench-only) server."""
    import asyncio

    from prefect.client.orchestration import get_client

    async def read() -> list[tuple[str, float]]:
        out, offset = [], 0
        async with get_client() as client:
            while True:
                page = await client.read_task_runs(limit=200, offset=offset)
                if not page:
                    return out
                for tr in page:
                    seconds = (tr.end_time - tr.start_time).total_seconds() if tr.start_time and tr.end_time else 0.0
                    out.append((tr.name.rsplit("-", 1)[0], seconds))
                offset += len(page)

    return asyncio.run(read())


if __name__ == "__main__":
    main()
