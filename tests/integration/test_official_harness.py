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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from swerl.data.loaders import load_tasks
from swerl.demo.swebench_format import materialize_swebench_demo
from swerl.grading.diffs import split_diff
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.results import FailureClass
from swerl.grading.validate import ValidationConfig, validate_tasks

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


def variant(repo: Path, commit: str, gold: str, edit: dict, tmp: Path) -> str:
    """The diff of ``commit`` after the gold patch and ``edit`` ({path: new text, or a function of the old})."""
    work = tmp / f"work-{uuid.uuid4().hex[:6]}"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=work, check=True)
    if gold:
        subprocess.run(["git", "apply", "-"], input=gold, text=True, cwd=work, check=True)
    for path, change in edit.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(change(target.read_text()) if callable(change) else change)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    return subprocess.run(["git", "diff", "--cached", commit], cwd=work, check=True, capture_output=True, text=True).stdout


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


def swebench_verdicts(records: dict, preds: list, run_id: str) -> list[bool]:
    import docker
    from swebench.harness.run_evaluation import run_instance
    from swebench.harness.utils import make_test_spec

    client = docker.from_env()

    def one(index_pred):
        index, (iid, name, patch, _) = index_pred
        pred = {"instance_id": iid, "model_name_or_path": f"{name}-{index}", "model_patch": patch}
        # one run id a prediction: swebench names its container by instance and run, one prediction per instance
        got = run_instance(make_test_spec(records[iid]), pred, client, f"{run_id}-{index}", timeout=600)
        return bool(got and got[1][iid]["resolved"])

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, enumerate(preds)))


def test_swerl_agrees_with_swebench_s_harness_on_every_legitimate_patch_and_is_stricter_on_hacks(
        published, tmp_path, monkeypatch):
    records, tasks, repos = published
    preds = predictions(records, tasks, repos, tmp_path)
    monkeypatch.chdir(tmp_path)  # swebench writes logs/run_evaluation/<run id>/ under the working folder
    run_id = f"swerl-oracle-{uuid.uuid4().hex[:8]}"
    official = swebench_verdicts(records, preds, run_id)
    jobs = [(tasks[iid], patch, tasks[iid].image, name) for iid, name, patch, _ in preds]
    ours = grade_many(jobs, GradingConfig(log_dir=tmp_path / "swerl"), concurrency=2)

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


@pytest.fixture(scope="module")
def pypi(docker_ready, tmp_path_factory):
    """The real-package tasks (tests/support/pypi_tasks.py) as SWE-bench 5 records of their own images: the
    publisher's eval script, without conda (their Python is on PATH), running the files their tests live in."""
    from swerl.demo.swebench_records import eval_script, swebench_record
    from tests.support.pypi_tasks import IDNA, SHAPE_SPECS, TASK_SPECS, TEST_CMD, publish

    # idna on 3.9 (pyproject only, unittest-style test classes) and pytest-mock on 3.11 (a pytest plugin whose
    # own suite runs pytest inside pytest, and needs itself loaded there by its entry point)
    specs = tuple(s for s in TASK_SPECS if (s.package, s.python) == (IDNA, "3.9")) + SHAPE_SPECS
    root = tmp_path_factory.mktemp("official-pypi")
    published = publish(root, specs)
    related = {s.instance_id: s.package.related_tests for s in specs}
    records = {}
    for task in load_tasks(published.tasks_file).tasks:
        record = swebench_record(task, published.images[task.instance_id])
        script = eval_script(task, test_cmd=f"{TEST_CMD} {' '.join(related[task.instance_id])}")
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
                f"{folder}/testing/__init__.py": "MARK = 'library code in a folder named testing'\n",
                f"{folder}/__init__.py": lambda t, pkg=pkg: t + f"\nfrom {pkg}.testing import MARK as _MARK  # noqa: F401\n"},
                tmp_path), True),
        ]
        if "dependencies = [" in (repo / "pyproject.toml").read_text():  # a dependency that names pytest
            preds.append((iid, "pyproject_dependencies", variant(repo, task.base_commit, task.patch, {
                "pyproject.toml": lambda t: t.replace("dependencies = [", 'dependencies = [\n    "pytest-timeout>=0; '
                                                      'python_version < \'3\'",', 1)}, tmp_path), True))
    monkeypatch.chdir(tmp_path)
    official = swebench_verdicts(records, preds, f"swerl-oracle-{uuid.uuid4().hex[:8]}")
    ours = grade_many([(tasks[iid], patch, tasks[iid].image, name) for iid, name, patch, _ in preds],
                      GradingConfig(log_dir=tmp_path / "swerl"), concurrency=2)
    table = {(iid, name): (theirs, mine.resolved, mine.failure_class, mine.reason[:300])
             for (iid, name, _, _), theirs, mine in zip(preds, official, ours)}
    assert {key: row[0] for key, row in table.items()} == {key: key[1] != "empty" for key in table}, table
    assert {key: row[1] for key, row in table.items()} == {key: row[0] for key, row in table.items()}, table
    assert any(name == "pyproject_dependencies" for _, name in table)
    # and validated as a publisher validates: gold resolves, the empty patch does not
    report = validate_tasks(list(tasks.values()), {iid: t.image for iid, t in tasks.items()}, ValidationConfig(runs=1))
    assert [(v.instance_id, v.valid) for v in report.tasks] == [(iid, True) for iid in tasks], report.tasks


def test_a_repair_is_opt_in_and_recorded(published, tmp_path):
    _, tasks, _ = published
    task = tasks["swerl-demo__eventbus-1"]
    cut = _miscounted(task.patch).rstrip("\n")
    res = grade_many([(task, cut, task.image, "cut")], GradingConfig(repair_patches=True), concurrency=1)[0]
    assert (res.resolved, res.repairs, res.applied_with) == (True, ["final newline", "hunk counts"], "git apply --verbose")
