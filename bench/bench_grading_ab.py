"""Grading time of this tree against an older commit's, paired in one run, with the plain ``docker run``.

    .venv/bin/python bench/bench_grading_ab.py --ref COMMIT [--sets demo pypi] [--reps 5]

On a shared machine the load moves more between two runs of ``bench_grading.py`` than a change
of the grader's fixed cost, so this one measures both in the same run: a worker process per
source tree (this one, and ``git archive COMMIT`` unpacked in a temporary folder) grades with the
gold patch on request, and for every task and repetition the two gradings and the plain
``docker run`` of the test command (as ``bench_grading.py`` times it) follow each other in an
order that rotates. Prints per task the medians of each, the ratio of each grading to the plain
run (goal: at most 1.5x), and the in-container command time of each grading.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(tasks_file: str) -> None:
    """Grade the task whose index arrives on each stdin line; answer one JSON line (wall and command seconds)."""
    from swerl.data.task import Task
    from swerl.envs import docker_sandbox
    from swerl.grading.grader import GradingConfig, grade_prediction

    spec = json.loads(Path(tasks_file).read_text())
    tasks = [Task.model_validate(t) for t in spec["tasks"]]
    durations: list[float] = []
    original = docker_sandbox.DockerSandbox.run_once

    def run_once(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        durations.append(result.duration_s)
        return result

    docker_sandbox.DockerSandbox.run_once = run_once
    config = GradingConfig()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        task = tasks[int(line)]
        durations.clear()
        t = time.perf_counter()
        res = grade_prediction(task, task.patch, spec["images"][task.instance_id], config, model_name="gold")
        wall = time.perf_counter() - t
        print(json.dumps({"wall": wall, "command": sum(durations), "resolved": res.resolved, "reason": res.reason[:300]}),
              flush=True)


class Worker:
    def __init__(self, tree: Path, tasks_file: Path):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_grading_ab.py"), "--worker", str(tasks_file)],
                                     cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer()

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"a grading worker ended (exit {self.proc.wait()})")

    def grade(self, index: int) -> dict:
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    sys.path.insert(0, str(ROOT))  # not in a worker: it imports its own tree's swerl
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_grading as bg
    from swerl.grading.grader import GradingConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="The commit to compare with (its grader code is run from a git archive).")
    ap.add_argument("--sets", nargs="+", choices=["demo", "pypi"], default=["demo", "pypi"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-grading-ab-"))
    old_tree = work / "old"
    old_tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref], capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(old_tree)
    tasks, images = [], {}
    for name in args.sets:
        got, imgs = {"demo": bg.demo_set, "pypi": bg.pypi_set}[name](work)
        tasks += got
        images.update(imgs)
    tasks_file = work / "tasks.json"
    tasks_file.write_text(json.dumps({"tasks": [t.model_dump(mode="json") for t in tasks], "images": images}))
    trees = {"old": Worker(old_tree, tasks_file), "new": Worker(ROOT, tasks_file)}
    config = GradingConfig()
    times: dict[tuple[str, str], list[float]] = {}
    commands: dict[tuple[str, str], list[float]] = {}
    for i, task in enumerate(tasks):  # warm-up: images paged in, modules imported
        bg.test_command_alone(task, images[task.instance_id], config)
        for w in trees.values():
            w.grade(i)
    kinds = ["old", "new", "run"]
    for rep in range(args.reps):
        for i, task in enumerate(tasks):
            for kind in kinds[rep % 3:] + kinds[:rep % 3]:
                key = (task.instance_id, kind)
                if kind == "run":
                    times.setdefault(key, []).append(bg.test_command_alone(task, images[task.instance_id], config)[1])
                    continue
                got = trees[kind].grade(i)
                if not got["resolved"]:
                    raise SystemExit(f"{task.instance_id} ({kind}): gold not resolved: {got['reason']}")
                times.setdefault(key, []).append(got["wall"])
                commands.setdefault(key, []).append(got["command"])
    for w in trees.values():
        w.close()

    med = statistics.median
    print(f"# grading at {args.ref} (old) and in this tree (new) against a plain docker run of the test command "
          f"({len(tasks)} tasks, {args.reps} repetitions, medians, paired in one run)\n")
    width = max(len(t.instance_id) for t in tasks)
    print(f"{'task':<{width}}  docker run  old grading  new grading  old/run  new/run  old command  new command")
    ratios = {"old": [], "new": []}
    for task in tasks:
        t = task.instance_id
        run, old, new = med(times[(t, "run")]), med(times[(t, "old")]), med(times[(t, "new")])
        ratios["old"].append(old / run)
        ratios["new"].append(new / run)
        print(f"{t:<{width}}  {run:8.2f} s  {old:9.2f} s  {new:9.2f} s  {old / run:6.2f}x  {new / run:6.2f}x  "
              f"{med(commands[(t, 'old')]):9.3f} s  {med(commands[(t, 'new')]):9.3f} s")
    total = {k: sum(med(times[(t.instance_id, k)]) for t in tasks) for k in kinds}
    for k in ("old", "new"):
        r = ratios[k]
        print(f"{k}: grading/run {total[k] / total['run']:.2f}x over all tasks, median per task {med(r):.2f}x, "
              f"worst {max(r):.2f}x, {sum(x <= bg.GOAL for x in r)}/{len(r)} within {bg.GOAL}x; median in-container "
              f"command {med([c for (_, k2), v in commands.items() if k2 == k for c in v]):.3f} s")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1])
    else:
        main()
