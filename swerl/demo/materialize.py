"""Turn the demo tasks shipped with swerl into git repositories and a SWE-bench tasks file.

Each task lives in ``swerl/demo/tasks/<slug>/``:

``task.json``
    The SWE-bench fields of the instance, except ``base_commit``, ``patch`` and
    ``test_patch``, which :func:`materialize_demo` fills in.
``repo/``
    The repository tree at ``base_commit``: source and the existing tests.
``gold.patch``
    The reference fix (``git diff`` format); it never touches ``tests/``.
``test.patch``
    The tests that judge a fix: FAIL_TO_PASS fail without the gold patch, pass with it.

:func:`materialize_demo` builds, for every task, a local mirror
``<dest>/repos/swerl-demo__<slug>`` (the ``<owner>__<name>`` mirror convention) on
branch ``main`` with two commits:

1. ``Initial import``: the ``repo/`` tree. This is ``base_commit``.
2. ``Fix: <issue title>``: test.patch and gold.patch applied, tagged ``v0.1.1``.

The second commit and the tag are deliberately there: they stand for the future the
agent must not see, so the code that prepares a task's workspace can be checked to
strip them. Commits are deterministic: fixed author, committer and dates, file modes
forced to 0644, and neither the user's nor the system's git configuration is read,
so the hashes are the same on every machine and every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEMO_OWNER = "swerl-demo"
DEMO_BRANCH = "main"
DEMO_TAG = "v0.1.1"
TASKS_ROOT = Path(__file__).resolve().parent / "tasks"

_BASE_MESSAGE = "Initial import"
_BASE_DATE = "2026-01-01T00:00:00+00:00"
_FIX_DATE = "2026-01-02T00:00:00+00:00"
_AUTHOR_NAME = "swerl demo"
_AUTHOR_EMAIL = "demo@swerl.invalid"
_FILE_MODE = 0o644
_GIT_TIMEOUT_S = 120

# Settings that change object hashes or could make a commit fail, pinned on every call.
_GIT_OPTIONS = (
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.eol=lf",
    "-c", "core.fileMode=true",
    "-c", "core.symlinks=true",
    "-c", "core.safecrlf=false",
    "-c", f"init.defaultBranch={DEMO_BRANCH}",
    "-c", "i18n.commitEncoding=UTF-8",
    "-c", "commit.cleanup=strip",
)  # fmt: skip

# Build and editor leftovers that must never become part of a demo repository.
_JUNK_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"})
_JUNK_SUFFIXES = (".pyc", ".pyo", ".orig", ".rej", "~")
_JUNK_FILES = frozenset({".DS_Store", "Thumbs.db"})

# The SWE-bench field order of a tasks.jsonl record; task.json keys not listed follow.
RECORD_ORDER = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
    "hints_text", "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "install_config",
)  # fmt: skip
_REQUIRED_KEYS = ("instance_id", "repo", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS", "install_config")
_FILLED_KEYS = ("base_commit", "patch", "test_patch")


@dataclass(frozen=True)
class DemoSet:
    """What :func:`materialize_demo` produced."""

    tasks_file: Path  # <dest>/tasks.jsonl
    repos_dir: Path  # <dest>/repos, one mirror per task: <owner>__<name>
    instance_ids: list[str]  # in tasks-file order (sorted by slug)


@dataclass(frozen=True)
class _DemoTask:
    slug: str
    directory: Path
    fields: dict[str, Any]
    gold_patch: str
    test_patch: str

    @property
    def mirror_name(self) -> str:
        return f"{DEMO_OWNER}__{self.slug}"

    @property
    def title(self) -> str:
        """The issue title: the first non-empty line of the problem statement."""
        for line in self.fields["problem_statement"].splitlines():
            if line.strip():
                return line.strip().lstrip("#").strip()
        return self.slug


def demo_slugs() -> list[str]:
    """The slugs of every demo task shipped with swerl, sorted."""
    if not TASKS_ROOT.is_dir():
        return []
    return sorted(p.name for p in TASKS_ROOT.iterdir() if (p / "task.json").is_file())


def materialize_demo(dest: Path, slugs: list[str] | None = None) -> DemoSet:
    """Build the demo repositories and tasks file under ``dest``.

    ``slugs`` selects tasks (default: all of them). Repositories that already exist
    with exactly the expected history and a clean working tree are reused; any other
    repository at the same path is rebuilt. ``<dest>/tasks.jsonl`` is rewritten with
    the selected tasks, one JSON object per line, in sorted slug order.

    Raises ``ValueError`` for unknown slugs or a malformed task, and ``RuntimeError``
    naming the task, the git command and git's message when git fails.
    """
    available = demo_slugs()
    wanted = available if slugs is None else sorted(set(slugs))
    unknown = [s for s in wanted if s not in available]
    if unknown:
        raise ValueError(f"unknown demo task(s) {unknown}; available: {available}")

    dest = Path(dest).absolute()
    repos_dir = dest / "repos"
    repos_dir.mkdir(parents=True, exist_ok=True)

    records = []
    for slug in wanted:
        task = _load_task(slug)
        base_commit = ensure_repository(task, repos_dir)
        records.append(_record(task, base_commit))

    tasks_file = dest / "tasks.jsonl"
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    tmp = tasks_file.with_name(f".{tasks_file.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, tasks_file)
    return DemoSet(tasks_file=tasks_file, repos_dir=repos_dir, instance_ids=[r["instance_id"] for r in records])


# ---------------------------------------------------------------------------- loading


def _load_task(slug: str) -> _DemoTask:
    directory = TASKS_ROOT / slug
    try:
        fields = json.loads((directory / "task.json").read_text(encoding="utf-8"))
        gold_patch = (directory / "gold.patch").read_text(encoding="utf-8")
        test_patch = (directory / "test.patch").read_text(encoding="utf-8")
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"demo task {slug!r} in {directory} cannot be read: {e}") from e
    if not (directory / "repo").is_dir():
        raise ValueError(f"demo task {slug!r}: {directory / 'repo'} is missing")
    missing = [k for k in _REQUIRED_KEYS if k not in fields]
    if missing:
        raise ValueError(f"demo task {slug!r}: task.json lacks {missing}")
    filled = [k for k in _FILLED_KEYS if k in fields]
    if filled:
        raise ValueError(f"demo task {slug!r}: task.json must not set {filled}; they are computed")
    expected = {"instance_id": f"{DEMO_OWNER}__{slug}-1", "repo": f"{DEMO_OWNER}/{slug}"}
    for key, value in expected.items():
        if fields[key] != value:
            raise ValueError(f"demo task {slug!r}: task.json {key} is {fields[key]!r}, expected {value!r}")
    if not fields["FAIL_TO_PASS"]:
        raise ValueError(f"demo task {slug!r}: FAIL_TO_PASS is empty")
    for name, patch in (("gold.patch", gold_patch), ("test.patch", test_patch)):
        if not patch.startswith("diff --git "):
            raise ValueError(f"demo task {slug!r}: {name} is not a git diff")
    return _DemoTask(slug, directory, fields, gold_patch, test_patch)


def _record(task: _DemoTask, base_commit: str) -> dict[str, Any]:
    values = dict(task.fields, base_commit=base_commit, patch=task.gold_patch, test_patch=task.test_patch)
    record = {key: values.pop(key) for key in RECORD_ORDER if key in values}
    record.update(values)
    return record


# ---------------------------------------------------------------------------- git


def _git_env(date: str | None = None) -> dict[str, str]:
    """A minimal environment: no inherited GIT_* variables, no user or system config."""
    env = {key: os.environ[key] for key in ("PATH", "SYSTEMROOT", "TMPDIR", "TEMP", "TMP") if key in os.environ}
    env.update(
        LC_ALL="C",
        LANG="C",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=_AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=_AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=_AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=_AUTHOR_EMAIL,
    )
    if date is not None:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return env


def _git(slug: str, cwd: Path, *args: str, stdin: str | None = None, date: str | None = None) -> str:
    """Run one git command in ``cwd``; return its stdout, or raise RuntimeError."""
    command = ["git", *_GIT_OPTIONS, *args]
    shown = "git " + " ".join(args)
    try:
        result = subprocess.run(
            command,
            cwd=cwd,
            env=_git_env(date),
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=_GIT_TIMEOUT_S,
        )
    except FileNotFoundError as e:
        raise RuntimeError(f"demo task {slug!r}: `{shown}` could not start: git is not installed ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"demo task {slug!r}: `{shown}` in {cwd} did not finish in {_GIT_TIMEOUT_S}s") from e
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip() or "(no output)"
        raise RuntimeError(f"demo task {slug!r}: `{shown}` in {cwd} failed with exit code {result.returncode}: {message}")
    return result.stdout


# ---------------------------------------------------------------------------- building


def ensure_repository(task: _DemoTask, repos_dir: Path) -> str:
    """Make ``repos_dir/<mirror>`` hold the task's expected history; return base_commit."""
    target = repos_dir / task.mirror_name
    staging = Path(tempfile.mkdtemp(prefix=f".{task.mirror_name}.", suffix=".tmp", dir=repos_dir))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; the mirror must be readable like any clone
    try:
        expected = _build(task, staging)
        if _history(task, target) == expected:
            return expected[0]
        _remove(target)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process put a repository there meanwhile; accept it only if it is right.
            if _history(task, target) != expected:
                raise RuntimeError(f"demo task {task.slug!r}: cannot replace {target}") from None
        return expected[0]
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _build(task: _DemoTask, work: Path) -> tuple[str, str]:
    """Create the two-commit repository in the empty directory ``work``; return (base, fix)."""
    slug = task.slug
    _git(slug, work, "init", "--quiet", "--template=")
    _git(slug, work, "symbolic-ref", "HEAD", f"refs/heads/{DEMO_BRANCH}")
    _copy_tree(task.directory / "repo", work)
    _git(slug, work, "add", "--all")
    _git(slug, work, "commit", "--quiet", "--no-verify", "-m", _BASE_MESSAGE, date=_BASE_DATE)
    base = _git(slug, work, "rev-parse", "HEAD").strip()

    for patch in (task.test_patch, task.gold_patch):
        _git(slug, work, "apply", "--whitespace=nowarn", "-", stdin=patch)
    _normalise_modes(work)
    _git(slug, work, "add", "--all")
    _git(slug, work, "commit", "--quiet", "--no-verify", "-m", f"Fix: {task.title}", date=_FIX_DATE)
    fix = _git(slug, work, "rev-parse", "HEAD").strip()
    _git(slug, work, "tag", DEMO_TAG, fix)
    return base, fix


def _history(task: _DemoTask, path: Path) -> tuple[str, str] | None:
    """(base, fix) when ``path`` is a clean, non-bare repository on main with the demo layout."""
    if path.is_symlink() or not (path / ".git").is_dir():
        return None
    slug = task.slug
    try:
        if _git(slug, path, "rev-parse", "--is-bare-repository").strip() != "false":
            return None
        if _git(slug, path, "symbolic-ref", "HEAD").strip() != f"refs/heads/{DEMO_BRANCH}":
            return None
        commits = _git(slug, path, "rev-list", "--parents", f"refs/heads/{DEMO_BRANCH}").split("\n")
        tag = _git(slug, path, "rev-parse", "--verify", "--quiet", f"refs/tags/{DEMO_TAG}").strip()
        dirty = _git(slug, path, "status", "--porcelain", "--untracked-files=all", "--ignored").strip()
    except RuntimeError:
        return None
    rows = [line.split() for line in commits if line.strip()]
    if len(rows) != 2 or len(rows[0]) != 2 or len(rows[1]) != 1 or rows[0][1] != rows[1][0]:
        return None
    base, fix = rows[1][0], rows[0][0]
    if tag != fix or dirty:
        return None
    return base, fix


def _copy_tree(source: Path, target: Path) -> None:
    """Copy the files of ``source`` into ``target``, mode 0644, skipping junk.

    Line endings are normalised to LF, so that a swerl checkout with CRLF line endings
    (``core.autocrlf`` on Windows) still produces the same commits.
    """
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _JUNK_DIRS)
        rel = Path(root).relative_to(source)
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if name in _JUNK_FILES or name.endswith(_JUNK_SUFFIXES):
                continue
            src = Path(root) / name
            if src.is_symlink():
                raise ValueError(f"demo repository file {src} is a symlink; only plain files are supported")
            dst = target / rel / name
            dst.write_bytes(src.read_bytes().replace(b"\r\n", b"\n"))
            os.chmod(dst, _FILE_MODE)


def _normalise_modes(work: Path) -> None:
    """Force every working-tree file to 0644, whatever the patches or the umask did."""
    for root, dirs, files in os.walk(work):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, _FILE_MODE)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
