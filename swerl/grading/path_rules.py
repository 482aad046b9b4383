"""Which repository paths a prediction may not change, and the in-container guard that enforces it.

Standard library only, on purpose: the host applies these rules to the diff's sections, and
the same file is copied into every grading sandbox, where the set-up (``sandbox_setup.py``, run
with ``python3 -I -S``) snapshots the repository before the patch and calls ``guard`` after it,
to judge what actually changed in the container (whatever the diff parser believed: mixed
headers, timestamps after names, context diffs, fuzzy hunks).

What is protected is decided per task, from what the task's tests are, never from a folder's
name alone: the repository's own library code may be fixed even when it lives in ``testing/``,
``django/test/`` or pytest's own ``src/_pytest/``. The task's ``scope`` (``protected.task_scope``,
computed on the host) names its test files, the folders they live in and where pytest looks for
``conftest.py``. Protected:
* the task's tests: the test patch's files, the files and folders the test command names, every
  file under the nearest folder named like a test folder above one of the task's test files (its
  data, helpers and baselines), and ``conftest.py`` in any folder pytest loads one from (the test
  files' folders and their ancestors; everywhere when the command collects whole folders);
* test-runner configuration: ``pytest.ini`` and its kin, ``.coveragerc``, and, inside
  ``setup.cfg`` / ``tox.ini`` / ``pyproject.toml``, only the sections that configure the test
  run, register plugins or build the package (``config_reason``: the rest of the file, such as
  dependencies and versions, may change);
* packaging metadata, which registers plugins through entry points (``*.egg-info``,
  ``*.dist-info``, ``*.egg-link``, ``entry_points.txt``);
* interpreter start-up hooks: ``*.pth``, ``sitecustomize`` / ``usercustomize`` as modules,
  packages or extensions, bytecode;
* in the container only: a NEW top-level module or package at an import root (the repository
  root or ``src/``) whose name the environment already provides (the standard library, a
  site-packages module), a start-up file imports (``*.pth``, ``sitecustomize``) or pytest imports
  when present (``RUNNER_NAMES``): it would answer the interpreter or the runner. A new module of
  any other name is the fix's own;
* ``.git``, paths outside the repository, and symbolic links.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import glob
import json
import os
import posixpath
import re
import subprocess
import sys

TEST_DIR_NAMES = ("tests", "test", "testing")
TEST_FILE_GLOBS = ("test_*.py", "*_test.py", "tests.py", "conftest.py")
INFRA_NAMES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", ".coveragerc", "entry_points.txt")
INFRA_GLOBS = ("*.pth", "*.pyc", "*.pyo", "__pycache__/*", "*/__pycache__/*")
SECTION_FILES = ("setup.cfg", "tox.ini", "pyproject.toml")
# sections (and their sub-tables) that configure the test run, register plugins or build the package
PROTECTED_SECTIONS = ("pytest", "tool:pytest", "tool.pytest", "coverage", "tool.coverage", "options.entry_points",
                      "project.entry-points", "project.entry_points", "tool.poetry.plugins", "build-system",
                      "tool.setuptools.entry-points", "tool.flit.entrypoints", "tool.hatch.build")
# words that, on a changed line outside a section, can reach the runner's configuration (TOML dotted keys)
RISKY_WORDS = ("pytest", "addopts", "plugin", "entry-point", "entry_point", "entrypoint", "coverage", "conftest",
               "build-backend", "backend-path", "build-system")
METADATA_SUFFIXES = (".egg-info", ".dist-info", ".egg-link", ".egg")
STARTUP_MODULES = ("sitecustomize", "usercustomize")
IMPORT_ROOTS = ("", "src")
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")
SECTION_TEXT_MAX = 1_000_000  # bytes of a configuration file the snapshot keeps to judge its change


def safe_relative_path(path: str) -> bool:
    """True when ``path`` stays inside the repository and outside ``.git``."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    norm = posixpath.normpath(path)
    if norm.startswith("../") or norm == ".." or norm == ".":
        return False
    return not any(part == ".git" for part in norm.split("/"))


def _under(path: str, folder: str) -> bool:
    return folder in ("", ".") or path == folder or path.startswith(folder.rstrip("/") + "/")


def path_reason(path: str, scope: dict, rules: dict, *, is_symlink: bool = False) -> str | None:
    """Why ``path`` may not be changed by a prediction, or None when it may (a configuration file's
    sections are judged by ``config_reason`` in the container).

    ``scope``: the task's test_patch_files, test_files, test_dirs, conftest_dirs and collection_wide
    (``protected.task_scope``); ``rules``: test_file_globs, infra_names, infra_globs, allow_symlinks
    (ProtectedPathsConfig).
    """
    if is_symlink and not rules.get("allow_symlinks", False):
        return "creates a symbolic link"
    if not safe_relative_path(path):
        return f"path {path!r} leaves the repository or touches .git"
    norm = posixpath.normpath(path)
    parts = norm.split("/")
    name, folder = parts[-1], "/".join(parts[:-1])
    if norm in scope.get("test_patch_files", ()):
        return "file is changed by the task's test patch"
    if norm in scope.get("test_files", ()):
        return "file is one of the task's test files (named by its tests or its test command)"
    for tests in scope.get("test_dirs", ()):
        if _under(norm, tests):
            return f"file is in {tests + '/' if tests else 'the folder'} that holds the task's tests"
    if name == "conftest.py" and (scope.get("collection_wide") or folder in scope.get("conftest_dirs", ())):
        return "pytest loads this conftest.py for the task's tests"
    if scope.get("collection_wide") and any(fnmatch.fnmatch(name, g) for g in rules.get("test_file_globs", TEST_FILE_GLOBS)):
        return "file is a test module of a test command that collects whole folders"
    if name in rules.get("infra_names", INFRA_NAMES):
        return "file configures the test runner or the interpreter"
    if any(part.endswith(METADATA_SUFFIXES) for part in parts):
        return "packaging metadata can register plugins the test runner loads (entry points)"
    if any(part.split(".", 1)[0] in STARTUP_MODULES for part in parts):
        return "the interpreter imports this at start-up"
    if any(fnmatch.fnmatch(norm, g) for g in rules.get("infra_globs", INFRA_GLOBS)):
        return "the interpreter loads this at start-up or instead of the source (start-up hook, bytecode)"
    return None


def new_top_level_module(path: str, before) -> str | None:
    """The top-level module name ``path`` (created by the patch) adds at an import root (the repository root or
    ``src/``), or None when it adds none (not a module, not at an import root, or inside a package that existed
    before)."""
    parts = posixpath.normpath(path).split("/")
    prefix = "src/" if parts[0] == "src" and len(parts) > 1 else ""
    rest = parts[1:] if prefix else parts
    if not rest[-1].endswith(MODULE_SUFFIXES):
        return None
    if len(rest) == 1:
        return rest[0].split(".", 1)[0]
    return None if any(p.startswith(prefix + rest[0] + "/") for p in before) else rest[0]


# --- configuration files: only their test-run sections are protected ------------------------------------

_CLEAN_HEADER = re.compile(r"^\[\[?\s*([A-Za-z0-9_.:\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*\]\]?\s*(?:[#;].*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_\-]+|"[^"\n]*"|'[^'\n]*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|"[^"\n]*"|'[^'\n]*'))*)\s*[=:]""")


def _norm(name: str) -> str:
    return re.sub(r"[\s\"'\[\]]", "", name).lower()


def _protected_section(name: str) -> bool:
    norm = _norm(name)
    return any(norm == s or norm.startswith(s + ".") or norm.startswith(s + ":") for s in PROTECTED_SECTIONS)


def _holds_protected(path: str) -> bool:
    """Whether a key at dotted ``path`` can hold a protected table inline (``tool``, ``project``, ``tool.poetry``)."""
    norm = _norm(path)
    return any(s.startswith(norm + ".") for s in PROTECTED_SECTIONS)


def _sections(text: str, toml: bool) -> list[tuple[str | None, str | None, str]]:
    """Each line with the section and the key it belongs to (None before the first header, or before the first
    key), read so that a doubt protects: outside a TOML multi-line string, a clean header at the start of a line
    opens its section; a line that merely looks like a header (indented, quoted names, an array row) opens a
    section only when its name is a protected one, and otherwise leaves the previous section open, to be judged
    with it. A line that sets no key (an array's next row, an INI file's indented continuation; in TOML an
    indented line can set one) belongs to the last key."""
    out, section, key, in_string = [], None, None, None
    for line in text.split("\n"):
        if in_string is None:
            if line.strip().startswith("["):
                m = _CLEAN_HEADER.match(line)
                if m or _protected_section(line.strip().split("#", 1)[0]):
                    section, key = (m.group(1) if m else line.strip().strip("[]")), None
            else:
                k = _KEY.match(line)
                if k and (toml or not line[:1].isspace() or key is None):
                    key = k.group(1)
        out.append((section, key, line))
        for quote in ('"""', "'''"):
            count = len(re.findall(re.escape(quote), line.replace("\\" + quote[0], "")))
            if count % 2 and (in_string in (None, quote)):
                in_string = None if in_string == quote else quote
    return out


def _line_reason(section: str | None, key: str | None, line: str) -> str | None:
    stripped = line.strip()
    if not stripped or stripped.startswith(("#", ";")):
        return None  # a blank or comment line configures nothing
    if section is not None and _protected_section(section):
        return f"it changes the [{section}] section, which configures the test run, a plugin or the build"
    if stripped.startswith("[") and not _CLEAN_HEADER.match(line):
        return f"it changes a line that may open a section ({stripped[:60]!r})"
    if key is None:  # not in any key: judge the words
        lowered = line.lower()
        word = next((w for w in RISKY_WORDS if w in lowered), None)
        return f"it changes a line that mentions {word!r}, which may configure the test run" if word else None
    if "\\" in key:
        return "it changes a key spelled with an escape, which may spell a protected one"
    path = f"{section}.{key}" if section else key
    if _protected_section(path) or _holds_protected(path):
        return f"it changes {_norm(path)}, which configures the test run, a plugin or the build"
    return None


def config_reason(before: str, after: str, *, toml: bool = True) -> str | None:
    """Why a change from ``before`` to ``after`` of ``setup.cfg`` / ``tox.ini`` / ``pyproject.toml`` may not be
    applied (it touches a section or key that configures the test run, registers a plugin or builds the
    package, or one that could hold such a table inline), or None when it changes only other keys
    (dependencies, versions, other tools' settings), whatever their values say. ``toml``: pyproject.toml's
    format (else INI, as setup.cfg and tox.ini)."""
    old, new = _sections(before, toml), _sections(after, toml)
    matcher = difflib.SequenceMatcher(None, [line for *_, line in old], [line for *_, line in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for section, key, line in old[i1:i2] + new[j1:j2]:
            reason = _line_reason(section, key, line)
            if reason:
                return reason
    return None


# --- what the environment provides ---------------------------------------------------------------------

# what pytest imports when it is there (optional dependencies, colour, completion, plugins' hosts): a new module of
# such a name would answer the runner itself, even where the environment lacks it
RUNNER_NAMES = ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "tomli", "tomllib", "exceptiongroup",
                "importlib_metadata", "pygments", "colorama", "argcomplete", "pexpect", "readline", "attr", "attrs",
                "xdist", "execnet", "twisted", "nose", "mock", "unittest2", "zope", "typing_extensions", "numpy",
                "hypothesis", "_hypothesis_pytestplugin", "coverage", "pytest_cov", "apport_python_hook")
_IMPORTED = re.compile(r"\bfrom\s+([A-Za-z_]\w*)[\w.]*\s+import\b|\bimport\s+([\w., \t]+)|__import__\(\s*['\"]([A-Za-z_]\w*)")
_LIB_DIRS = ("/usr", "/usr/local", "/opt/*", "/opt/*/envs/*", "/opt/*/*", "/root/.local", "/root/.venv", "/root/*",
             "/venv", "/venv/*", "/home/*/.venv", "/home/*/.local", "/testbed/.venv", "/testbed/venv", "/py*")


def provided_names() -> set[str]:
    """Top-level module names the sandbox's Pythons provide outside the repository: built-ins, the standard
    library and every site-packages (a new module of one of these names at an import root shadows it)."""
    names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ())) | set(RUNNER_NAMES)
    folders = set(glob.glob("/usr/lib/python3/dist-packages"))
    for prefix in _LIB_DIRS:
        for lib in glob.glob(f"{prefix}/lib/python3*"):
            folders.update([lib, f"{lib}/site-packages", f"{lib}/dist-packages", f"{lib}/lib-dynload"])
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(MODULE_SUFFIXES) or "." not in entry:
                names.add(entry.split(".", 1)[0])
            if entry.endswith(".pth") or entry.split(".", 1)[0] in STARTUP_MODULES:
                names.update(_startup_imports(os.path.join(folder, entry)))
    return {n for n in names if n.isidentifier()}


def _startup_imports(path: str) -> set[str]:
    """The top-level names a start-up file (a ``.pth``, a ``sitecustomize``) imports: a module of one of these
    names that the environment lacks would be imported from the repository before any test runs."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = _IMPORTED.findall(f.read(200_000))
    except OSError:
        return set()
    names = set()
    for origin, listed, dunder in found:
        names.add(origin or dunder)
        names.update(part.split(" as ")[0].strip().split(".")[0] for part in listed.split(","))
    return {n for n in names if n.isidentifier()}


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


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(SECTION_TEXT_MAX + 1)
    except OSError:
        return None
    return None if len(data) > SECTION_TEXT_MAX else data.decode("utf-8", "replace")


def snapshot(root: str, out: str) -> None:
    """Before the patch: the paths that exist (the stamp is this file's own change time) and the text of every
    configuration file whose sections are judged (``config_reason``)."""
    paths = sorted(p for p, _ in _walk(root))
    # None for one too large or unreadable to judge
    texts = {p: _read_text(os.path.join(root, p)) for p in paths if posixpath.basename(p) in SECTION_FILES}
    with open(out, "w") as f:
        json.dump({"paths": paths, "texts": texts}, f)


def _git(root: str, *args: str) -> str:
    return subprocess.run(["git", "-C", root, "-c", "core.hooksPath=/dev/null", *args], capture_output=True,
                          text=True, check=False).stdout


def in_commit(root: str, commit: str, paths: list[str]) -> set[str]:
    """Which of ``paths`` exist in ``commit`` (one git process, however many paths)."""
    asked = [p for p in paths if "\n" not in p]
    if not asked:
        return set()
    out = subprocess.run(["git", "-C", root, "cat-file", "--batch-check"], input="".join(f"{commit}:{p}\n" for p in asked),
                         capture_output=True, text=True, check=False).stdout.splitlines()
    return {p for p, line in zip(asked, out) if not line.endswith(" missing")}


def differ_from(root: str, commit: str, paths: list[str]) -> set[str]:
    """Which of ``paths`` (files of ``commit``) differ from it in the working tree, content or mode; only these
    are read, so the cost follows the patch, not the repository."""
    found: set[str] = set()
    for i in range(0, len(paths), 500):  # argv stays short; pathspecs are literal, whatever the names hold
        out = subprocess.run(["git", "-C", root, "diff", "--name-only", "--no-renames", "-z", commit, "--",
                              *paths[i:i + 500]], capture_output=True, text=True, check=False,
                             env={**os.environ, "GIT_LITERAL_PATHSPECS": "1"})
        found |= set(out.stdout.split("\0")) - {""} if out.returncode == 0 else set(paths[i:i + 500])
    return found


def change_reason(root: str, path: str, exists: bool, is_link: bool, before: dict, scope: dict, rules: dict,
                  provided) -> str | None:
    """Why the patch's change to ``path`` (as found in the container) may not stand, or None.
    ``provided()`` gives the environment's module names (computed only when a new top-level module needs it)."""
    reason = path_reason(path, scope, rules, is_symlink=is_link)
    if reason is not None:
        return reason
    name = posixpath.basename(path)
    if name in SECTION_FILES:
        old = before["texts"].get(path)
        if path not in before["paths"] and posixpath.dirname(path) in scope.get("conftest_dirs", ()):
            return "a new configuration file where pytest looks for the configuration of the task's tests"
        if path in before["paths"] and old is None:
            return "configuration file too large or unreadable to judge its change"
        new = _read_text(os.path.join(root, path)) if exists and not is_link else ""
        if new is None:
            return "configuration file too large or unreadable to judge its change"
        why = config_reason(old or "", new, toml=name.endswith(".toml"))
        return f"{why} ({name})" if why else None
    if path not in before["paths"]:
        module = new_top_level_module(path, before["paths"])
        if module is not None and module in provided():
            return (f"a new top-level module {module!r} shadows the module of that name the environment provides "
                    "(the interpreter's or the test runner's)")
    return None


def guard(root: str, before_file: str, base: str, scope: dict, rules: dict) -> dict:
    """After the patch: every path it changed (tracked or not, file, link or mode), judged by the rules;
    protected ones are put back (restored from ``base``, or removed when new). A protected path that
    existed before but is not in ``base`` cannot be put back: it is reported as refused."""
    stamp = os.stat(before_file).st_ctime_ns
    with open(before_file) as f:
        before = json.load(f)
    before["paths"] = set(before["paths"])
    now = dict(_walk(root))
    # swebench's apply chain resets the tree between its commands (git checkout, git clean), which rewrites
    # files without changing them: a file of base_commit counts as changed only when it differs from it
    touched = [p for p, st in now.items() if st.st_ctime_ns >= stamp]
    gone = [p for p in before["paths"] if p not in now]
    tracked = in_commit(root, base, touched + gone)
    differs = differ_from(root, base, [p for p in touched if p in tracked])
    changed = {p: now[p] for p in touched if p not in tracked or p in differs}
    # what the patch deleted (or renamed away) leaves no inode behind: it existed before and not now (an
    # untracked file the reset's git clean removed is no change of the patch's unless the patch names it)
    changed.update({p: None for p in gone if p in tracked or p in scope.get("patch_paths", ())})
    provided = functools.lru_cache(maxsize=None)(provided_names)  # listed once, and only if a new module asks
    restored, removed, refused = {}, {}, {}
    for path in sorted(changed):
        st = changed[path]
        is_link = st is not None and (st.st_mode & 0o170000) == 0o120000
        reason = change_reason(root, path, st is not None, is_link, before, scope, rules, provided)
        if reason is None:
            continue
        full = os.path.join(root, path)
        if path in tracked:  # in base_commit: put back from it
            if os.path.lexists(full) and (os.path.isdir(full) and not os.path.islink(full)):
                subprocess.run(["rm", "-rf", "--", full], check=False)
            _git(root, "checkout", "-q", base, "--", path)
            restored[path] = reason
        elif path not in before["paths"]:
            subprocess.run(["rm", "-rf", "--", full], check=False)
            removed[path] = reason
        else:
            refused[path] = reason
    kept = sorted(p for p in changed if p in now and p not in restored and p not in removed)
    return {"restored": restored, "removed": removed, "refused": refused, "changed": kept}
