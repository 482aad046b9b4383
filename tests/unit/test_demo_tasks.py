"""The demo tasks shipped in swerl/demo: what they are, and that each one is a valid SWE task.

A valid task: at base_commit plus test.patch every FAIL_TO_PASS test fails and every
PASS_TO_PASS test passes; with gold.patch applied as well, all of them pass. This is
checked for real, by running pytest in a checkout of each materialised repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from swerl.demo import DEMO_OWNER, DemoSet, demo_slugs, materialize_demo
from swerl.demo.materialize import DEMO_TAG, TASKS_ROOT

SLUGS = demo_slugs()

EXPECTED_SLUGS = ["csvlite", "durations", "envcfg", "eventbus", "ledger", "memokit", "pagekit", "textkit", "vercmp"]

# Which files each gold patch changes: the bug is where the issue says it is, and
# several tasks need a fix spread over more than one file.
EXPECTED_GOLD_FILES = {
    "csvlite": ["csvlite/reader.py", "csvlite/writer.py"],
    "durations": ["README.md", "durations/formatting.py", "durations/units.py"],
    "envcfg": ["envcfg/__init__.py", "envcfg/errors.py", "envcfg/settings.py"],
    "eventbus": ["eventbus/bus.py"],
    "ledger": ["ledger/money.py"],
    "memokit": ["memokit/decorators.py", "memokit/keys.py"],
    "pagekit": ["pagekit/paginator.py"],
    "textkit": ["textkit/slug.py"],
    "vercmp": ["vercmp/version.py"],
}

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)(?: - .*)?$", re.MULTILINE)


# ---------------------------------------------------------------------------- helpers


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    env.update(GIT_AUTHOR_NAME="swerl test", GIT_AUTHOR_EMAIL="test@swerl.invalid")
    env.update(GIT_COMMITTER_NAME="swerl test", GIT_COMMITTER_EMAIL="test@swerl.invalid")
    result = subprocess.run(
        ["git", "-c", "advice.detachedHead=false", "-c", "core.autocrlf=false", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"git {' '.join(args)} failed in {cwd}: {result.stderr}"
    return result.stdout.strip()


def changed_files(patch: str) -> list[str]:
    return sorted({path for pair in _DIFF_HEADER.findall(patch) for path in pair})


def changed_lines(patch: str) -> int:
    return sum(
        1
        for line in patch.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++ ", "--- "))
    )


def run_pytest(checkout: Path) -> dict[str, str]:
    """Run the checkout's test suite on the host; return {test id: PASSED/FAILED/...}."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=short"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    statuses = {test_id: status for status, test_id in _SUMMARY_LINE.findall(result.stdout)}
    assert statuses, f"no test results in the pytest output:\n{result.stdout}\n{result.stderr}"
    return statuses


def load_records(demo: DemoSet) -> dict[str, dict]:
    lines = demo.tasks_file.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return {r["repo"].split("/", 1)[1]: r for r in records}


def mirror(demo: DemoSet, slug: str) -> Path:
    return demo.repos_dir / f"{DEMO_OWNER}__{slug}"


@pytest.fixture(scope="module")
def materialized(tmp_path_factory) -> DemoSet:
    return materialize_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def records(materialized) -> dict[str, dict]:
    return load_records(materialized)


# ---------------------------------------------------------------------------- the set


def test_the_demo_has_nine_tasks_with_unique_ids(materialized, records):
    assert SLUGS == EXPECTED_SLUGS
    assert materialized.instance_ids == [f"swerl-demo__{slug}-1" for slug in EXPECTED_SLUGS]
    assert len(set(materialized.instance_ids)) == len(materialized.instance_ids) >= 8
    assert materialized.tasks_file == materialized.repos_dir.parent / "tasks.jsonl"
    assert sorted(records) == EXPECTED_SLUGS
    assert sorted(p.name for p in materialized.repos_dir.iterdir()) == [f"swerl-demo__{s}" for s in EXPECTED_SLUGS]


def test_records_are_swe_bench_instances(records):
    from swerl.data.task import Task

    for slug, record in records.items():
        assert list(record)[:5] == ["instance_id", "repo", "base_commit", "patch", "test_patch"]
        assert record["repo"] == f"swerl-demo/{slug}"
        assert re.fullmatch(r"[0-9a-f]{40}", record["base_commit"])
        assert record["patch"] == (TASKS_ROOT / slug / "gold.patch").read_text(encoding="utf-8")
        assert record["test_patch"] == (TASKS_ROOT / slug / "test.patch").read_text(encoding="utf-8")
        assert record["install_config"]["test_cmd"] == "pytest --no-header -rA --tb=short -p no:cacheprovider"
        assert record["install_config"]["log_parser"] == "parse_log_pytest"
        assert record["hints_text"] == ""
        assert len(record["PASS_TO_PASS"]) >= 3
        assert not set(record["FAIL_TO_PASS"]) & set(record["PASS_TO_PASS"])
        task = Task.model_validate(record)
        assert task.instance_id == f"swerl-demo__{slug}-1"


def test_gold_patches_fix_source_and_test_patches_change_only_tests(records):
    for slug, record in records.items():
        gold_files = changed_files(record["patch"])
        assert gold_files == EXPECTED_GOLD_FILES[slug], slug
        assert not [f for f in gold_files if f.startswith("tests/") or "/tests/" in f], slug
        assert 1 <= len(gold_files) <= 7, slug
        assert changed_lines(record["patch"]) < 100, slug
        test_files = changed_files(record["test_patch"])
        assert test_files and all(f.startswith("tests/") for f in test_files), slug


def test_at_least_three_fixes_span_several_files(records):
    multi_file = sorted(slug for slug, r in records.items() if len(changed_files(r["patch"])) >= 2)
    assert multi_file == ["csvlite", "durations", "envcfg", "memokit"]


# ---------------------------------------------------------------------------- determinism


def test_materialising_is_deterministic_whatever_the_user_git_config(materialized, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    hostile = "[core]\n\tautocrlf = true\n[init]\n\tdefaultBranch = trunk\n[user]\n\tname = Someone Else\n"
    (home / ".gitconfig").write_text(hostile)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Intruder")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2031-05-05T05:05:05+00:00")

    again = materialize_demo(tmp_path / "again")

    assert again.instance_ids == materialized.instance_ids
    assert again.tasks_file.read_bytes() == materialized.tasks_file.read_bytes()
    for slug in SLUGS:
        assert git(mirror(again, slug), "rev-parse", "main") == git(mirror(materialized, slug), "rev-parse", "main")


def test_an_intact_repository_is_reused_and_a_changed_one_rebuilt(tmp_path):
    first = materialize_demo(tmp_path, slugs=["pagekit"])
    repo = mirror(first, "pagekit")
    marker = repo / ".git" / "swerl-test-marker"
    marker.write_text("kept\n")
    expected_head = git(repo, "rev-parse", "main")

    second = materialize_demo(tmp_path, slugs=["pagekit"])
    assert second == first
    assert marker.exists()  # reused, not rebuilt

    (repo / "README.md").write_text("local edit\n")
    git(repo, "commit", "-qam", "local change")
    third = materialize_demo(tmp_path, slugs=["pagekit"])
    assert third == first
    assert not marker.exists()  # rebuilt
    assert git(repo, "rev-parse", "main") == expected_head
    assert git(repo, "status", "--porcelain") == ""


def test_selecting_tasks(tmp_path):
    demo = materialize_demo(tmp_path, slugs=["vercmp", "ledger", "vercmp"])
    assert demo.instance_ids == ["swerl-demo__ledger-1", "swerl-demo__vercmp-1"]
    assert sorted(load_records(demo)) == ["ledger", "vercmp"]
    with pytest.raises(ValueError, match="unknown demo task"):
        materialize_demo(tmp_path, slugs=["no-such-task"])


# ---------------------------------------------------------------------------- each task


@pytest.mark.parametrize("slug", SLUGS)
def test_history_has_base_then_a_newer_tagged_fix(slug, materialized, records):
    repo = mirror(materialized, slug)
    base = records[slug]["base_commit"]
    head = git(repo, "rev-parse", "main")

    assert git(repo, "rev-parse", "--is-bare-repository") == "false"
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "rev-list", "--count", "main") == "2"
    assert git(repo, "rev-parse", "main~1") == base != head
    assert git(repo, "log", "-1", "--format=%s", base) == "Initial import"
    assert git(repo, "log", "-1", "--format=%s", head).startswith("Fix: ")
    assert git(repo, "log", "-1", "--format=%cI", base) < git(repo, "log", "-1", "--format=%cI", head)
    assert git(repo, "tag", "--list") == DEMO_TAG
    assert git(repo, "cat-file", "-t", DEMO_TAG) == "commit"  # lightweight
    assert git(repo, "rev-parse", DEMO_TAG) == head
    assert git(repo, "status", "--porcelain") == ""

    expected = sorted(changed_files(records[slug]["patch"]) + changed_files(records[slug]["test_patch"]))
    assert git(repo, "diff", "--name-only", base, head).split() == expected
    base_files = git(repo, "ls-tree", "-r", "--name-only", base).split()
    shipped = sorted(
        p.relative_to(TASKS_ROOT / slug / "repo").as_posix()
        for p in (TASKS_ROOT / slug / "repo").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    assert base_files == shipped
    modes = {line.split()[0] for line in git(repo, "ls-tree", "-r", "main").splitlines()}
    assert modes == {"100644"}


@pytest.mark.parametrize("slug", SLUGS)
def test_shipped_repository_follows_the_demo_conventions(slug):
    root = TASKS_ROOT / slug / "repo"
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    assert (root / "README.md").is_file()
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["name"] == slug
    assert pyproject["tool"]["pytest"]["ini_options"] == {"pythonpath": ["."], "testpaths": ["tests"]}
    package = root / slug
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 4 and (package / "__init__.py") in modules
    assert 80 <= sum(len(m.read_text(encoding="utf-8").splitlines()) for m in modules) <= 300
    test_files = sorted(p.name for p in (root / "tests").iterdir())
    assert len(test_files) >= 2 and all(re.fullmatch(r"test_\w+\.py", name) for name in test_files)
    assert not [p for p in files if p.name in {"conftest.py", ".git"} or ".git" in p.parts]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert text.endswith("\n") and "\r" not in text, path
        assert not path.stat().st_mode & 0o111, f"{path} is executable"
    for path in TASKS_ROOT.glob(f"{slug}/*.patch"):
        assert path.read_text(encoding="utf-8").endswith("\n")


@pytest.mark.parametrize("slug", SLUGS)
def test_fail_to_pass_fails_before_the_fix_and_everything_passes_after(slug, materialized, records, tmp_path):
    record = records[slug]
    checkout = tmp_path / slug
    git(tmp_path, "clone", "--quiet", "--no-checkout", str(mirror(materialized, slug)), str(checkout))
    git(checkout, "checkout", "--quiet", "--detach", record["base_commit"])
    f2p, p2p = record["FAIL_TO_PASS"], record["PASS_TO_PASS"]
    touched = set(changed_files(record["test_patch"]))

    git(checkout, "apply", "-", stdin=record["test_patch"])
    before = run_pytest(checkout)
    assert {t: before.get(t) for t in f2p} == {t: "FAILED" for t in f2p}
    assert {t: before.get(t) for t in p2p} == {t: "PASSED" for t in p2p}
    # PASS_TO_PASS lists every other test of the test files the test patch touches.
    assert sorted(t for t in before if t.split("::")[0] in touched) == sorted(f2p + p2p)

    git(checkout, "apply", "-", stdin=record["patch"])
    after = run_pytest(checkout)
    assert {t: after.get(t) for t in f2p + p2p} == {t: "PASSED" for t in f2p + p2p}
    assert set(after.values()) == {"PASSED"}
