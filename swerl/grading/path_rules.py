"""Which repository paths a prediction may not change, and the in-container guard that enforces it.

Standard library only, on purpose: the host applies these rules to the diff's sections, and
the same file is copied into every grading sandbox, where the set-up (``sandbox_setup.py``, run
with ``python3 -I -S``) snapshots the repository before the patch and calls ``guard`` after it,
to judge what actually changed in the container (whatever the diff parser believed: mixed
headers, timestamps after names, context diffs, fuzzy hunks).

Protected, by what a path is rather than by one spelling:
* tests: the test patch's files, anything in a test folder, test modules, ``conftest.py``;
* test-runner configuration of every pytest version (``pytest.ini``, ``.pytest.ini``,
  ``pytest.toml``, ``.pytest.toml``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``) and
  modules that shadow the runner (``pytest``, ``_pytest``, ``pluggy``, ``py``);
* packaging metadata, which registers plugins through entry points (``*.egg-info``,
  ``*.dist-info``, ``*.egg-link``, ``entry_points.txt``);
* interpreter start-up hooks: ``*.pth``, ``sitecustomize`` / ``usercustomize`` as modules,
  packages or extensions, bytecode;
* in the container only: a NEW top-level module or package at an import root (the
  repository root or ``src/``), which can shadow a module the interpreter or pytest imports
  at start-up under an innocent name;
* ``.git``, paths outside the repository, and symbolic links.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import subprocess

TEST_DIRS = ("tests", "test", "testing")
TEST_FILE_GLOBS = ("test_*.py", "*_test.py", "tests.py", "conftest.py")
INFRA_NAMES = (
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg", "pyproject.toml",
    "noxfile.py", "pytest.py", "py.py", "pluggy.py", ".coveragerc", "entry_points.txt",
)
INFRA_GLOBS = ("*.pth", "*.pyc", "*.pyo", "__pycache__/*", "*/__pycache__/*", "_pytest/*", "pytest/*", "pluggy/*",
               "py/*", "*/_pytest/*", "*/pluggy/*")
METADATA_SUFFIXES = (".egg-info", ".dist-info", ".egg-link", ".egg")
STARTUP_MODULES = ("sitecustomize", "usercustomize")
IMPORT_ROOTS = ("", "src")
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


def safe_relative_path(path: str) -> bool:
    """True when ``path`` stays inside the repository and outside ``.git``."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    norm = posixpath.normpath(path)
    if norm.startswith("../") or norm == ".." or norm == ".":
        return False
    return not any(part == ".git" for part in norm.split("/"))


def path_reason(path: str, test_patch_files, rules: dict, *, is_symlink: bool = False) -> str | None:
    """Why ``path`` may not be changed by a prediction, or None when it may.

    ``rules``: test_dirs, test_file_globs, infra_names, infra_globs, allow_symlinks (ProtectedPathsConfig).
    """
    if is_symlink and not rules.get("allow_symlinks", False):
        return "creates a symbolic link"
    if not safe_relative_path(path):
        return f"path {path!r} leaves the repository or touches .git"
    norm = posixpath.normpath(path)
    parts = norm.split("/")
    name = parts[-1]
    if norm in test_patch_files:
        return "file is changed by the task's test patch"
    if any(part in rules.get("test_dirs", TEST_DIRS) for part in parts[:-1]):
        return "file is in a test folder"
    if any(fnmatch.fnmatch(name, g) for g in rules.get("test_file_globs", TEST_FILE_GLOBS)):
        return "file is a test module"
    if name in rules.get("infra_names", INFRA_NAMES):
        return "file configures the test runner or the interpreter"
    if any(part.endswith(METADATA_SUFFIXES) for part in parts):
        return "packaging metadata can register plugins the test runner loads (entry points)"
    if any(part.split(".", 1)[0] in STARTUP_MODULES for part in parts):
        return "the interpreter imports this at start-up"
    if any(fnmatch.fnmatch(norm, g) for g in rules.get("infra_globs", INFRA_GLOBS)):
        return "file could shadow or configure the test runner"
    return None


def new_top_level_module(path: str, before) -> bool:
    """True when ``path`` (created by the patch) is a new module or package at an import root
    (the repository root or ``src/``): a name the interpreter or pytest may import at start-up."""
    parts = posixpath.normpath(path).split("/")
    prefix, rest = ("src/", parts[1:]) if parts[0] == "src" and len(parts) > 1 else ("", parts)
    if len(rest) == 1:
        return rest[0].endswith(MODULE_SUFFIXES)
    top = prefix + rest[0] + "/"
    return rest[-1].endswith(MODULE_SUFFIXES) and not any(p.startswith(top) for p in before)


# --- in the container ------------------------------------------------------------------


def _walk(root: str):
    """Every path below ``root`` (relative, files and links; .git skipped), with its lstat."""
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            try:
                yield os.path.relpath(full, root), os.lstat(full)
            except OSError:
                continue


def snapshot(root: str, out: str) -> None:
    """Before the patch: the paths that exist (the stamp is this file's own change time)."""
    with open(out, "w") as f:
        json.dump(sorted(p for p, _ in _walk(root)), f)


def _git(root: str, *args: str) -> str:
    return subprocess.run(["git", "-C", root, "-c", "core.hooksPath=/dev/null", *args], capture_output=True,
                          text=True, check=False).stdout


def guard(root: str, before_file: str, base: str, test_patch_files, rules: dict) -> dict:
    """After the patch: every path it changed (tracked or not, file, link or mode), judged by the rules;
    protected ones are put back (restored from ``base``, or removed when new). A protected path that
    existed before but is not in ``base`` cannot be put back: it is reported as refused."""
    stamp = os.stat(before_file).st_ctime_ns
    with open(before_file) as f:
        before = set(json.load(f))
    now = dict(_walk(root))
    changed = {p: st for p, st in now.items() if st.st_ctime_ns >= stamp}
    # what the patch deleted (or renamed away) leaves no inode behind: it existed before and not now
    changed.update({p: None for p in before if p not in now})
    restored, removed, refused = {}, {}, {}
    for path in sorted(changed):
        st = changed[path]
        is_link = st is not None and (st.st_mode & 0o170000) == 0o120000
        reason = path_reason(path, test_patch_files, rules, is_symlink=is_link)
        if reason is None and path not in before and new_top_level_module(path, before):
            reason = "a new top-level module can shadow one the interpreter or pytest imports at start-up"
        if reason is None:
            continue
        full = os.path.join(root, path)
        in_base = subprocess.run(["git", "-C", root, "cat-file", "-e", f"{base}:{path}"], capture_output=True).returncode == 0
        if in_base:
            if os.path.lexists(full) and (os.path.isdir(full) and not os.path.islink(full)):
                subprocess.run(["rm", "-rf", "--", full], check=False)
            _git(root, "checkout", "-q", base, "--", path)
            restored[path] = reason
        elif path not in before:
            subprocess.run(["rm", "-rf", "--", full], check=False)
            removed[path] = reason
        else:
            refused[path] = reason
    kept = sorted(p for p in changed if p in now and p not in restored and p not in removed)
    return {"restored": restored, "removed": removed, "refused": refused, "changed": kept}
