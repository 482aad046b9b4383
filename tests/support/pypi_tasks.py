"""SWE tasks over the real code and real test suites of public pure-Python packages, made at test time.

Nothing third-party is committed: each package is pinned to an exact version and sdist
hash, downloaded from PyPI with ``pip download`` (cached in ``$SWERL_SDIST_CACHE``, default
``~/.cache/swerl/sdists``, so reruns are cheap), unpacked, and turned into a mirror folder
``<repos>/<owner>__<name>`` the way swerl reads repositories:

* commit 1 (branch ``main``): the release as published;
* the base commit (branch ``swerl/bug-<slug>``): the same tree with one bug injected by a
  deterministic edit of one function, SWE-smith style. It is a root commit, so the original
  code is not in its history and ``export_testbed`` cannot leak it into the sandbox;
* the gold patch: ``git diff base original`` of the source file, i.e. the bug's reverse;
* the test patch: a new test file exercising the function, with ``@pytest.mark.parametrize``
  ids that contain spaces (``test_x[a b c-1-expected0]``).

Commits use fixed identities and dates, so the base commit's hash, hence the instance image's
tag, is the same on every run and image builds are reused.

FAIL_TO_PASS / PASS_TO_PASS are computed outside swerl's grader, as a publisher does: the
instance image is built with swerl's ``ImageBuilder``, then the tests run in it with plain
``docker run --network none`` before and after the gold patch (the test patch applied both
times), and each log is parsed with swebench's ``parse_log_pytest``. The published ids are
therefore the parser's: it cuts an id at its first space (``test_x[a b c-1-expected0]`` is
published as ``test_x[a``).

    .venv/bin/python -m tests.support.pypi_tasks --out DIR   # DIR/tasks.jsonl + DIR/repos/
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

TEST_CMD = "pytest --no-header -rA --tb=short -p no:cacheprovider"
P2P_LIMIT = 30
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "swerl-tests",
    "GIT_AUTHOR_EMAIL": "swerl-tests@localhost",
    "GIT_COMMITTER_NAME": "swerl-tests",
    "GIT_COMMITTER_EMAIL": "swerl-tests@localhost",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class Mutation:
    """One deterministic source edit: ``old`` must occur exactly once in ``path``."""

    path: str
    function: str
    old: str
    new: str
    kind: str  # SWE-smith-like name of the edit, for the instance id


@dataclass(frozen=True)
class Package:
    """A PyPI sdist pinned by version and hash, and the bug injected into it."""

    name: str
    version: str
    sha256: str
    repo: str  # owner/name on GitHub, the mirror folder's name
    build: str  # how the sdist builds, for the report
    pyproject_only: bool
    mutation: Mutation
    test_path: str  # the file the test patch adds
    test_source: str
    related_tests: tuple[str, ...]  # existing test files whose outcomes feed FAIL_TO_PASS / PASS_TO_PASS
    problem_statement: str
    # the image's install; a mirror has no tags (none reach a sandbox), so a setuptools-scm version is given
    install: str = "pip install -e ."
    reinstall: bool = False  # its eval script re-runs the install once the prediction is in, as SWE-bench's do

    @property
    def slug(self) -> str:
        return f"{self.name}-{self.version}-{self.mutation.function}"


@dataclass(frozen=True)
class TaskSpec:
    package: Package
    python: str

    @property
    def instance_id(self) -> str:
        owner, name = self.package.repo.split("/")
        m = self.package.mutation
        return f"{owner}__{name}.{self.package.version}.{m.kind}__{m.function}.py{self.python.replace('.', '')}"


MORE_ITERTOOLS = Package(
    name="more-itertools", version="10.2.0",
    sha256="8fccb480c43d3e99a00087634c06dd02b0d50fbf088b380de5a41a015ec239e1",
    repo="more-itertools/more-itertools", build="flit_core (pyproject.toml, plus a setup.py shim)", pyproject_only=False,
    mutation=Mutation(
        path="more_itertools/more.py", function="split_at", kind="func_pm_off_by_one",
        old="            if keep_separator:\n                yield [item]\n            if maxsplit == 1:\n",
        new="            if keep_separator:\n                yield [item]\n            if maxsplit == 0:\n",
    ),
    test_path="tests/test_split_at_spaces.py",
    test_source='''\
        """split_at with a limit on the number of splits, on text split at its spaces."""

        import pytest

        import more_itertools as mi


        def words(text, maxsplit):
            return ["".join(part) for part in mi.split_at(text, lambda c: c == " ", maxsplit=maxsplit)]


        @pytest.mark.parametrize(
            "text, maxsplit, expected",
            [
                ("a b c", 1, ["a", "b c"]),
                ("one two three four", 2, ["one", "two", "three four"]),
                ("x y", -1, ["x", "y"]),
                ("solo", 1, ["solo"]),
            ],
        )
        def test_split_at_spaces(text, maxsplit, expected):
            assert words(text, maxsplit) == expected


        def test_split_at_maxsplit_keeps_the_rest_whole():
            assert list(mi.split_at(range(6), lambda n: n % 2 == 1, maxsplit=1)) == [[0], [2, 3, 4, 5]]
        ''',
    related_tests=("tests/test_more.py",),
    problem_statement=textwrap.dedent("""\
        split_at splits once too often when maxsplit is given

        `maxsplit` should bound the number of splits, but one more split than asked for happens:

        ```python
        >>> from more_itertools import split_at
        >>> list(split_at("a b c", lambda c: c == " ", maxsplit=1))
        [['a'], ['b'], ['c']]
        ```

        Expected `[['a'], ['b', ' ', 'c']]`: after one split the rest of the iterable should come
        back whole. Without `maxsplit` (or with `-1`) the results are right.
        """),
)

TOOLZ = Package(
    name="toolz", version="0.12.1",
    sha256="ecca342664893f177a13dac0e6b41cbd8ac25a358e5f215316d43e2100224f4d",
    repo="pytoolz/toolz", build="setuptools (setup.py, versioneer)", pyproject_only=False,
    mutation=Mutation(
        path="toolz/itertoolz.py", function="partition_all", kind="func_pm_index",
        old="    if prev[-1] is no_pad:\n", new="    if prev[0] is no_pad:\n",
    ),
    test_path="toolz/tests/test_partition_all_tail.py",
    test_source='''\
        import pytest

        from toolz import partition_all


        @pytest.mark.parametrize(
            "n, seq, expected",
            [
                (2, [1, 2, 3, 4, 5], [(1, 2), (3, 4), (5,)]),
                (3, list(range(7)), [(0, 1, 2), (3, 4, 5), (6,)]),
                (2, [1, 2, 3, 4], [(1, 2), (3, 4)]),
            ],
            ids=["five items", "seven items", "even split"],
        )
        def test_partition_all_tail(n, seq, expected):
            assert list(partition_all(n, seq)) == expected
            assert list(partition_all(n, iter(seq))) == expected
        ''',
    related_tests=("toolz/tests/test_itertoolz.py",),
    problem_statement=textwrap.dedent("""\
        partition_all leaks its padding sentinel into the last tuple

        ```python
        >>> from toolz import partition_all
        >>> list(partition_all(2, [1, 2, 3, 4, 5]))
        [(1, 2), (3, 4), (5, '__no__pad__')]
        ```

        The final tuple should be shorter instead: `[(1, 2), (3, 4), (5,)]`, as the docstring
        says. Sequences whose length is a multiple of `n` are fine.
        """),
)

IDNA = Package(
    name="idna", version="3.6",
    sha256="9ecdbbd083b06798ae1e86adcbfe8ab1479cf864e4ee30fe4e46a003d12491ca",
    repo="kjd/idna", build="flit_core (pyproject.toml only)", pyproject_only=True,
    mutation=Mutation(
        path="idna/core.py", function="valid_label_length", kind="func_pm_op_change",
        old="    if len(label) > 63:\n", new="    if len(label) >= 63:\n",
    ),
    test_path="tests/test_label_length.py",
    test_source='''\
        import pytest

        import idna


        @pytest.mark.parametrize(
            "length, valid",
            [(1, True), (62, True), (63, True), (64, False)],
            ids=["1 char", "62 chars", "63 chars", "64 chars"],
        )
        def test_valid_label_length(length, valid):
            assert idna.valid_label_length("a" * length) is valid


        def test_encode_accepts_a_63_character_label():
            label = "a" * 63
            assert idna.encode(label + ".example") == label.encode() + b".example"
        ''',
    related_tests=("tests/test_idna.py",),
    problem_statement=textwrap.dedent("""\
        Labels of exactly 63 characters are rejected as too long

        ```python
        >>> import idna
        >>> idna.encode("a" * 63 + ".example")
        idna.core.IDNAError: Label too long
        ```

        RFC 1035 allows labels of up to 63 octets, so a 63-character label must be accepted;
        only 64 and more are too long.
        """),
)

PYTEST_MOCK = Package(
    name="pytest-mock", version="3.14.0",
    sha256="2719255a1efeceadbc056d6bf3df3d1c5015530fb40cf347c0f9afac88410bd0",
    repo="pytest-dev/pytest-mock", build="setuptools + setuptools-scm (pyproject.toml); a pytest plugin, by entry point",
    pyproject_only=True,
    mutation=Mutation(
        path="src/pytest_mock/plugin.py", function="resetall", kind="func_pm_arg_swap",
        old="                    return_value=return_value, side_effect=side_effect\n",
        new="                    return_value=side_effect, side_effect=return_value\n",
    ),
    test_path="tests/test_resetall_flags.py",
    test_source='''\
        import pytest


        @pytest.mark.parametrize(
            "return_value, side_effect",
            [(True, False), (False, True)],
            ids=["return value only", "side effect only"],
        )
        def test_resetall_resets_what_it_is_asked_to(mocker, return_value, side_effect):
            m = mocker.patch("os.getcwd", return_value="/x")
            m.side_effect = lambda: "/y"
            mocker.resetall(return_value=return_value, side_effect=side_effect)
            assert (m.side_effect is None) is side_effect
            assert (m.return_value == "/x") is not return_value
        ''',
    # its suite runs inner pytest sessions (pytester) that need the plugin loaded by its entry point
    related_tests=("tests/test_pytest_mock.py",),
    problem_statement=textwrap.dedent("""\
        mocker.resetall(return_value=True) resets side_effect instead

        ```python
        m = mocker.patch("os.getcwd", return_value="/x")
        m.side_effect = lambda: "/y"
        mocker.resetall(return_value=True)
        m.side_effect  # None: it was reset, though only return_value was asked for
        ```

        The two flags are swapped: `return_value=True` resets the side effect and
        `side_effect=True` the return value.
        """),
)

TRIO = Package(
    name="trio", version="0.27.0",
    sha256="1dcc95ab1726b2da054afea8fd761af74bad79bd52381b84eae408e983c76831",
    repo="python-trio/trio", build="setuptools (pyproject.toml, src layout); its pytest plugin named by -p in addopts",
    pyproject_only=False,
    # the bug is library code in a package named `testing` (trio.testing, what users import to test their code)
    mutation=Mutation(
        path="src/trio/testing/_checkpoints.py", function="_assert_yields_or_not", kind="func_pm_op_swap",
        old="            task._cancel_points == orig_cancel or task._schedule_points == orig_schedule\n",
        new="            task._cancel_points == orig_cancel and task._schedule_points == orig_schedule\n",
    ),
    test_path="src/trio/_tests/test_checkpoint_halves.py",
    test_source='''\
        import pytest

        from trio import _core
        from trio.testing import assert_checkpoints


        @pytest.mark.parametrize(
            "partial_yield",
            [_core.checkpoint_if_cancelled, _core.cancel_shielded_checkpoint],
            ids=["cancel point only", "schedule point only"],
        )
        async def test_half_a_checkpoint_is_not_one(partial_yield):
            with pytest.raises(AssertionError, match="did not yield"):
                with assert_checkpoints():
                    await partial_yield()


        async def test_a_whole_checkpoint_is_one():
            with assert_checkpoints():
                await _core.checkpoint()
        ''',
    related_tests=("src/trio/_tests/test_testing.py",),
    problem_statement=textwrap.dedent("""\
        trio.testing.assert_checkpoints accepts half a checkpoint

        A checkpoint is a cancel point *and* a schedule point, but `assert_checkpoints` is
        satisfied by either one alone:

        ```python
        with trio.testing.assert_checkpoints():
            await trio.lowlevel.cancel_shielded_checkpoint()  # schedules, never checks cancellation
        ```

        passes, though the block holds no checkpoint. It should raise
        `AssertionError: assert_checkpoints block did not yield!` unless both happened.
        """),
    reinstall=True,
)

PYTEST = Package(
    name="pytest", version="8.3.3",
    sha256="70b98107bd648308a7952b06e6ca9a50bc660be218d53c257cc1fc94fda10181",
    repo="pytest-dev/pytest", build="setuptools + setuptools-scm (pyproject.toml, src layout); the test runner itself",
    pyproject_only=False,
    # the repository is the runner: the fix is in `src/_pytest`, what runs the tests that judge it, and the tests
    # (in a folder named `testing`, with `-p pytester` and warnings as errors in its addopts) run pytest in pytest
    mutation=Mutation(
        path="src/_pytest/mark/expression.py", function="expr", kind="func_pm_op_change",
        old="        ret = ast.BoolOp(ast.Or(), [ret, rhs])\n", new="        ret = ast.BoolOp(ast.And(), [ret, rhs])\n",
    ),
    test_path="testing/test_keyword_or.py",
    test_source='''\
        from __future__ import annotations

        from _pytest.mark.expression import Expression
        from _pytest.pytester import Pytester
        import pytest


        @pytest.mark.parametrize(
            "expression, names, expected",
            [("a or b", {"a"}, True), ("a or b", {"b"}, True), ("a or b", set(), False), ("not a or b", {"a"}, False)],
            ids=["left", "right", "neither", "not binds tighter"],
        )
        def test_or_matches_either_side(expression: str, names: set[str], expected: bool) -> None:
            assert Expression.compile(expression).evaluate(lambda name, /, **kw: name in names) is expected


        def test_k_or_selects_both_tests(pytester: Pytester) -> None:
            pytester.makepyfile("def test_one(): pass\\ndef test_two(): pass\\ndef test_three(): pass\\n")
            result = pytester.runpytest("-k", "one or two")
            result.assert_outcomes(passed=2, deselected=1)
        ''',
    related_tests=("testing/test_mark_expression.py", "testing/test_mark.py"),
    problem_statement=textwrap.dedent("""\
        `-k "a or b"` selects only the tests matching both

        ```
        $ pytest -k "test_one or test_two"
        collected 3 items / 3 deselected / 0 selected
        ```

        `or` in a `-k` or `-m` expression behaves like `and`: a test must match both sides to be
        selected. `pytest -k "test_one or test_two"` should run `test_one` and `test_two`.
        """),
    # its pyproject.toml says `minversion = "2.0"`, which a version from the tagless mirror (0.1.dev1) fails
    install="SETUPTOOLS_SCM_PRETEND_VERSION=8.3.3 pip install -e .",
    reinstall=True,
)

PLUGGY = Package(
    name="pluggy", version="1.5.0",
    sha256="2cffa88e94fdc978c4c574f15f9e59b7f4201d439195c3715ca9e2486f1d0cf1",
    repo="pytest-dev/pluggy", build="setuptools + setuptools-scm (pyproject.toml, src layout); pytest's hook caller",
    pyproject_only=False,
    # the runner's other half: pytest calls every hook through the repository's pluggy
    mutation=Mutation(
        path="src/pluggy/_manager.py", function="unblock", kind="func_pm_bool_flip",
        old="            del self._name2plugin[name]\n            return True\n",
        new="            del self._name2plugin[name]\n            return False\n",
    ),
    test_path="testing/test_unblock_answer.py",
    test_source='''\
        import pytest

        from pluggy import PluginManager


        @pytest.mark.parametrize("blocked", [True, False], ids=["blocked", "never blocked"])
        def test_unblock_says_whether_the_name_was_blocked(blocked: bool) -> None:
            pm = PluginManager("example")
            if blocked:
                pm.set_blocked("plugin")
            assert pm.unblock("plugin") is blocked
            assert not pm.is_blocked("plugin")
        ''',
    related_tests=("testing/test_pluginmanager.py",),
    problem_statement=textwrap.dedent("""\
        PluginManager.unblock always returns False

        ```python
        pm = PluginManager("example")
        pm.set_blocked("plugin")
        pm.unblock("plugin")  # False, though the name was blocked and is now unblocked
        ```

        The docstring says it "returns whether the name was actually blocked".
        """),
    install="SETUPTOOLS_SCM_PRETEND_VERSION=1.5.0 pip install -e .",
)

PACKAGES = (MORE_ITERTOOLS, TOOLZ, IDNA)
# the shapes SWE-bench has that the three above lack: a pytest plugin whose own tests run pytest in pytest, and
# a bug inside a library's own `testing` package (src layout, async tests run by the library's pytest plugin)
SHAPE_SPECS = (TaskSpec(PYTEST_MOCK, "3.11"), TaskSpec(TRIO, "3.11"))
# repositories that are the test runner: pytest itself, and the hook caller pytest runs every hook through
RUNNER_SPECS = (TaskSpec(PYTEST, "3.11"), TaskSpec(PLUGGY, "3.11"))
# the pyproject.toml-only package installed editable on 3.9; toolz on both Pythons
TASK_SPECS = (
    TaskSpec(IDNA, "3.9"),
    TaskSpec(TOOLZ, "3.9"),
    TaskSpec(TOOLZ, "3.11"),
    TaskSpec(MORE_ITERTOOLS, "3.11"),
)


# --------------------------------------------------------------------------- sdists and mirrors

def sdist_cache_dir() -> Path:
    return Path(os.environ.get("SWERL_SDIST_CACHE") or Path.home() / ".cache" / "swerl" / "sdists")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_sdist(pkg: Package, cache_dir: Path | None = None) -> Path:
    """The package's sdist, from the cache or PyPI (``pip download``), checked against its pinned hash."""
    cache = Path(cache_dir or sdist_cache_dir()) / f"{pkg.name}-{pkg.version}"
    for found in sorted(cache.glob("*.tar.gz")) if cache.is_dir() else []:
        if _sha256(found) == pkg.sha256:
            return found
    with tempfile.TemporaryDirectory(prefix="swerl-sdist-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", f"{pkg.name}=={pkg.version}", "-d", tmp],
            capture_output=True, text=True, timeout=600,
        )
        files = sorted(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or len(files) != 1:
            raise RuntimeError(f"pip download {pkg.name}=={pkg.version} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        got = _sha256(files[0])
        if got != pkg.sha256:
            raise RuntimeError(f"{files[0].name}: sha256 {got}, pinned {pkg.sha256}")
        cache.mkdir(parents=True, exist_ok=True)
        dest = cache / files[0].name
        shutil.copyfile(files[0], dest.with_suffix(".partial"))
        os.replace(dest.with_suffix(".partial"), dest)
        return dest


def _git(*args: str, cwd: Path, input: str | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          input=input, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def _unpack(sdist: Path, dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="swerl-unpack-") as tmp, tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
        (top,) = [p for p in Path(tmp).iterdir()]
        for item in top.iterdir():
            shutil.move(str(item), dest / item.name)


def new_file_diff(path: str, text: str) -> str:
    """A git diff that adds ``path`` with ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


@dataclass
class Mirror:
    path: Path
    original_commit: str
    base_commit: str
    gold_patch: str


def make_mirror(pkg: Package, repos_dir: Path, cache_dir: Path | None = None) -> Mirror:
    """``<repos_dir>/<owner>__<name>``: the release on ``main`` and the buggy tree as a root commit."""
    owner, name = pkg.repo.split("/")
    path = Path(repos_dir) / f"{owner}__{name}"
    branch = f"swerl/bug-{pkg.mutation.function}"
    if not (path / ".git").exists():
        sdist = fetch_sdist(pkg, cache_dir)
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        _unpack(sdist, partial)
        _git("init", "-q", "-b", "main", cwd=partial)
        _git("add", "-A", cwd=partial)
        _git("commit", "-q", "-m", f"{pkg.name} {pkg.version} as published on PyPI", cwd=partial)
        source = partial / pkg.mutation.path
        text = source.read_text()
        if text.count(pkg.mutation.old) != 1:
            raise RuntimeError(f"{pkg.mutation.path} of {pkg.name} {pkg.version}: the edit's anchor occurs "
                               f"{text.count(pkg.mutation.old)} times, expected once")
        source.write_text(text.replace(pkg.mutation.old, pkg.mutation.new))
        _git("add", pkg.mutation.path, cwd=partial)
        tree = _git("write-tree", cwd=partial).strip()
        # a root commit: the original code is not in the base commit's history
        bug = _git("commit-tree", tree, "-m", f"{pkg.name} {pkg.version}", cwd=partial).strip()
        _git("branch", branch, bug, cwd=partial)
        _git("reset", "-q", "--hard", "main", cwd=partial)
        partial.rename(path)
    original = _git("rev-parse", "main", cwd=path).strip()
    base = _git("rev-parse", branch, cwd=path).strip()
    gold = _git("diff", "--no-color", "--no-ext-diff", base, original, "--", pkg.mutation.path, cwd=path)
    if not gold.strip():
        raise RuntimeError(f"{pkg.slug}: empty gold patch")
    return Mirror(path, original, base, gold)


# --------------------------------------------------------------------------- task records

def task_record(spec: TaskSpec, mirror: Mirror) -> dict:
    """A SWE-rebench-style record, FAIL_TO_PASS / PASS_TO_PASS still empty."""
    pkg = spec.package
    return {
        "instance_id": spec.instance_id,
        "repo": pkg.repo,
        "base_commit": mirror.base_commit,
        "patch": mirror.gold_patch,
        "test_patch": new_file_diff(pkg.test_path, textwrap.dedent(pkg.test_source)),
        "problem_statement": pkg.problem_statement,
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": pkg.version,
        "environment_setup_commit": mirror.base_commit,
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
        "install_config": {
            "python": spec.python,
            "install": pkg.install,
            "test_cmd": TEST_CMD,
            "log_parser": "parse_log_pytest",
        },
        "meta": {"source": f"pypi sdist {pkg.name}=={pkg.version}", "sha256": pkg.sha256, "build": pkg.build,
                 "pyproject_only": pkg.pyproject_only, "mutated_function": f"{pkg.mutation.path}::{pkg.mutation.function}"},
    }


def run_tests_in_image(image: str, patches: list[str], test_cmd: str, files: list[str], timeout: float = 900) -> tuple[int, str]:
    """Apply ``patches`` in /testbed of a fresh, networkless container of ``image``, run the tests; (exit, log)."""
    steps = ["cd /testbed"]
    for i, patch in enumerate(patches):
        b64 = base64.b64encode(patch.encode()).decode()
        steps.append(f"echo {b64} | base64 -d > /tmp/p{i}.diff && git apply /tmp/p{i}.diff || {{ echo 'PATCH {i} FAILED'; exit 97; }}")
    steps.append(f"{test_cmd} {' '.join(shlex.quote(f) for f in files)}")
    proc = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "bash", "-c", "\n".join(steps)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode == 97:
        raise RuntimeError(f"a patch does not apply in {image}: {proc.stdout[-1500:]}{proc.stderr[-500:]}")
    return proc.returncode, proc.stdout + proc.stderr


def parse_pytest_log(log: str) -> dict[str, str]:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return PARSER_REGISTRY["parse_log_pytest"](log, None)


def fail_and_pass(before: dict[str, str], after: dict[str, str], new_test_file: str,
                  limit: int = P2P_LIMIT) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS (failed before, passed after) and a spread subset of PASS_TO_PASS."""
    passed = {"PASSED", "XFAIL"}
    f2p = sorted(t for t, s in after.items() if s in passed and before.get(t) in {"FAILED", "ERROR"})
    both = sorted(t for t, s in after.items() if s in passed and before.get(t) in passed)
    mine = [t for t in both if t.startswith(new_test_file + "::")]
    rest = [t for t in both if t not in mine]
    room = max(0, limit - len(mine))
    step = max(1, len(rest) // room) if room else 0
    p2p = mine + (rest[::step][:room] if room else [])
    return f2p, sorted(p2p)


@dataclass
class Published:
    tasks_file: Path
    repos_dir: Path
    records: list[dict]
    images: dict[str, str]
    logs: dict[str, dict[str, str]] = field(default_factory=dict)  # instance_id -> {"before", "after"}


def publish(out: Path, specs: tuple[TaskSpec, ...] = TASK_SPECS, *, cache_dir: Path | None = None,
            build_log_dir: Path | None = None, builds: int = 2) -> Published:
    """Mirrors, images, F2P / P2P measured in the images, and ``out/tasks.jsonl`` loaded back through swerl."""
    from swerl.data.loaders import load_tasks
    from swerl.data.task import Task
    from swerl.envs.images import ImageBuilder, ImageConfig

    out = Path(out)
    repos = out / "repos"
    repos.mkdir(parents=True, exist_ok=True)
    mirrors = {pkg.name: make_mirror(pkg, repos, cache_dir) for pkg in {s.package.name: s.package for s in specs}.values()}
    records = [task_record(s, mirrors[s.package.name]) for s in specs]

    # images from the records as they stand: FAIL_TO_PASS / PASS_TO_PASS do not enter image tags
    drafts = [Task.model_validate({**r, "FAIL_TO_PASS": ["placeholder"]}) for r in records]
    builder = ImageBuilder(ImageConfig(repos=repos, build_logs=build_log_dir or out / "build-logs", builds=builds))
    outcomes = builder.build_all(drafts)
    failed = [f"{o.instance_id}: {o.error} (log {o.log_path})" for o in outcomes if not o.ok]
    if failed:
        raise RuntimeError("image builds failed:\n" + "\n".join(failed))
    images = {o.instance_id: o.image for o in outcomes}

    logs: dict[str, dict[str, str]] = {}
    for spec, record in zip(specs, records):
        pkg = spec.package
        files = [pkg.test_path, *pkg.related_tests]
        cmd = record["install_config"]["test_cmd"]
        image = images[record["instance_id"]]
        _, before = run_tests_in_image(image, [record["test_patch"]], cmd, files)
        code, after = run_tests_in_image(image, [record["test_patch"], record["patch"]], cmd, files)
        logs[record["instance_id"]] = {"before": before, "after": after}
        f2p, p2p = fail_and_pass(parse_pytest_log(before), parse_pytest_log(after), pkg.test_path)
        if not f2p:
            raise RuntimeError(f"{record['instance_id']}: no test fails without the gold patch and passes with it; "
                               f"log after gold (exit {code}):\n{after[-3000:]}")
        record["FAIL_TO_PASS"], record["PASS_TO_PASS"] = f2p, p2p

    tasks_file = out / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    loaded = load_tasks(tasks_file)
    assert [t.instance_id for t in loaded.tasks] == [r["instance_id"] for r in records], loaded
    return Published(tasks_file, repos, records, images, logs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    pub = publish(args.out)
    for r in pub.records:
        print(f"{r['instance_id']}  py{r['install_config']['python']}  F2P {len(r['FAIL_TO_PASS'])}  "
              f"P2P {len(r['PASS_TO_PASS'])}  image {pub.images[r['instance_id']]}")
        for t in r["FAIL_TO_PASS"]:
            print(f"    F2P {t}")
    print(f"tasks: {pub.tasks_file}\nrepos: {pub.repos_dir}")


if __name__ == "__main__":
    main()
