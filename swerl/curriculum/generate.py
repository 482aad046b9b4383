"""Write a curriculum: git mirrors, one SWE-bench tasks file per split, and a manifest.

Layout under ``out``::

    repos/<owner>__<package>/   one repository per task, built exactly like the demo's
    warmup.jsonl train.jsonl heldout.jsonl
    curriculum.json             the config, counts, and per split each task's id and bug kind

Each repository has the demo's two deterministic commits (``swerl.demo.materialize``):
the buggy tree with its existing tests (``base_commit``), then the test and gold patches
(``Fix: <issue title>``, tagged), which stands for the future the agent must not see.

Variety: within a split the bug kinds are cycled evenly and, per kind, the templates are
dealt from a shuffled deck; every task has its own package (so splits never share a
repository), and no (bug kind, template, function name) combination occurs twice in the
whole curriculum, so a held-out task is never a copy of a training one with only its
package renamed. Everything is drawn from one ``Random`` seeded with the config's seed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from random import Random
from typing import Any

from swerl.curriculum.config import SPLITS, CurriculumConfig
from swerl.curriculum.names import MODULES, PACKAGE_PREFIXES, PACKAGE_SUFFIXES
from swerl.curriculum.task import GeneratedTask, TaskBuildError, build_task
from swerl.curriculum.templates import templates_for

# Reused as is: the demo's deterministic two-commit repositories (it only needs the task
# attributes that _MirrorTask provides) and its SWE-bench field order.
from swerl.demo.materialize import RECORD_ORDER, ensure_repository

_MAX_DRAWS = 100  # attempts per task before giving up on a (kind, template) pair
_CREATED_AT = datetime(2026, 2, 1, tzinfo=timezone.utc)
_INSTALL_CONFIG = {
    "python": "3.11",
    "install": "",
    "test_cmd": "pytest --no-header -rA --tb=short -p no:cacheprovider",
    "log_parser": "parse_log_pytest",
    "pip_packages": [],
}


@dataclass(frozen=True)
class CurriculumSet:
    """What :func:`generate_curriculum` wrote."""

    out: Path
    repos_dir: Path  # <out>/repos, one mirror per task: <owner>__<package>
    tasks_files: dict[str, Path]  # split -> <out>/<split>.jsonl
    manifest: Path  # <out>/curriculum.json
    instance_ids: dict[str, list[str]]  # split -> ids in file order
    bug_kinds: dict[str, dict[str, int]]  # split -> {bug kind: tasks}


@dataclass(frozen=True)
class _MirrorTask:
    """The attributes the demo's repository builder reads from a task."""

    slug: str
    mirror_name: str
    directory: Path  # holds repo/, the tree at base_commit
    title: str
    gold_patch: str
    test_patch: str


def generate_curriculum(out: Path, config: CurriculumConfig) -> CurriculumSet:
    """Generate the tasks of ``config`` under ``out`` (see the module docstring).

    Mirrors already holding exactly the expected history are reused; other mirrors of
    ``config.owner`` under ``out/repos`` (a previous, different curriculum) are removed.
    Raises RuntimeError naming the repository when git fails.
    """
    out = Path(out).absolute()
    repos_dir = out / "repos"
    repos_dir.mkdir(parents=True, exist_ok=True)
    plan = _draw(config)

    records: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    jobs = [(split, task) for split in SPLITS for task in plan[split]]
    with tempfile.TemporaryDirectory(prefix=".trees-", dir=out) as scratch:
        # each repository is its own folder and its own git processes: build them side by side
        with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
            commits = list(pool.map(lambda job: _mirror(job[1], config.owner, Path(scratch), repos_dir), jobs))
    for hour, ((split, task), base_commit) in enumerate(zip(jobs, commits)):
        records[split].append(_record(task, config.owner, base_commit, _CREATED_AT + timedelta(hours=hour)))
    _remove_stale(repos_dir, config.owner, {f"{config.owner}__{t.package}" for tasks in plan.values() for t in tasks})

    tasks_files = {}
    for split in SPLITS:
        tasks_files[split] = out / f"{split}.jsonl"
        _write(tasks_files[split], "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records[split]))
    kinds = {split: dict(sorted(Counter(t.kind for t in plan[split]).items())) for split in SPLITS}
    manifest = {
        "config": config.model_dump(mode="json"),
        "counts": {split: len(plan[split]) for split in SPLITS},
        "bug_kinds": kinds,
        "splits": {split: [{"instance_id": r["instance_id"], "bug_kind": t.kind, "template": t.template,
                            "file": t.module_path, "function": t.function}
                           for r, t in zip(records[split], plan[split])] for split in SPLITS},
    }
    _write(out / "curriculum.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return CurriculumSet(
        out=out, repos_dir=repos_dir, tasks_files=tasks_files, manifest=out / "curriculum.json",
        instance_ids={split: [r["instance_id"] for r in records[split]] for split in SPLITS}, bug_kinds=kinds,
    )


def instance_id(owner: str, package: str) -> str:
    return f"{owner}__{package}-1"


# ---------------------------------------------------------------------------- drawing


def _draw(config: CurriculumConfig) -> dict[str, list[GeneratedTask]]:
    """Every split's tasks, drawn in split order from one seeded generator."""
    rng = Random(f"swerl-curriculum:{config.seed}")
    packages = [p + s for p, s in itertools.product(PACKAGE_PREFIXES, PACKAGE_SUFFIXES)]
    rng.shuffle(packages)
    next_package = iter(packages)
    seen: set[tuple] = set()
    plan: dict[str, list[GeneratedTask]] = {}
    for split in SPLITS:
        kinds = list(config.kinds)
        rng.shuffle(kinds)
        decks = {kind: _deck(rng, kind) for kind in kinds}
        plan[split] = []
        for i in range(config.counts()[split]):
            kind = kinds[i % len(kinds)]
            task = _draw_task(rng, kind, decks[kind], next(next_package), seen, config.name_file)
            seen.add(task.combination)
            plan[split].append(task)
    return plan


def _deck(rng: Random, kind: str):
    """An endless deal of the templates that can carry ``kind``, reshuffled every round."""
    templates = templates_for(kind)
    while True:
        rng.shuffle(templates)
        yield from list(templates)


def _draw_task(rng: Random, kind: str, deck, package: str, seen: set[tuple], name_file: bool = False) -> GeneratedTask:
    template = next(deck)
    errors = []
    for _ in range(_MAX_DRAWS):
        try:
            task = build_task(rng, kind, template, package, rng.choice(MODULES), name_file=name_file)
        except TaskBuildError as e:
            errors.append(str(e))
            continue
        if task.combination not in seen:
            return task
        errors.append(f"combination {task.combination} already used")
    raise RuntimeError(f"could not build a {kind} task from template {template.key!r} in {_MAX_DRAWS} draws; "
                       f"last problems: {errors[-3:]}")


# ---------------------------------------------------------------------------- writing


def _mirror(task: GeneratedTask, owner: str, scratch: Path, repos_dir: Path) -> str:
    """Build (or reuse) the task's repository; return its base commit."""
    directory = scratch / task.package
    for path, text in task.files.items():
        target = directory / "repo" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    title = task.problem_statement.splitlines()[0].strip()
    mirror = _MirrorTask(task.package, f"{owner}__{task.package}", directory, title, task.gold_patch, task.test_patch)
    try:
        return ensure_repository(mirror, repos_dir)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _record(task: GeneratedTask, owner: str, base_commit: str, created_at: datetime) -> dict[str, Any]:
    values = {
        "instance_id": instance_id(owner, task.package),
        "repo": f"{owner}/{task.package}",
        "base_commit": base_commit,
        "patch": task.gold_patch,
        "test_patch": task.test_patch,
        "problem_statement": task.problem_statement,
        "hints_text": "",
        "created_at": created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "version": "0.1",
        "FAIL_TO_PASS": task.fail_to_pass,
        "PASS_TO_PASS": task.pass_to_pass,
        "install_config": dict(_INSTALL_CONFIG),
    }
    return {key: values[key] for key in RECORD_ORDER}


def _remove_stale(repos_dir: Path, owner: str, keep: set[str]) -> None:
    for path in repos_dir.glob(f"{owner}__*"):
        if path.name not in keep and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
