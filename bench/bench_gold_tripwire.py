"""Every layer on, gold patches only: how often the grader's defences fire on legitimate fixes (goal: never).

    .venv/bin/python bench/bench_gold_tripwire.py [--sets demo pypi curriculum] [--curriculum 3]

For each task of the sets (the demo tasks; the real-package tasks of tests/support/pypi_tasks.py, from
the PyPI sdists of idna, toolz and more-itertools; a generated curriculum, N tasks per split), the gold
patch is graded with the default GradingConfig (test user, canaries, tripwire, audit). Prints, per set
and in all: gold patches resolved, gradings the tripwire recorded anything in (false positives: the
gold patch is a real fix), records in all, gradings whose audit found planted files, canaries built and
the interpreters that started with the tripwire in (each grading's pytest at least), and the tasks whose
FAIL_TO_PASS tests got no canary, with why.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, when run as a script

from swerl.data.loaders import load_tasks  # noqa: E402
from swerl.data.task import Task  # noqa: E402
from swerl.envs.images import ImageBuilder, ImageConfig  # noqa: E402
from swerl.grading.evidence import tripwire_records  # noqa: E402
from swerl.grading.grader import GradingConfig, grade_prediction  # noqa: E402


def built_images(tasks: list[Task], repos: Path, work: Path) -> dict[str, str]:
    outcomes = ImageBuilder(ImageConfig(repos=repos, build_logs=work / "builds", builds=2)).build_all(tasks)
    bad = [o.error for o in outcomes if not o.ok]
    if bad:
        raise SystemExit(f"image builds failed: {bad[:3]}")
    return {o.instance_id: o.image for o in outcomes}


def demo_set(work: Path, _: int) -> tuple[list[Task], dict[str, str]]:
    from swerl.demo import materialize_demo

    demo = materialize_demo(work / "demo")
    tasks = load_tasks(demo.tasks_file).tasks
    return tasks, built_images(tasks, demo.repos_dir, work)


def pypi_set(work: Path, _: int) -> tuple[list[Task], dict[str, str]]:
    from tests.support.pypi_tasks import publish

    pub = publish(work / "pypi")
    return load_tasks(pub.tasks_file).tasks, pub.images


def curriculum_set(work: Path, per_split: int) -> tuple[list[Task], dict[str, str]]:
    from swerl.curriculum import SPLITS, CurriculumConfig, generate_curriculum

    result = generate_curriculum(work / "curriculum", CurriculumConfig(warmup=per_split, train=per_split, heldout=per_split))
    tasks = [t for split in SPLITS for t in load_tasks(result.tasks_files[split]).tasks]
    return tasks, built_images(tasks, result.repos_dir, work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=["demo", "pypi", "curriculum"], default=["demo", "pypi", "curriculum"])
    ap.add_argument("--curriculum", type=int, default=3, help="Curriculum tasks per split.")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="swerl-bench-gold-"))
    totals: collections.Counter = collections.Counter()
    print("# gold patches graded with every layer on (test user, canaries, tripwire, audit)\n")
    print(f"{'set':<11} {'tasks':>5} {'resolved':>8} {'tripwire FP':>11} {'records':>7} {'audit FP':>8} "
          f"{'canaries':>8} {'hellos':>6}")
    no_canary: dict[str, dict] = {}
    for name in args.sets:
        tasks, images = {"demo": demo_set, "pypi": pypi_set, "curriculum": curriculum_set}[name](work, args.curriculum)
        config = GradingConfig(grading_logs=work / "logs" / name)
        row: collections.Counter = collections.Counter(tasks=len(tasks))
        for task in tasks:
            res = grade_prediction(task, task.patch, images[task.instance_id], config, model_name="gold")
            root = json.loads((Path(res.log_dir) / "root.json").read_text()) if res.log_dir and (
                Path(res.log_dir) / "root.json").exists() else {}
            finish = root.get("finish") or {}
            records, hellos = tripwire_records(str(finish.get("tripwire") or ""))
            canaries = (root.get("canaries") or {})
            row["resolved"] += res.resolved
            row["tripwire FP"] += bool(records)
            row["records"] += len(records)
            row["audit FP"] += bool(finish.get("audit"))
            row["canaries"] += 2 * len(canaries.get("built") or [])
            row["hellos"] += hellos
            if canaries.get("not_built"):
                no_canary[task.instance_id] = canaries["not_built"]
            if not res.resolved:
                print(f"  {task.instance_id}: not resolved ({res.failure_class}): {res.reason[:300]}")
        totals.update(row)
        print(f"{name:<11} {row['tasks']:>5} {row['resolved']:>8} {row['tripwire FP']:>11} {row['records']:>7} "
              f"{row['audit FP']:>8} {row['canaries']:>8} {row['hellos']:>6}")
    print(f"{'all':<11} {totals['tasks']:>5} {totals['resolved']:>8} {totals['tripwire FP']:>11} {totals['records']:>7} "
          f"{totals['audit FP']:>8} {totals['canaries']:>8} {totals['hellos']:>6}")
    print(f"\ntripwire false positives on gold patches: {totals['tripwire FP']} of {totals['tasks']} gradings "
          f"({totals['records']} records)")
    for iid, why in sorted(no_canary.items()):
        print(f"  no canary for some FAIL_TO_PASS tests of {iid}: {json.dumps(why)[:300]}")


if __name__ == "__main__":
    main()
