"""Environment benchmarks: sandbox exec overhead, container start latency, grading throughput, and
grading time per task (every defence layer on) against the test command alone.

    .venv/bin/python bench/bench_envs.py [--execs 50] [--starts 8] [--concurrency 1 2 4] [--grading-reps 2]

Builds the demo images first (cached), then prints figures; ratios are against raw
Docker measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from swerl.data.loaders import load_tasks
from swerl.demo import materialize_demo
from swerl.envs.docker_client import docker_client
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig
from swerl.envs.images import ImageBuilder, ImageConfig
from swerl.grading.grader import GradingConfig, grade_many


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms  p90 {sorted(xs)[int(0.9 * (len(xs) - 1))] * 1e3:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execs", type=int, default=50)
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--grading-reps", type=int, default=2, help="Repetitions of the per-task grading vs test-command "
                    "comparison (bench_grading.py measures more tasks).")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-"))
    demo = materialize_demo(work / "demo")
    tasks = load_tasks(demo.tasks_file).tasks
    outcomes = ImageBuilder(ImageConfig(repos_dir=demo.repos_dir, log_dir=work / "builds")).build_all(tasks)
    images = {o.instance_id: o.image for o in outcomes if o.ok}
    image = images[tasks[0].instance_id]
    client = docker_client()
    cmd = "git status --short | wc -l"

    print(f"# swerl environment benchmarks ({len(tasks)} demo tasks, image {image})\n")
    with DockerSandbox(image, DockerSandboxConfig()) as sb:
        cid = sb.container_id
        sb.exec(cmd)
        ours = timed(lambda: sb.exec(cmd), args.execs)
        raw_cli = timed(lambda: subprocess.run(["docker", "exec", "-w", "/testbed", cid, "bash", "-c", cmd], capture_output=True, check=True), args.execs)
        container = client.containers.get(cid)
        raw_api = timed(lambda: container.exec_run(["bash", "-c", cmd], workdir="/testbed"), args.execs)
    with DockerSandbox(image, DockerSandboxConfig(exec_channel=True)) as sb:
        sb.exec(cmd)
        channel = timed(lambda: sb.exec(cmd), args.execs)
    print("## exec overhead (same command, same container)")
    print(f"sandbox.exec          {ms(ours)}")
    print(f"sandbox.exec, channel {ms(channel)}   ratio channel/raw CLI = {statistics.median(channel) / statistics.median(raw_cli):.2f}x")
    print(f"raw docker exec (CLI) {ms(raw_cli)}   ratio sandbox/raw = {statistics.median(ours) / statistics.median(raw_cli):.2f}x")
    print(f"raw exec_run (API)    {ms(raw_api)}   ratio sandbox/raw = {statistics.median(ours) / statistics.median(raw_api):.2f}x\n")

    def start_stop() -> None:
        with DockerSandbox(image, DockerSandboxConfig()) as s:
            s.exec("true")

    def raw_run() -> None:
        subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"], capture_output=True, check=True)

    ours_start = timed(start_stop, args.starts)
    raw_start = timed(raw_run, args.starts)
    print("## container start latency (start, first exec, remove)")
    print(f"DockerSandbox         {ms(ours_start)}")
    print(f"raw docker run --rm   {ms(raw_start)}   ratio = {statistics.median(ours_start) / statistics.median(raw_start):.2f}x\n")

    print("## grading throughput (gold patches, fresh sandbox each)")
    base = None
    for c in args.concurrency:
        jobs = [(t, t.patch, images[t.instance_id], "gold") for t in tasks]
        t0 = time.perf_counter()
        results = grade_many(jobs, GradingConfig(), concurrency=c)
        wall = time.perf_counter() - t0
        per_min = len(jobs) / wall * 60
        base = base or per_min
        ok = sum(r.resolved for r in results)
        print(f"concurrency {c}: {len(jobs)} tasks in {wall:6.1f} s = {per_min:5.1f} tasks/min "
              f"({per_min / base:.2f}x of concurrency {args.concurrency[0]}), resolved {ok}/{len(jobs)}")

    grading_vs_test_command(tasks, images, args.grading_reps)


def grading_vs_test_command(tasks, images: dict[str, str], reps: int) -> None:
    """Per task, side by side: a grading with every layer (guard, hygiene, canaries, report) against the
    test command's own time inside the same image (bench_grading.py's two measurements)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grading import GOAL, grading_time, test_command_alone

    config = GradingConfig()
    print(f"\n## grading time per task against the test command alone (medians of {reps}, goal <= {GOAL}x)")
    ratios = []
    for task in tasks:
        image = images[task.instance_id]
        test_command_alone(task, image, config)  # warm-up
        graded, alone = [], []
        for _ in range(reps):
            graded.append(grading_time(task, image, config, []))
            alone.append(test_command_alone(task, image, config)[0])
        g, t = statistics.median(graded), statistics.median(alone)
        ratios.append(g / t)
        print(f"{task.instance_id:<28} grading {g:5.2f} s  test command {t:5.2f} s  ratio {g / t:5.2f}x")
    print(f"median ratio {statistics.median(ratios):.2f}x; {sum(r <= GOAL for r in ratios)}/{len(ratios)} within {GOAL}x")


if __name__ == "__main__":
    main()
