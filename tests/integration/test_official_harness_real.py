"""swebench's own harness and ``swerl grade`` on real packages made at test time from PyPI sdists
(tests/support/pypi_tasks.py), published as SWE-bench 5 records of their own images: idna on Python 3.9
(unittest-style test classes, pyproject only), pytest-mock on 3.11 (a pytest plugin whose own suite runs
pytest inside pytest and needs itself loaded there by its entry point) and trio on 3.11 (the bug inside the
library's own ``testing`` package, async tests run by trio's pytest plugin, and the install every SWE-bench
script re-runs after the patch) and pytest itself on 3.11 (the repository is the runner: the fix in
``src/_pytest``, its tests in pytest's ``testing/`` folder, run in pytest in pytest). Verdicts must be equal on
every legitimate prediction, stricter only on a hack, and every task must validate as a publisher validates it."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from swerl.data.loaders import load_tasks
from swerl.grading.diffs import split_diff
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.results import FailureClass
from swerl.grading.validate import verdict
from tests.support.oracle import swebench_verdicts, variant

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def pypi(docker_ready, tmp_path_factory):
    """The real-package tasks (tests/support/pypi_tasks.py) as SWE-bench 5 records of their own images: the
    publisher's eval script, without conda (their Python is on PATH), running the files their tests live in."""
    from swerl.demo.swebench_records import eval_script, swebench_record
    from tests.support.pypi_tasks import IDNA, PLUGGY, PYTEST, SHAPE_SPECS, TASK_SPECS, TEST_CMD, TRIO, publish

    # idna on 3.9 (pyproject only, unittest-style test classes) and pytest-mock on 3.11 (a pytest plugin whose
    # own suite runs pytest inside pytest, and needs itself loaded there by its entry point)
    specs = tuple(s for s in TASK_SPECS if (s.package, s.python) == (IDNA, "3.9")) + SHAPE_SPECS
    if os.environ.get("SWERL_ORACLE_ONLY"):  # one repository's tasks, when looking into a disagreement
        specs = tuple(s for s in specs if s.package.repo == os.environ["SWERL_ORACLE_ONLY"])
    root = tmp_path_factory.mktemp("official-pypi")
    published = publish(root, specs)
    related = {s.instance_id: s.package.related_tests for s in specs}
    records = {}
    for task in load_tasks(published.tasks_file).tasks:
        record = swebench_record(task, published.images[task.instance_id])
        # trio's as every SWE-bench record's: the package re-installed once the prediction is in (as root and
        # online under swebench; as the test user, so failing, under swerl, where the image's install stands)
        install = {TRIO.repo: "python -m pip install -e .",
                   PYTEST.repo: "SETUPTOOLS_SCM_PRETEND_VERSION=8.3.3 python -m pip install -e .",
                   PLUGGY.repo: "SETUPTOOLS_SCM_PRETEND_VERSION=1.5.0 python -m pip install -e ."}.get(task.repo)
        script = eval_script(task, test_cmd=f"{TEST_CMD} {' '.join(related[task.instance_id])}", install=install)
        record["eval_script"] = "".join(line for line in script.splitlines(keepends=True) if "activate" not in line)
        records[task.instance_id] = record
    path = root / "swebench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records.values()))
    return records, {t.instance_id: t for t in load_tasks(path).tasks}, published.repos_dir


def test_on_real_packages_swerl_agrees_with_swebench_s_harness(pypi, tmp_path, monkeypatch):
    records, tasks, repos = pypi
    preds = []
    for iid, task in tasks.items():
        repo = repos / task.repo.replace("/", "__")
        parts = split_diff(task.patch)[0].path.split("/")  # the package the fix is in, src layout or not
        folder, pkg = ("/".join(parts[:2]), parts[1]) if parts[0] == "src" else (parts[0], parts[0])
        preds += [
            (iid, "gold", task.patch, True),
            (iid, "empty", "", True),
            (iid, "testing_folder_helper", variant(repo, task.base_commit, task.patch, {
                f"{folder}/testing/__init__.py": lambda t: t + "\nMARK = 'library code in a folder named testing'\n",
                f"{folder}/__init__.py": lambda t, pkg=pkg: t + f"\nfrom {pkg}.testing import MARK as _MARK  # noqa: F401\n"},
                tmp_path), True),
        ]
        if task.repo == "pytest-dev/pytest":  # the repository is the runner: a patch can change what reports
            # a fix that also touches the assertion rewriter (it parses and compiles each test module under the
            # module's own name) and the traceback code (it reads frames): the runner's work, still
            preds.append((iid, "runner_internals_touched", variant(repo, task.base_commit, task.patch, {
                "src/_pytest/assertion/rewrite.py": lambda t: t.replace("    strfn = str(fn)\n",
                                                                        "    strfn = os.fspath(fn)\n", 1),
                "src/_pytest/_code/code.py": lambda t: t.replace(
                    "        return Frame(self._rawentry.tb_frame)\n",
                    "        raw = self._rawentry.tb_frame\n        return Frame(raw)\n", 1)}, tmp_path), True))
            preds.append((iid, "runner_forces_passes", variant(repo, task.base_commit, task.patch, {
                "src/_pytest/runner.py": lambda t: t.replace(
                    "    return TestReport.from_item_and_call(item, call)\n",
                    "    report = TestReport.from_item_and_call(item, call)\n"
                    "    if report.when == 'call' and report.failed:\n"
                    "        report.outcome, report.longrepr = 'passed', None\n"
                    "    return report\n", 1)}, tmp_path), False))
        # a dependency that names pytest, on the first task that declares dependencies
        if "dependencies = [" in (repo / "pyproject.toml").read_text() and not any(
                p[1] == "pyproject_dependencies" for p in preds):
            preds.append((iid, "pyproject_dependencies", variant(repo, task.base_commit, task.patch, {
                "pyproject.toml": lambda t: t.replace("dependencies = [", 'dependencies = [\n    "pytest-timeout>=0; '
                                                      'python_version < \'3\'",', 1)}, tmp_path), True))
    monkeypatch.chdir(tmp_path)
    official = swebench_verdicts(records, preds, f"swerl-oracle-{uuid.uuid4().hex[:8]}")
    ours = grade_many([(tasks[iid], patch, tasks[iid].image, name) for iid, name, patch, _ in preds],
                      GradingConfig(log_dir=tmp_path / "swerl", run_tests_without_patch=True), concurrency=2)
    table = {(iid, name): (theirs, mine.resolved, mine.failure_class, mine.reason[:300])
             for (iid, name, _, _), theirs, mine in zip(preds, official, ours)}
    assert {key: row[0] for key, row in table.items()} == {key: key[1] != "empty" for key in table}, table
    legitimate = {(iid, name) for iid, name, _, legit in preds if legit}
    assert {key: row[1] for key, row in table.items() if key in legitimate} == {
        key: row[0] for key, row in table.items() if key in legitimate}, table
    # a hack swebench's harness resolves, refused: pytest's own runner changed to report failures as passes fails
    # the copies of the FAIL_TO_PASS tests that root wrote to fail
    assert {key: row[1:3] for key, row in table.items() if key not in legitimate} == {
        key: (False, FailureClass.TAMPERED) for key in table if key not in legitimate}, table
    assert any(name == "pyproject_dependencies" for _, name in table)
    # one task's bug (so its gold fix) is inside the library's own `testing` package
    assert any("/testing/" in split_diff(t.patch)[0].path for t in tasks.values())
    # and validated as a publisher validates, from these gradings: gold resolves, the empty patch does not, the
    # FAIL_TO_PASS tests fail without the fix, and no rule dropped a file of the gold patch
    for iid, task in tasks.items():
        graded = {name: mine for (i, name, _, _), mine in zip(preds, ours) if i == iid}
        v = verdict(task, task.image, [graded["gold"]], graded["empty"])
        assert (v.valid, v.gold_dropped) == (True, {}), v.reason
        # the same task with its fix needing library code in a `testing` folder (or a dependency declared in
        # pyproject.toml) as its gold patch: valid too, nothing of it dropped
        for shape in ("testing_folder_helper", "pyproject_dependencies"):
            if shape in graded:
                as_gold = task.model_copy(update={"patch": next(p for i, n, p, _ in preds if (i, n) == (iid, shape))})
                v = verdict(as_gold, task.image, [graded[shape]], graded["empty"])
                assert (v.valid, v.gold_dropped) == (True, {}), (shape, v.reason)
