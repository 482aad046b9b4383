"""Grading wall time per task against the test command's own time inside the same image.

    .venv/bin/python bench/bench_grading.py [--sets demo pypi] [--reps 3]

For every task (the demo tasks, and the real-package tasks of tests/support/pypi_tasks.py:
more-itertools, toolz and idna sdists from PyPI, Python 3.9 and 3.11), side by side in one run
and alternating which goes first:

* grading: ``grade_prediction`` with the gold patch, a fresh sandbox each (one container whose
  only command is the grading: patch filtering and application, test-file restore, test patch,
  lock-down, instrumented tests as the test user, report; then removal), timed from the host;
* the test command alone: a plain ``docker run --network none`` of the same image with the same
  CPU and memory limits as a grading sandbox; the test and gold patches are applied first
  (untimed), then the task's test command on the files grading gives it is timed *inside* the
  container (``date +%s%N`` around it). The whole ``docker run`` is timed too, as the raw
  baseline of "start a container, apply, test, remove".

Prints medians over the repetitions, the ratio grading / test command alone, and the ratio to
the plain ``docker run`` of it (goal: at most 1.5x; a container's start and removal, ~0.25 s here,
are a cost of any isolated run, so a sub-second suite cannot be within 1.5x of its in-container time), and where grading's time goes (the container's start and
exit, the command inside it, a large report's read, removal, the host's own work).
"""

from __future__ import annotations

import argparse
import base64
import collections
import functools
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, when run as a script

from swerl.data.loaders import load_tasks  # noqa: E402
from swerl.data.task import Task  # noqa: E402
from swerl.envs import docker_sandbox  # noqa: E402
from swerl.envs.images import ImageBuilder, ImageConfig  # noqa: E402
from swerl.grading.grader import GradingConfig, grade_prediction  # noqa: E402
from swerl.grading.plan import select_test_files  # noqa: E402

GOAL = 1.5


def demo_set(work: Path) -> tuple[list[Task], dict[str, str]]:
    from swerl.demo import materialize_demo

    demo = materialize_demo(work / "demo")
    tasks = load_tasks(demo.tasks_file).tasks
    outcomes = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=work / "builds")).build_all(tasks)
    bad = [o.error for o in outcomes if not o.ok]
    if bad:
        raise SystemExit(f"demo image builds failed: {bad}")
    return tasks, {o.instance_id: o.image for o in outcomes}


def pypi_set(work: Path) -> tuple[list[Task], dict[str, str]]:
    from tests.support.pypi_tasks import publish

    pub = publish(work / "pypi")
    return load_tasks(pub.tasks_file).tasks, pub.images


def test_command_alone(task: Task, image: str, config: GradingConfig) -> tuple[float, float]:
    """(seconds of the test command inside the container, seconds of the whole docker run)."""
    sb = config.sandbox
    steps = ["cd /testbed"]
    for i, patch in enumerate([task.test_patch, task.patch]):
        if patch.strip():
            b64 = base64.b64encode(patch.encode()).decode()
            steps.append(f"echo {b64} | base64 -d > /tmp/p{i}.diff && git apply /tmp/p{i}.diff || exit 97")
    files = " ".join(shlex.quote(f) for f in select_test_files(task))
    steps += [
        *task.install_config.eval_commands,
        "t0=$(date +%s%N)",
        f"{task.install_config.test_cmd} {files} > /tmp/test.log 2>&1",
        "t1=$(date +%s%N)",
        'echo "@@test_ns $((t1 - t0))"',
    ]
    t = time.perf_counter()
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--cpus", str(sb.cpus), "--memory", sb.memory,
         "--memory-swap", sb.memory, "--pids-limit", str(sb.pids_limit), image, "bash", "-c", "\n".join(steps)],
        capture_output=True, text=True, timeout=config.test_timeout_s,
    )
    whole = time.perf_counter() - t
    m = re.search(r"@@test_ns (\d+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"{task.instance_id}: the plain test run failed (exit {proc.returncode}): "
                           f"{proc.stdout[-500:]}{proc.stderr[-500:]}")
    return int(m.group(1)) / 1e9, whole


PHASES = ("container", "command", "report read", "removal", "host side")
_phase_times: collections.Counter | None = None


def _timed_phase(method: str):
    """Wrap a DockerSandbox method so a grading's time is split by phase: the one-shot container's
    start and exit around its command, the command itself (as the runner timed it), the large-report
    read, removal."""
    original = getattr(docker_sandbox.DockerSandbox, method)

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        t = time.perf_counter()
        result = None
        try:
            result = original(self, *args, **kwargs)
            return result
        finally:
            if _phase_times is not None:
                took = time.perf_counter() - t
                if method == "run_once" and result is not None:
                    _phase_times["command"] += result.duration_s
                    took -= result.duration_s
                _phase_times[{"run_once": "container", "read_file": "report read", "close": "removal"}[method]] += took

    setattr(docker_sandbox.DockerSandbox, method, wrapper)


for _m in ("run_once", "read_file", "close"):
    _timed_phase(_m)


def grading_time(task: Task, image: str, config: GradingConfig, phases: list[collections.Counter]) -> float:
    global _phase_times
    _phase_times = collections.Counter()
    t = time.perf_counter()
    res = grade_prediction(task, task.patch, image, config, model_name="gold")
    wall = time.perf_counter() - t
    _phase_times["host side"] = wall - sum(_phase_times.values())
    phases.append(_phase_times)
    _phase_times = None
    if not res.resolved:
        raise RuntimeError(f"{task.instance_id}: gold not resolved: {res.failure_class} {res.reason[:300]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=["demo", "pypi"], default=["demo", "pypi"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None, help="Where task files and mirrors are made (default: a temp dir).")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="swerl-bench-grading-"))
    tasks: list[Task] = []
    images: dict[str, str] = {}
    for name in args.sets:
        got, imgs = {"demo": demo_set, "pypi": pypi_set}[name](work)
        tasks += got
        images.update(imgs)
    config = GradingConfig()
    for task in tasks:  # warm-up: page the images in and import the grader's modules, so that the first
        test_command_alone(task, images[task.instance_id], config)  # repetition is not an outlier
        grade_prediction(task, task.patch, images[task.instance_id], config, model_name="warm-up")

    inside: dict[str, list[float]] = {t.instance_id: [] for t in tasks}
    whole: dict[str, list[float]] = {t.instance_id: [] for t in tasks}
    grading: dict[str, list[float]] = {t.instance_id: [] for t in tasks}
    phases: list[collections.Counter] = []
    for rep in range(args.reps):
        for task in tasks:
            image = images[task.instance_id]
            order = [0, 1] if rep % 2 == 0 else [1, 0]
            for which in order:
                if which == 0:
                    grading[task.instance_id].append(grading_time(task, image, config, phases))
                else:
                    a, b = test_command_alone(task, image, config)
                    inside[task.instance_id].append(a)
                    whole[task.instance_id].append(b)

    med = statistics.median
    print(f"# grading wall time vs the test command's own time in the same image ({len(tasks)} tasks, "
          f"{args.reps} repetitions, medians; sandbox {config.sandbox.cpus:g} CPU, {config.sandbox.memory})\n")
    width = max(len(t.instance_id) for t in tasks)
    print(f"{'task':<{width}}  py    test cmd  docker run   grading  grading/test  grading/run  overhead")
    ratios = []
    for task in tasks:
        i, w, g = med(inside[task.instance_id]), med(whole[task.instance_id]), med(grading[task.instance_id])
        ratios.append(g / w)
        flag = "" if g / w <= GOAL else "  > goal"
        print(f"{task.instance_id:<{width}}  {task.install_config.python:<4}  {i:7.2f} s  {w:8.2f} s  {g:6.2f} s  "
              f"{g / i:10.2f}x  {g / w:10.2f}x  {g - i:6.2f} s{flag}")
    tot_i = sum(med(v) for v in inside.values())
    tot_w = sum(med(v) for v in whole.values())
    tot_g = sum(med(v) for v in grading.values())
    print(f"\nall tasks: test cmd {tot_i:.2f} s, docker run {tot_w:.2f} s, grading {tot_g:.2f} s: "
          f"grading/test {tot_g / tot_i:.2f}x, grading/run {tot_g / tot_w:.2f}x; "
          f"median per-task grading/run {med(ratios):.2f}x; {sum(r <= GOAL for r in ratios)}/{len(ratios)} tasks "
          f"within {GOAL}x of a plain docker run of their test command")
    print(f"\n## where a grading's time goes (median over {len(phases)} gradings, seconds)")
    print("  ".join(f"{p} {med([c[p] for c in phases]):.3f}" for p in PHASES))


if __name__ == "__main__":
    main()
