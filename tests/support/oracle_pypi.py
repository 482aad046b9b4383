"""The real-package tasks (tests/support/pypi_tasks.py) graded by swebench's own harness and by swerl side by
side: the records as a SWE-bench publisher writes them, the predictions (gold, empty, legitimate variants, hacks)
and the comparison every official-harness test makes."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from swerl.data.loaders import load_tasks
from swerl.data.task import Task
from swerl.grading.diffs import split_diff
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.results import FailureClass
from swerl.grading.validate import verdict
from tests.support.oracle import swebench_verdicts, variant
from tests.support.pypi_tasks import TEST_CMD, TaskSpec, publish


def swebench_records(specs: tuple[TaskSpec, ...], root: Path) -> tuple[dict, dict[str, Task], Path]:
    """The tasks as SWE-bench 5 records of their own images: the publisher's eval script, without conda (their
    Python is on PATH), running the files their tests live in, and re-installing the package once the prediction
    is in when the package says so (``Package.reinstall``: as root and online under swebench; as the test user,
    so failing, under swerl, where the image's install stands). (records, tasks read back, repository mirrors)."""
    from swerl.demo.swebench_records import eval_script, swebench_record

    if os.environ.get("SWERL_ORACLE_ONLY"):  # one repository's tasks, when looking into a disagreement
        specs = tuple(s for s in specs if s.package.repo == os.environ["SWERL_ORACLE_ONLY"])
    published = publish(root, specs)
    by_id = {s.instance_id: s.package for s in specs}
    records = {}
    for task in load_tasks(published.tasks_file).tasks:
        pkg = by_id[task.instance_id]
        record = swebench_record(task, published.images[task.instance_id])
        script = eval_script(task, test_cmd=f"{TEST_CMD} {' '.join(pkg.related_tests)}",
                             install=pkg.install.replace("pip install", "python -m pip install") if pkg.reinstall else None)
        record["eval_script"] = "".join(line for line in script.splitlines(keepends=True) if "activate" not in line)
        records[task.instance_id] = record
    path = root / "swebench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records.values()))
    return records, {t.instance_id: t for t in load_tasks(path).tasks}, published.repos_dir


def common_predictions(tasks: dict[str, Task], repos: Path, tmp: Path, *, testing_folder: bool = True) -> list[tuple]:
    """(instance_id, name, patch, legitimate) for every task: gold, empty, and (``testing_folder``) the fix
    needing library code in a folder named `testing`."""
    preds = []
    for iid, task in tasks.items():
        repo = repos / task.repo.replace("/", "__")
        parts = split_diff(task.patch)[0].path.split("/")  # the package the fix is in, src layout or not
        folder, pkg = ("/".join(parts[:2]), parts[1]) if parts[0] == "src" else (parts[0], parts[0])
        preds += [(iid, "gold", task.patch, True), (iid, "empty", "", True)]
        if testing_folder:
            preds.append((iid, "testing_folder_helper", variant(repo, task.base_commit, task.patch, {
                f"{folder}/testing/__init__.py": lambda t: t + "\nMARK = 'library code in a folder named testing'\n",
                f"{folder}/__init__.py": lambda t, pkg=pkg: t + f"\nfrom {pkg}.testing import MARK as _MARK  # noqa: F401\n"},
                tmp), True))
    return preds


def agree(records: dict, tasks: dict[str, Task], preds: list[tuple], tmp: Path) -> dict:
    """Grade ``preds`` with swebench's harness and with swerl; assert equal verdicts on every legitimate one and
    `tampered` from swerl on every hack (each resolved by swebench), and that each task validates, with every
    legitimate variant taken as its gold patch too. The table of verdicts, by (instance_id, name)."""
    official = swebench_verdicts(records, preds, f"swerl-oracle-{uuid.uuid4().hex[:8]}")
    ours = grade_many([(tasks[iid], patch, tasks[iid].image, name) for iid, name, patch, _ in preds],
                      GradingConfig(grading_logs=tmp / "swerl", run_tests_without_patch=True), concurrency=2)
    table = {(iid, name): (theirs, mine.resolved, mine.failure_class, mine.reason[:300])
             for (iid, name, _, _), theirs, mine in zip(preds, official, ours)}
    assert {key: row[0] for key, row in table.items()} == {key: key[1] != "empty" for key in table}, table
    legitimate = {(iid, name) for iid, name, _, legit in preds if legit}
    assert {key: row[1] for key, row in table.items() if key in legitimate} == {
        key: row[0] for key, row in table.items() if key in legitimate}, table
    assert {key: row[1:3] for key, row in table.items() if key not in legitimate} == {
        key: (False, FailureClass.TAMPERED) for key in table if key not in legitimate}, table
    # validated as a publisher validates, from these gradings: gold resolves, the empty patch does not, the
    # FAIL_TO_PASS tests fail without the fix, and no rule dropped a file of the gold patch; so with every
    # legitimate variant as the task's gold patch
    for iid, task in tasks.items():
        graded = {name: mine for (i, name, _, _), mine in zip(preds, ours) if i == iid}
        v = verdict(task, task.image, [graded["gold"]], graded["empty"])
        assert (v.valid, v.gold_dropped) == (True, {}), v.reason
        for i, name, patch, legit in preds:
            if i == iid and legit and name not in ("gold", "empty"):
                v = verdict(task.model_copy(update={"patch": patch}), task.image, [graded[name]], graded["empty"])
                assert (v.valid, v.gold_dropped) == (True, {}), (name, v.reason)
    return table
