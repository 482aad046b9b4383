"""The generated curriculum: small one-bug SWE tasks a tiny policy can learn to fix.

Checked without Docker: the files and counts, variety (disjoint repositories per split,
no (bug kind, template, function) combination shared by held-out and training tasks),
byte-identical output for a seed, patches that apply at base_commit, issue texts that
never quote the fix, real pytest runs in checkouts (FAIL_TO_PASS fails before the gold
patch, everything passes after), and the scripted policy's replies replayed through the
agent's own tool script on the host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path
from random import Random

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from swerl.agent.actions import parse_action
from swerl.agent.tools import FILE_TOOLS
from swerl.curriculum import BUG_KINDS, SPLITS, CurriculumConfig, CurriculumSet, generate_curriculum
from swerl.curriculum import bugs
from swerl.curriculum.execute import run_calls
from swerl.curriculum.patches import blob_id, file_diff
from swerl.curriculum.statement import problem_statement
from swerl.curriculum.templates import TEMPLATES, templates_for
from swerl.data.loaders import load_tasks
from swerl.demo.materialize import DEMO_TAG
from swerl.inference.scripted import script_from_patch

TOOLS_SCRIPT = Path(__file__).resolve().parents[2] / "swerl" / "agent" / "resources" / "swerl_tools.py"
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)", re.MULTILINE)


# ---------------------------------------------------------------------------- helpers


def git(cwd: Path, *args: str, stdin: str | None = None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", **(env or {}))
    proc = subprocess.run(["git", *args], cwd=cwd, env=base, input=stdin, capture_output=True, text=True)
    assert not check or proc.returncode == 0, f"git {' '.join(args)} failed in {cwd}: {proc.stderr}"
    return proc


def mirror(curriculum: CurriculumSet, record: dict) -> Path:
    return curriculum.repos_dir / record["repo"].replace("/", "__")


def checkout(curriculum: CurriculumSet, record: dict, dest: Path, commit: str | None = None) -> Path:
    """The tree at ``commit`` (default base_commit) as plain files, the way /testbed holds them."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit or record["base_commit"]],
                             cwd=mirror(curriculum, record), capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def apply(checkout_dir: Path, patch: str) -> None:
    proc = subprocess.run(["git", "apply", "-"], cwd=checkout_dir, input=patch, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def run_pytest(checkout_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rA", "--tb=no", "-p", "no:cacheprovider", "-q"],
                          cwd=checkout_dir, env=env, capture_output=True, text=True, timeout=120)
    return {test: outcome for outcome, test in _SUMMARY.findall(proc.stdout)}


def modified_lines(patch: str) -> tuple[list[str], list[str]]:
    body = [line for line in patch.splitlines() if not line.startswith(("+++ ", "--- "))]
    return [line[1:] for line in body if line.startswith("-")], [line[1:] for line in body if line.startswith("+")]


def module_path(record: dict) -> str:
    return record["patch"].split("\n", 1)[0].split(" b/", 1)[1]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def curriculum(tmp_path_factory) -> CurriculumSet:
    """The default curriculum (seed 0, 60/60/40), generated once."""
    return generate_curriculum(tmp_path_factory.mktemp("curriculum"), CurriculumConfig())


@pytest.fixture(scope="module")
def records(curriculum) -> dict[str, list[dict]]:
    return {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in curriculum.tasks_files.items()}


@pytest.fixture(scope="module")
def manifest(curriculum) -> dict:
    return json.loads(curriculum.manifest.read_text())


# ---------------------------------------------------------------------------- config


def test_the_default_config_is_60_warmup_60_train_40_heldout_of_every_bug_kind():
    config = CurriculumConfig()
    assert (config.seed, config.warmup, config.train, config.heldout, config.owner, config.bug_kinds) == (
        0, 60, 60, 40, "swerl-curriculum", None)
    assert config.kinds == BUG_KINDS == (
        "arithmetic_operator", "comparison_boundary", "wrong_constant", "wrong_variable",
        "inverted_condition", "string_method", "default_argument", "wrong_index",
    )


@pytest.mark.parametrize(("fields", "message"), [
    ({"train": -1}, "greater than or equal to 0"),
    ({"heldout": 501}, "less than or equal to 500"),
    ({"warmup": 0, "train": 0, "heldout": 0}, "warmup + train + heldout = 0; it must be between 1 and 500"),
    ({"warmup": 200, "train": 200, "heldout": 200}, "warmup + train + heldout = 600; it must be between 1 and 500"),
    ({"bug_kinds": ["wrong_index", "wrong_index"]}, "bug_kinds lists a kind twice"),
    ({"bug_kinds": ["typo"]}, "Input should be 'arithmetic_operator'"),
    ({"bug_kinds": []}, "at least 1 item"),
    ({"owner": "Has Space"}, "should match pattern"),
    ({"seed": -1}, "greater than or equal to 0"),
    ({"shuffle": True}, "Extra inputs are not permitted"),
])
def test_out_of_bounds_options_are_rejected_with_the_reason(fields, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        CurriculumConfig(**fields)


def test_every_config_field_is_documented():
    assert all(field.description for field in CurriculumConfig.model_fields.values())


# ---------------------------------------------------------------------------- bug kinds


@pytest.mark.parametrize(("kind", "line", "buggy"), [
    ("arithmetic_operator", "    return total * rate", "    return total // rate"),
    ("arithmetic_operator", "    net = acc - fee", "    net = acc + fee"),
    ("arithmetic_operator", "    return xs[-1] + 1", "    return xs[-1] - 1"),
    ("comparison_boundary", "    return low <= v <= high", "    return low < v <= high"),
    ("comparison_boundary", "        if x > limit:", "        if x >= limit:"),
    ("wrong_constant", "    return round(amount * 100)", "    return round(amount * 10)"),
    ("wrong_constant", "    return hours * 60 + minutes", "    return hours * 6 + minutes"),
    ("wrong_variable", "    return net", "    return acc"),
    ("inverted_condition", "    if not xs:", "    if xs:"),
    ("inverted_condition", "    kept = [x for x in xs if x < cap]", "    kept = [x for x in xs if not x < cap]"),
    ("string_method", "    return s.strip().upper()", "    return s.rstrip().upper()"),
    ("string_method", "    return s[0].upper()", "    return s[0].lower()"),
    ("default_argument", "def f(v, digits=2):", "def f(v, digits=3):"),
    ("default_argument", 'def f(words, sep=", "):', 'def f(words, sep=","):'),
    ("wrong_index", "    return ranked[-1]", "    return ranked[0]"),
])
def test_each_bug_kind_turns_a_correct_line_into_its_one_line_bug(kind, line, buggy):
    assert bugs.mutate(kind, line, spare="acc") == buggy


@pytest.mark.parametrize(("kind", "line"), [
    ("arithmetic_operator", "    return xs[-1]"),
    ("wrong_constant", "    return x * 5"),
    ("wrong_variable", "    return acc"),
    ("inverted_condition", "    return x"),
    ("default_argument", "    return sep.join(words)"),
    ("wrong_index", "    return xs[2]"),
])
def test_a_kind_that_cannot_break_a_line_says_so(kind, line):
    with pytest.raises(ValueError, match=f"bug kind '{kind}' does not apply to the line"):
        bugs.mutate(kind, line, spare="acc")


def test_an_unknown_bug_kind_is_named_with_the_choices():
    with pytest.raises(ValueError, match=r"unknown bug kind 'typo'; choose from \['arithmetic_operator'"):
        bugs.mutate("typo", "    return x")


def test_every_kind_has_at_least_three_templates_and_every_site_is_breakable():
    assert {kind: len(templates_for(kind)) >= 3 for kind in BUG_KINDS} == dict.fromkeys(BUG_KINDS, True)
    for template in TEMPLATES:
        # rendered with each placeholder as its own name: `{xs}` becomes `xs`
        lines = [line.format(fn="f", **{p: p for p in template.roles}) for line in template.lines]
        for kind, site in template.sites.items():
            assert bugs.mutate(kind, lines[site], template.spare or "") != lines[site]


# ---------------------------------------------------------------------------- building blocks


def test_file_diff_is_what_git_diff_prints(tmp_path):
    old = "".join(f"line {i}\n" for i in range(1, 12))
    new = old.replace("line 6\n", "line six\n")
    git(tmp_path, "init", "-q")
    (tmp_path / "m.py").write_text(old)
    git(tmp_path, "add", "m.py")
    (tmp_path / "m.py").write_text(new)
    # git appends the nearest "function" line to a hunk header; git apply ignores it
    real = re.sub(r"^(@@ .*? @@).*$", r"\1", git(tmp_path, "diff", "m.py").stdout, flags=re.MULTILINE)
    ours = file_diff("m.py", old, new)
    assert ours == real
    assert ours.splitlines()[1] == f"index {blob_id(old)[:7]}..{blob_id(new)[:7]} 100644"
    assert blob_id(old) == git(tmp_path, "hash-object", "--stdin", stdin=old).stdout.strip()


def test_file_diff_refuses_equal_texts_and_missing_final_newlines():
    with pytest.raises(ValueError, match="no change to diff in a.py"):
        file_diff("a.py", "x\n", "x\n")
    with pytest.raises(ValueError, match="a.py: the new text must end with a newline"):
        file_diff("a.py", "x\n", "y")


def test_generated_code_runs_with_a_short_list_of_builtins_only():
    source = "def f(xs):\n    return sum(xs) * 2\n\n\ndef g(path):\n    return open(path).read()\n"
    ok, refused = run_calls(source, ["f([1, 2])", "g('/etc/passwd')"])
    assert (ok.value, ok.error) == ("6", None)
    assert (refused.value, refused.error) == (None, "NameError: name 'open' is not defined")
    with pytest.raises(ValueError, match="generated module does not run"):
        run_calls("import os\n", [])


def test_an_issue_text_names_the_function_and_shows_actual_and_expected():
    text = problem_statement(Random(0), "cedarkit", "invoice", "total_due", "total_due([1, 2], 3)", "1", "9")
    assert text.splitlines()[0] in {"`total_due` returns the wrong result", "Wrong value from invoice.total_due",
                                    "Unexpected result from total_due", "total_due gives a wrong answer"}
    assert "```python\n>>> from cedarkit.invoice import total_due\n>>> total_due([1, 2], 3)\n1\n```" in text
    assert "`9`" in text


# ---------------------------------------------------------------------------- the generated set


def test_the_files_hold_60_60_and_40_tasks_and_the_manifest_says_so(curriculum, records, manifest):
    assert {split: len(records[split]) for split in SPLITS} == {"warmup": 60, "train": 60, "heldout": 40}
    assert sorted(p.name for p in curriculum.out.iterdir()) == [
        "curriculum.json", "heldout.jsonl", "repos", "train.jsonl", "warmup.jsonl"]
    assert manifest["counts"] == {"warmup": 60, "train": 60, "heldout": 40}
    assert manifest["config"] == CurriculumConfig().model_dump(mode="json")
    for split in SPLITS:
        assert [t["instance_id"] for t in manifest["splits"][split]] == [r["instance_id"] for r in records[split]]
        assert curriculum.instance_ids[split] == [r["instance_id"] for r in records[split]]
    assert len(list(curriculum.repos_dir.iterdir())) == 160


def test_bug_kinds_are_dealt_evenly_within_every_split(manifest):
    assert manifest["bug_kinds"]["heldout"] == dict.fromkeys(sorted(BUG_KINDS), 5)
    for split in ("warmup", "train"):
        counts = manifest["bug_kinds"][split]
        assert sorted(counts) == sorted(BUG_KINDS)
        assert sorted(counts.values()) == [7, 7, 7, 7, 8, 8, 8, 8]
    for split in SPLITS:
        assert dict(Counter(t["bug_kind"] for t in manifest["splits"][split])) == manifest["bug_kinds"][split]


def test_every_record_loads_as_a_swe_bench_task(curriculum, records):
    for split in SPLITS:
        tasks = load_tasks(curriculum.tasks_files[split]).tasks
        assert [t.instance_id for t in tasks] == [r["instance_id"] for r in records[split]]
        for task, record in zip(tasks, records[split]):
            owner, name = task.owner_name
            assert owner == "swerl-curriculum" and task.instance_id == f"swerl-curriculum__{name}-1"
            assert list(record) == ["instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
                                    "hints_text", "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "install_config"]
            assert (task.hints_text, task.version, len(task.base_commit)) == ("", "0.1", 40)
            assert task.install_config.python == "3.11"
            assert task.install_config.log_parser == "parse_log_pytest"
            assert task.install_config.test_cmd.startswith("pytest ")
            assert 1 <= len(task.FAIL_TO_PASS) <= 2 and 1 <= len(task.PASS_TO_PASS) <= 3
    created = [r["created_at"] for split in SPLITS for r in records[split]]
    assert len(set(created)) == len(created) and created[0] == "2026-02-01T00:00:00Z"


def test_splits_use_disjoint_repositories(records):
    repos = {split: {r["repo"] for r in records[split]} for split in SPLITS}
    assert [len(repos[split]) for split in SPLITS] == [60, 60, 40]
    assert not repos["warmup"] & repos["train"] and not repos["warmup"] & repos["heldout"] and not repos["train"] & repos["heldout"]


def test_heldout_shares_bug_kinds_with_training_but_no_kind_template_function_combination(manifest):
    def combos(split):
        return {(t["bug_kind"], t["template"], t["function"]) for t in manifest["splits"][split]}

    seen_in_training = combos("warmup") | combos("train")
    assert not combos("heldout") & seen_in_training
    assert {k for k, _, _ in combos("heldout")} == {k for k, _, _ in combos("train")} == set(BUG_KINDS)
    # variety inside a split too: many templates, functions and modules, not one memorisable instance
    train = manifest["splits"]["train"]
    assert len({t["template"] for t in train}) >= 20
    assert len({t["function"] for t in train}) >= 55
    assert len({t["file"].split("/")[1] for t in train}) >= 15


def test_the_same_seed_writes_byte_identical_files_and_another_seed_does_not(tmp_path):
    config = CurriculumConfig(seed=7, warmup=6, train=6, heldout=4)
    first, second = generate_curriculum(tmp_path / "a", config), generate_curriculum(tmp_path / "b", config)
    names = ["warmup.jsonl", "train.jsonl", "heldout.jsonl", "curriculum.json"]
    assert [(first.out / n).read_bytes() for n in names] == [(second.out / n).read_bytes() for n in names]
    other = generate_curriculum(tmp_path / "c", config.model_copy(update={"seed": 8}))
    assert (other.out / "train.jsonl").read_bytes() != (first.out / "train.jsonl").read_bytes()
    # regenerating in place reuses the repositories and rewrites the same bytes
    again = generate_curriculum(tmp_path / "a", config)
    assert [(again.out / n).read_bytes() for n in names] == [(second.out / n).read_bytes() for n in names]


def test_fewer_heldout_tasks_are_the_first_of_the_larger_heldout_split_and_leave_the_others_alone(tmp_path):
    """The main job evaluates on fewer held-out tasks than the shipped policy's recipe drew: still ones it never saw."""
    config = CurriculumConfig(seed=7, warmup=6, train=6, heldout=6)
    full, fewer = generate_curriculum(tmp_path / "a", config), generate_curriculum(tmp_path / "b", config.model_copy(update={"heldout": 4}))
    for split in ("warmup", "train"):
        assert (fewer.out / f"{split}.jsonl").read_bytes() == (full.out / f"{split}.jsonl").read_bytes()
    assert (fewer.out / "heldout.jsonl").read_text().splitlines() == (full.out / "heldout.jsonl").read_text().splitlines()[:4]


def test_regenerating_with_another_config_removes_the_mirrors_it_no_longer_needs(tmp_path):
    generate_curriculum(tmp_path, CurriculumConfig(warmup=3, train=0, heldout=0))
    small = generate_curriculum(tmp_path, CurriculumConfig(seed=1, warmup=1, train=1, heldout=0))
    assert sorted(p.name for p in small.repos_dir.iterdir()) == sorted(
        i.removesuffix("-1") for ids in small.instance_ids.values() for i in ids)


def test_a_restricted_set_of_bug_kinds_is_all_that_is_drawn(tmp_path):
    result = generate_curriculum(tmp_path, CurriculumConfig(warmup=0, train=5, heldout=2, bug_kinds=["wrong_index", "string_method"]))
    assert result.bug_kinds == {"warmup": {}, "train": {"string_method": 2, "wrong_index": 3}, "heldout": {"string_method": 1, "wrong_index": 1}}


def test_each_repository_has_the_demo_layout_base_commit_then_a_tagged_fix(curriculum, records):
    record = records["heldout"][0]
    repo = mirror(curriculum, record)
    log = git(repo, "log", "--format=%H %an %ad %s", "--date=iso-strict", "main").stdout.splitlines()
    assert len(log) == 2
    fix, base = log[0].split(" ", 1), log[1].split(" ", 1)
    assert base == [record["base_commit"], "swerl demo 2026-01-01T00:00:00+00:00 Initial import"]
    assert fix[1] == f"swerl demo 2026-01-02T00:00:00+00:00 Fix: {record['problem_statement'].splitlines()[0]}"
    assert git(repo, "rev-parse", DEMO_TAG).stdout.strip() == fix[0]
    assert git(repo, "status", "--porcelain", "--ignored").stdout == ""
    files = git(repo, "ls-tree", "-r", "--name-only", record["base_commit"]).stdout.split()
    package, module = module_path(record).split("/")
    assert sorted(files) == sorted([f"{package}/__init__.py", f"{package}/{module}", "pyproject.toml", f"tests/test_{module}"])


def test_gold_and_test_patches_apply_to_every_repository_at_base_commit(curriculum, records, tmp_path):
    for split in SPLITS:
        for record in records[split]:
            repo, index = mirror(curriculum, record), tmp_path / f"{record['instance_id']}.index"
            env = {"GIT_INDEX_FILE": str(index)}
            git(repo, "read-tree", record["base_commit"], env=env)
            for patch in (record["patch"], record["test_patch"]):
                git(repo, "apply", "--check", "--cached", "-", stdin=patch, env=env)


def test_each_bug_is_one_line_in_a_short_module_and_the_tests_are_only_added(records):
    for record in (r for split in SPLITS for r in records[split]):
        removed, added = modified_lines(record["patch"])
        assert len(removed) == len(added) == 1 and removed != added
        assert record["patch"].count("diff --git") == record["test_patch"].count("diff --git") == 1
        test_removed, test_added = modified_lines(record["test_patch"])
        assert test_removed == [] and sum(line.startswith("def test_") for line in test_added) == len(record["FAIL_TO_PASS"])
        assert all(t.startswith("tests/test_") for t in record["FAIL_TO_PASS"] + record["PASS_TO_PASS"])


def test_issue_texts_name_the_function_and_never_quote_the_fixed_line(records):
    for record in (r for split in SPLITS for r in records[split]):
        (buggy,), (fixed,) = modified_lines(record["patch"])
        statement = record["problem_statement"]
        function = record["FAIL_TO_PASS"][0].split("::test_", 1)[1].rsplit("_", 2)[0]
        assert f">>> from {module_path(record)[:-3].replace('/', '.')} import {function}\n>>> {function}(" in statement
        assert fixed.strip() not in statement and buggy.strip() not in statement
        assert len(statement) < 400


def test_module_and_test_files_stay_short(curriculum, records, tmp_path):
    for record in records["train"]:
        tree = checkout(curriculum, record, tmp_path / record["instance_id"])
        source = (tree / module_path(record)).read_text()
        assert 8 <= len(source.splitlines()) <= 20
        assert 2 <= source.count("\ndef ") <= 4
        assert len((tree / record["FAIL_TO_PASS"][0].split("::")[0]).read_text().splitlines()) <= 20


def one_task_per_bug_kind(records, manifest) -> list[dict]:
    kinds = {t["instance_id"]: t["bug_kind"] for t in manifest["splits"]["train"]}
    chosen: dict[str, dict] = {}
    for record in records["train"]:
        chosen.setdefault(kinds[record["instance_id"]], record)
    assert sorted(chosen) == sorted(BUG_KINDS)
    return list(chosen.values())


def test_fail_to_pass_fails_before_the_gold_patch_and_everything_passes_after_it(curriculum, records, manifest, tmp_path):

    def check(record: dict) -> None:
        tree = checkout(curriculum, record, tmp_path / record["instance_id"])
        apply(tree, record["test_patch"])
        before = run_pytest(tree)
        assert before == {**dict.fromkeys(record["FAIL_TO_PASS"], "FAILED"), **dict.fromkeys(record["PASS_TO_PASS"], "PASSED")}
        apply(tree, record["patch"])
        assert run_pytest(tree) == dict.fromkeys(record["FAIL_TO_PASS"] + record["PASS_TO_PASS"], "PASSED")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(check, one_task_per_bug_kind(records, manifest)))


def test_the_issue_shows_what_the_buggy_code_really_prints(curriculum, records, manifest, tmp_path):
    for record in one_task_per_bug_kind(records, manifest):
        tree = checkout(curriculum, record, tmp_path / record["instance_id"])
        lines = record["problem_statement"].split("```python\n", 1)[1].split("\n```", 1)[0].splitlines()
        imports, call, shown = lines[0].removeprefix(">>> "), lines[1].removeprefix(">>> "), lines[2]
        script = f"{imports}\nprint(repr({call}))"
        out = subprocess.run([sys.executable, "-c", script], cwd=tree, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}).stdout
        assert out.strip() == shown


def replay(script: list[str], tree: Path, bin_dir: Path, state: Path) -> list[str]:
    """Run each reply's command with the agent's tool script on the host; return the commands."""
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SWERL_TOOLS_STATE": str(state), "LC_ALL": "C"}
    commands = []
    for reply in script:
        command = parse_action(reply).command
        commands.append(command)
        if command == "submit":
            break
        proc = subprocess.run(["bash", "-c", command], cwd=tree, env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and not proc.stdout.startswith("Error"), (command, proc.stdout, proc.stderr)
    return commands


def test_the_scripted_policy_fixes_every_task_with_open_edit_submit(curriculum, records, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in FILE_TOOLS:
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{TOOLS_SCRIPT}" {name} "$@"\n')
        (bin_dir / name).chmod(0o755)

    def solve(record: dict) -> None:
        tree = checkout(curriculum, record, tmp_path / record["instance_id"])
        script = script_from_patch(record["patch"])
        commands = replay(script, tree, bin_dir, tmp_path / f"{record['instance_id']}.state")
        path = module_path(record)
        assert [c.split(None, 1)[0] for c in commands] == ["ls", "open", "edit", "submit"]
        assert commands[1] == f"open {path}"
        fixed = git(mirror(curriculum, record), "show", f"{DEMO_TAG}:{path}").stdout
        assert (tree / path).read_text() == fixed, record["instance_id"]

    with ThreadPoolExecutor(4) as pool:  # subprocess-bound: threads overlap the waits
        list(pool.map(solve, [r for split in SPLITS for r in records[split]]))


# ---------------------------------------------------------------------------- CLI


def test_cli_generate_prints_counts_per_split_and_bug_kind_and_the_paths(tmp_path):
    from swerl.cli import app

    out = tmp_path / "cur"
    result = CliRunner().invoke(app, ["curriculum", "generate", "--out", str(out), "--seed", "3",
                                      "--warmup", "2", "--train", "3", "--heldout", "1"])
    assert result.exit_code == 0, result.output
    assert re.search(r"total\s*[│|]\s*2\s*[│|]\s*3\s*[│|]\s*1", result.output)
    for split in SPLITS:
        assert f"{split}: --tasks {out / (split + '.jsonl')}" in result.output
    assert f"repositories: --repos {out / 'repos'}; manifest: {out / 'curriculum.json'}" in result.output
    assert json.loads((out / "curriculum.json").read_text())["counts"] == {"warmup": 2, "train": 3, "heldout": 1}


def test_cli_generate_names_a_bad_option_and_exits_2(tmp_path):
    from swerl.cli import app

    result = CliRunner().invoke(app, ["curriculum", "generate", "--out", str(tmp_path), "--heldout", "501"])
    assert result.exit_code == 2
    assert "bad curriculum options: heldout: Input should be less than or equal to 500" in result.output


def test_name_file_adds_the_defining_file_to_each_issue_and_changes_nothing_else(tmp_path):
    config = CurriculumConfig(seed=3, warmup=4, train=4, heldout=4)
    plain = generate_curriculum(tmp_path / "plain", config)
    named = generate_curriculum(tmp_path / "named", config.model_copy(update={"name_file": True}))
    for split in SPLITS:
        before, after = load_tasks(plain.tasks_files[split]).tasks, load_tasks(named.tasks_files[split]).tasks
        for a, b in zip(before, after, strict=True):
            path = b.patch.split("\n", 1)[0].split(" b/", 1)[1]
            function = re.search(r">>> from \S+ import (\w+)", b.problem_statement).group(1)
            assert b.problem_statement == a.problem_statement + f"\n`{function}` is defined in {path}.\n"
            assert (b.patch, b.test_patch, b.base_commit, b.FAIL_TO_PASS) == (a.patch, a.test_patch, a.base_commit, a.FAIL_TO_PASS)
            assert "is defined in" not in a.problem_statement
