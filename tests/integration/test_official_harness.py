"""swebench's own harness is the oracle: its ``run_instance`` and ``swerl grade`` on the same SWE-bench 5
records must agree on every legitimate prediction; on a hack swerl may only be stricter.

The records are the demo tasks in SWE-bench's layout (images built locally, as test_swebench_format
builds them). swebench's side runs exactly what ``run_evaluation`` runs per instance (``make_test_spec``,
``run_instance``: its container, its apply commands, its eval script, ``get_eval_report``), in a run of
this test's own id, never its end-of-run summary (which lists every container of the daemon).
The legitimate variants are the shapes a real fix takes: a helper in a library folder named
``testing``, a new top-level module, dependency and metadata changes in ``pyproject.toml``, a
context line that moved (fuzz), CRLF line endings, a partial fix, a patch cut before its final
newline (which swebench's last command, GNU patch, still takes), a malformed hunk (which none
of its commands takes, so neither may swerl).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from swerl.data.loaders import load_tasks
from swerl.demo.swebench_format import materialize_swebench_demo
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.results import FailureClass
from tests.support.oracle import swebench_verdicts, variant

pytestmark = pytest.mark.docker

SLUGS = ["eventbus"]  # an image test_swebench_format builds too: once per machine
FORCE_PASS = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
              "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


@pytest.fixture(scope="module")
def published(docker_ready, tmp_path_factory):
    root = tmp_path_factory.mktemp("official")
    path = materialize_swebench_demo(root / "records", slugs=SLUGS, log_dir=root / "build-logs")
    records = {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    tasks = {t.instance_id: t for t in load_tasks(path).tasks}
    return records, tasks, root / "records" / "repos"


def _fuzzed(patch: str) -> str:
    """The first context line after the first hunk header changed, so only a fuzzy apply takes the patch."""
    lines = patch.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("@@")) + 1
    while not lines[at].startswith(" ") or not lines[at].strip():
        at += 1
    lines[at] = lines[at] + "  # moved"
    return "\n".join(lines)


def _miscounted(patch: str) -> str:
    """The first hunk header claiming one line more on each side than its body has: malformed for git and patch."""
    return re.sub(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@",
                  lambda m: f"@@ -{m[1]},{int(m[2]) + 1} +{m[3]},{int(m[4]) + 1} @@", patch, count=1, flags=re.M)


def _malformed(patch: str) -> str:
    """A line without a hunk marker inside the first hunk: corrupt for git apply, malformed for patch."""
    lines = patch.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("@@")) + 3
    return "\n".join([*lines[:at], "this line has no marker", *lines[at:]])


def predictions(records: dict, tasks: dict, repos: Path, tmp: Path) -> list[tuple[str, str, str, bool]]:
    """(instance_id, name, patch, legitimate) for every prediction graded both ways."""
    out = []
    for iid, task in tasks.items():
        pkg = task.repo.split("/")[1]
        repo = repos / task.repo.replace("/", "__")
        gold = task.patch
        imports = lambda line: (lambda text: text + line)  # noqa: E731
        out += [
            (iid, "gold", gold, True),
            (iid, "testing_folder_helper", variant(repo, task.base_commit, gold, {
                f"{pkg}/testing/__init__.py": "",
                f"{pkg}/testing/marks.py": "MARK = 'helper in a library folder named testing'\n",
                f"{pkg}/__init__.py": imports(f"from {pkg}.testing.marks import MARK as _MARK  # noqa: F401\n")}, tmp), True),
            (iid, "new_top_level_module", variant(repo, task.base_commit, gold, {
                f"{pkg}_compat.py": "COMPAT = True\n",
                f"{pkg}/__init__.py": imports(f"import {pkg}_compat  # noqa: F401\n")}, tmp), True),
        ]
        if pkg == "eventbus":  # the shapes of a patch, on one task
            out += [
                (iid, "empty", "", True),
                (iid, "pyproject_metadata", variant(repo, task.base_commit, gold, {
                    "pyproject.toml": lambda t: t.replace('version = "', 'keywords = ["demo"]\nversion = "9', 1)
                    + "\n[tool.black]\nline-length = 100\n"}, tmp), True),
                (iid, "no_final_newline", gold.rstrip("\n"), True),
                (iid, "planted_conftest", variant(repo, task.base_commit, "", {"conftest.py": FORCE_PASS}, tmp), False),
                (iid, "fuzzy_context", _fuzzed(gold), True),
                (iid, "crlf", gold.replace("\n", "\r\n"), True),
                (iid, "malformed", _malformed(gold), True),
                (iid, "partial", variant(repo, task.base_commit, "", {
                    "eventbus/bus.py": lambda t: t.replace("self._handlers = handlers", "self._handlers = dict(handlers)")},
                    tmp), True),
            ]
    return out


def test_swerl_agrees_with_swebench_s_harness_on_every_legitimate_patch_and_is_stricter_on_hacks(
        published, tmp_path, monkeypatch):
    records, tasks, repos = published
    preds = predictions(records, tasks, repos, tmp_path)
    monkeypatch.chdir(tmp_path)  # swebench writes logs/run_evaluation/<run id>/ under the working folder
    run_id = f"swerl-oracle-{uuid.uuid4().hex[:8]}"
    official = swebench_verdicts(records, preds, run_id)
    jobs = [(tasks[iid], patch, tasks[iid].image, name) for iid, name, patch, _ in preds]
    ours = grade_many(jobs, GradingConfig(grading_logs=tmp_path / "swerl"), concurrency=2)

    table = {(iid, name): (theirs, mine.resolved, mine.failure_class, mine.reason[:300])
             for (iid, name, _, _), theirs, mine in zip(preds, official, ours)}
    for (iid, name, _, legitimate), theirs, mine in zip(preds, official, ours):
        assert mine.failure_class is not FailureClass.INFRA_ERROR, (iid, name, mine.reason)
        if legitimate:
            assert mine.resolved is theirs, (iid, name, table[(iid, name)])
        else:
            assert mine.resolved is False, (iid, name, table[(iid, name)])
    # the comparison is not vacuous: what each harness resolves is known
    for iid in tasks:
        expected = {"gold": True, "testing_folder_helper": True, "new_top_level_module": True}
        if iid.startswith("swerl-demo__eventbus"):
            expected.update(empty=False, pyproject_metadata=True, no_final_newline=True, planted_conftest=True,
                            fuzzy_context=True, crlf=True, malformed=False, partial=False)
        assert {name: table[(i, name)][0] for i, name in table if i == iid} == expected, iid
    by_name = {name: mine for (iid, name, _, _), mine in zip(preds, ours) if iid.startswith("swerl-demo__eventbus")}
    # cut before its final newline, these patches defeat git apply; swebench's last command, GNU patch, takes them
    assert (by_name["no_final_newline"].applied_with, by_name["no_final_newline"].repairs) == (
        "patch --batch --forward --fuzz=5 -p1", [])
    assert by_name["malformed"].failure_class is FailureClass.APPLY_FAILED
    assert by_name["fuzzy_context"].applied_with == "patch --batch --forward --fuzz=5 -p1"
    assert by_name["gold"].applied_with == "git apply --verbose"
    assert by_name["planted_conftest"].dropped_files == {"conftest.py": "pytest loads this conftest.py for the task's tests"}
    # swebench's containers for this run are gone, as run_instance removes its own
    left = subprocess.run(["docker", "ps", "-a", "--filter", f"name=.{run_id}", "-q"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_a_repair_is_opt_in_and_recorded(published, tmp_path):
    _, tasks, _ = published
    task = tasks["swerl-demo__eventbus-1"]
    cut = _miscounted(task.patch).rstrip("\n")
    res = grade_many([(task, cut, task.image, "cut")], GradingConfig(repair_patches=True), concurrency=1)[0]
    assert (res.resolved, res.repairs, res.applied_with) == (True, ["final newline", "hunk counts"], "git apply --verbose")
