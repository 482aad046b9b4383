"""Real-world fidelity: tasks over the real code and test suites of three PyPI packages validate
through swerl's own loaders, mirror folders and CLI.

The packages (more-itertools, toolz, idna) are fetched as pinned sdists at test time, a bug is
injected as SWE-smith does and its reverse is the gold patch (tests/support/pypi_tasks.py);
FAIL_TO_PASS / PASS_TO_PASS are measured outside swerl's grader and published in swebench's
``parse_log_pytest`` form, so parametrised ids with spaces are cut at their first space.
Python 3.9 and 3.11; idna is pyproject.toml-only (flit_core) and installed editable on 3.9.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.data.loaders import load_tasks
from tests.support.pypi_tasks import IDNA, MORE_ITERTOOLS, TASK_SPECS, TOOLZ, publish

pytestmark = pytest.mark.docker
# the installed `swerl` command, as a user runs it (the module when this interpreter has no entry point)
_ENTRY = Path(sys.executable).parent / "swerl"
SWERL = [str(_ENTRY)] if _ENTRY.exists() else [sys.executable, "-m", "swerl.cli"]


@pytest.fixture(scope="module")
def published(docker_ready, tmp_path_factory):
    return publish(tmp_path_factory.mktemp("pypi-tasks"))


@pytest.fixture(scope="module")
def by_id(published):
    return {t.instance_id: t for t in load_tasks(published.tasks_file).tasks}


def _id(pkg, python: str) -> str:
    return next(s.instance_id for s in TASK_SPECS if s.package is pkg and s.python == python)


def test_the_published_records_load_through_swerl_with_cut_ids_and_both_pythons(published, by_id):
    assert sorted(by_id) == sorted(s.instance_id for s in TASK_SPECS)
    assert {t.install_config.python for t in by_id.values()} == {"3.9", "3.11"}
    assert {t.repo for t in by_id.values()} == {p.repo for p in (IDNA, TOOLZ, MORE_ITERTOOLS)}

    mi = by_id[_id(MORE_ITERTOOLS, "3.11")]
    spaced = "tests/test_split_at_spaces.py::test_split_at_spaces"
    # the parser's cut form, as publishers ship it; the full pytest ids are in the log
    whole = "tests/test_split_at_spaces.py::test_split_at_maxsplit_keeps_the_rest_whole"
    assert {f"{spaced}[a", f"{spaced}[one", whole} <= set(mi.FAIL_TO_PASS)
    assert {f"{spaced}[x", f"{spaced}[solo-1-expected3]"} <= set(mi.PASS_TO_PASS)
    assert f"PASSED {spaced}[a b c-1-expected0]" in published.logs[mi.instance_id]["after"]
    assert f"FAILED {spaced}[a b c-1-expected0]" in published.logs[mi.instance_id]["before"]
    assert any(t.startswith("tests/test_more.py::") for t in mi.PASS_TO_PASS)

    idna = by_id[_id(IDNA, "3.9")]
    assert "tests/test_label_length.py::test_valid_label_length[63" in idna.FAIL_TO_PASS
    assert "tests/test_label_length.py::test_valid_label_length[64" in idna.PASS_TO_PASS
    for python in ("3.9", "3.11"):
        assert "toolz/tests/test_partition_all_tail.py::test_partition_all_tail[five" in by_id[_id(TOOLZ, python)].FAIL_TO_PASS
    for task in by_id.values():
        assert 0 < len(task.PASS_TO_PASS) <= 30 and not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)


def test_mirrors_hide_the_original_code_and_the_pyproject_only_package_installs_editable_on_39(published, by_id):
    idna = by_id[_id(IDNA, "3.9")]
    mirror = published.repos_dir / "kjd__idna"
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", idna.base_commit], cwd=mirror,
                           capture_output=True, text=True, check=True).stdout.split()
    assert "pyproject.toml" in files and "setup.py" not in files and "setup.cfg" not in files
    # the base commit is a root commit: the released (fixed) code is not in its history
    parents = subprocess.run(["git", "rev-list", "--parents", "-n1", idna.base_commit], cwd=mirror,
                             capture_output=True, text=True, check=True).stdout.split()
    assert parents == [idna.base_commit]

    probe = ("import sys, idna, importlib.metadata as md; "
             "print(sys.version_info[:2], idna.__file__, md.distribution('idna').read_text('direct_url.json'))")
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", published.images[idna.instance_id],
                          "python", "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("(3, 9) /testbed/idna/__init__.py")
    assert json.loads(out.stdout.split(" ", 3)[3])["dir_info"] == {"editable": True}


def test_swerl_tasks_validate_resolves_gold_twice_and_never_the_empty_patch(published, by_id, tmp_path):
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [*SWERL, "tasks", "validate", "--tasks", str(published.tasks_file), "--repos", str(published.repos_dir),
         "--runs", "2", "--no-cache", "--out", str(report_path), "--log-dir", str(tmp_path / "logs"), "-j", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1500,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    assert report is not None, proc.stderr[-3000:]
    verdicts = {v["instance_id"]: v for v in report["tasks"]}
    bad = {i: v["reason"] for i, v in verdicts.items() if not v["valid"]}
    assert not bad, json.dumps(bad, indent=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (report["total"], report["valid"], report["runs"], report["cached"]) == (len(by_id), len(by_id), 2, 0)
    for iid, v in verdicts.items():
        assert (v["gold_resolved"], v["empty_resolved"], v["flaky_tests"]) == ([True, True], False, []), iid
        assert set(v["fail_to_pass_failing_without_fix"]) == set(by_id[iid].FAIL_TO_PASS), iid
    spaced = "tests/test_split_at_spaces.py::test_split_at_spaces"
    assert {f"{spaced}[a", f"{spaced}[one"} <= set(verdicts[_id(MORE_ITERTOOLS, "3.11")]["fail_to_pass_failing_without_fix"])
