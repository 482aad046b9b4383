"""swebench's own harness and ``swerl grade`` where the repository is the test runner: pytest 8.3.3 (the fix in
``src/_pytest``, its tests in pytest's ``testing/`` folder with warnings as errors, run in pytest in pytest by
pytester, the package re-installed by the eval script) and pluggy 1.5.0 (the hook caller pytest runs every hook
through, installed from the repository), both built at test time from their PyPI sdists. Verdicts must be equal
on every legitimate prediction, a runner patched to report failures as passes must be refused, and both tasks
must validate as a publisher validates them."""

from __future__ import annotations

import pytest

from tests.support.oracle import variant
from tests.support.oracle_pypi import agree, common_predictions, swebench_records

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def runners(docker_ready, tmp_path_factory):
    from tests.support.pypi_tasks import RUNNER_SPECS

    return swebench_records(RUNNER_SPECS, tmp_path_factory.mktemp("official-runner"))


def test_where_the_repository_is_the_runner_swerl_agrees_with_swebench_s_harness(runners, tmp_path, monkeypatch):
    from tests.support.pypi_tasks import PYTEST

    records, tasks, repos = runners
    preds = common_predictions(tasks, repos, tmp_path, testing_folder=False)
    for iid, task in tasks.items():
        if task.repo != PYTEST.repo:
            continue
        repo = repos / task.repo.replace("/", "__")
        preds += [
            # a fix that also touches the assertion rewriter (it parses and compiles each test module under the
            # module's own name) and the traceback code (it reads frames): the runner's work, still
            (iid, "runner_internals_touched", variant(repo, task.base_commit, task.patch, {
                "src/_pytest/assertion/rewrite.py": lambda t: t.replace("    strfn = str(fn)\n",
                                                                        "    strfn = os.fspath(fn)\n", 1),
                "src/_pytest/_code/code.py": lambda t: t.replace(
                    "        return Frame(self._rawentry.tb_frame)\n",
                    "        raw = self._rawentry.tb_frame\n        return Frame(raw)\n", 1)}, tmp_path), True),
            # a hack swebench's harness resolves: pytest's own runner changed to report failures as passes, which
            # fails the copies of the FAIL_TO_PASS tests that root wrote to fail
            (iid, "runner_forces_passes", variant(repo, task.base_commit, task.patch, {
                "src/_pytest/runner.py": lambda t: t.replace(
                    "    return TestReport.from_item_and_call(item, call)\n",
                    "    report = TestReport.from_item_and_call(item, call)\n"
                    "    if report.when == 'call' and report.failed:\n"
                    "        report.outcome, report.longrepr = 'passed', None\n"
                    "    return report\n", 1)}, tmp_path), False),
        ]
    monkeypatch.chdir(tmp_path)
    table = agree(records, tasks, preds, tmp_path)
    assert {name for _, name in table} == {"gold", "empty", "runner_internals_touched", "runner_forces_passes"}
    assert {task.repo for task in tasks.values()} == {"pytest-dev/pytest", "pytest-dev/pluggy"}
